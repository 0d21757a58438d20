// Every CUDA kernel against a plain CPU reference on fresh random inputs (normalised error:
// fp32 1e-5, fp16 1e-2, bf16 4e-2), packed batches with lengths 1..max. Runs on a GPU machine
// (scripts/device-check.sh); not registered in CTest.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <tuple>

#include <cuda_fp8.h>

#include "engine/cuda/gemm.h"
#include "engine/cuda/quant_gemm.h"
#include "engine/cuda/small_gemm.h"
#include "tests/engine/cuda/reference.h"
#include "tests/engine/cuda/test_util.h"

namespace hotline::engine::cuda {
namespace {

using test::DevBuf;

std::string Name(DType t) { return DTypeName(t); }

struct GemmCase {
  int M, K, N;
};

void CheckGemm(DType t, GemmEpilogue epi, int residual_mode, const GemmCase& gc, bool tune,
               std::mt19937_64& rng) {
  SCOPED_TRACE(Name(t) + " " + GemmEpilogueName(epi) + " residual " +
               std::to_string(residual_mode) + " M=" + std::to_string(gc.M) + " K=" +
               std::to_string(gc.K) + " N=" + std::to_string(gc.N) + (tune ? " tuned" : ""));
  const int M = gc.M, K = gc.K, N = gc.N;
  const float wscale = 1.f / std::sqrt(float(K));
  std::vector<float> w = test::RandomVec(rng, size_t(K) * N, -wscale, wscale);
  std::vector<float> bias = test::RandomVec(rng, N);
  std::vector<float> x = test::RandomVec(rng, size_t(M) * K);
  std::vector<float> r = test::RandomVec(rng, size_t(M) * N);
  GemmTuningCache cache;
  const bool has_bias = epi != GemmEpilogue::kNone;
  Gemm g(w.data(), K, N, has_bias ? bias.data() : nullptr, epi, t, &cache, tune);
  LtWorkspace ws;
  auto dx = test::Upload(t, x);
  auto dr = test::Upload(t, r);
  DevBuf dy(size_t(M) * N * DTypeSize(t));
  CUDA_CHECK(cudaMemset(dy.get(), 0xff, dy.bytes()));  // poison: NaN in every element type
  void* y = residual_mode == 2 ? dr->get() : dy.get();
  if (residual_mode == 2 && epi != GemmEpilogue::kNone && epi != GemmEpilogue::kBias) {
    EXPECT_THROW(g.Run(dx->get(), M, y, dr->get(), ws, nullptr), Error);  // documented limit
    return;
  }
  g.Run(dx->get(), M, y, residual_mode ? dr->get() : nullptr, ws, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> got = test::Download(t, y, size_t(M) * N);

  std::vector<float> want(size_t(M) * N);
  ref::Linear(x.data(), M, K, w.data(), N, has_bias ? bias.data() : nullptr, want.data());
  for (size_t i = 0; i < want.size(); ++i) {
    double v = want[i];
    if (epi == GemmEpilogue::kBiasGelu) v = ref::Gelu(v);
    if (epi == GemmEpilogue::kBiasGeluTanh) v = ref::GeluTanh(v);
    if (epi == GemmEpilogue::kBiasTanh) v = std::tanh(v);
    if (residual_mode) v += r[i];
    want[i] = float(v);
  }
  EXPECT_LE(ref::RelErr(got, want), test::Tol(t));
}

TEST(CudaGemm, MatchesReferenceAllTypesEpiloguesResiduals) {
  std::mt19937_64 rng(test::Seed());
  const GemmCase shapes[] = {{1, 64, 96}, {37, 128, 40}, {64, 768, 768}};
  const GemmEpilogue epis[] = {GemmEpilogue::kNone, GemmEpilogue::kBias, GemmEpilogue::kBiasGelu,
                               GemmEpilogue::kBiasGeluTanh, GemmEpilogue::kBiasTanh};
  for (DType t : test::AllTypes())
    for (GemmEpilogue e : epis)
      for (int res = 0; res < 3; ++res)
        for (const auto& s : shapes) CheckGemm(t, e, res, s, /*tune=*/false, rng);
}

TEST(CudaGemm, TunedChoiceIsCorrectForBertShapes) {
  std::mt19937_64 rng(test::Seed() + 1);
  for (DType t : {DType::kF16, DType::kBF16}) {
    CheckGemm(t, GemmEpilogue::kBias, 0, {64, 768, 2304}, true, rng);
    CheckGemm(t, GemmEpilogue::kBiasGeluTanh, 0, {512, 768, 3072}, true, rng);
    CheckGemm(t, GemmEpilogue::kBias, 2, {300, 3072, 768}, true, rng);
  }
  CheckGemm(DType::kF32, GemmEpilogue::kBias, 1, {96, 768, 768}, true, rng);
}

// Our split-K small-M kernel directly (weights in its [N, K] layout), every split count.
TEST(CudaSmallGemm, MatchesReferenceForFewRows) {
  std::mt19937_64 rng(test::Seed() + 8);
  const GemmEpilogue epis[] = {GemmEpilogue::kNone, GemmEpilogue::kBias, GemmEpilogue::kBiasGelu,
                               GemmEpilogue::kBiasGeluTanh, GemmEpilogue::kBiasTanh};
  for (DType t : {DType::kF16, DType::kBF16}) {
    for (auto [M, K, N] : {std::tuple{1, 768, 768}, {13, 768, 2304}, {64, 3072, 768},
                           {64, 128, 64}}) {
      // Variants: (splits, 0 = separate reduce | 1 = fused | 2 = cp.async k slice of K / splits).
      std::vector<std::pair<int, int>> variants;
      for (int splits : SmallGemmSplits(K)) {
        variants.push_back({splits, 0});
        variants.push_back({splits, 1});
      }
      for (int ks : SmallGemmAsyncSlices(K)) variants.push_back({K / ks, 2});
      for (auto [splits, mode] : variants) {
        const bool fused = mode >= 1;
        const GemmEpilogue e = epis[rng() % 5];
        const bool with_res = rng() % 2;
        SCOPED_TRACE(Name(t) + " M=" + std::to_string(M) + " K=" + std::to_string(K) + " N=" +
                     std::to_string(N) + " splits=" + std::to_string(splits) + " mode " +
                     std::to_string(mode) + " " + GemmEpilogueName(e) + (with_res ? " +res" : ""));
        ASSERT_TRUE(SmallGemmEligible(t, M, K, N));
        const float ws_ = 1.f / std::sqrt(float(K));
        std::vector<float> w_nk = test::RandomVec(rng, size_t(N) * K, -ws_, ws_);
        std::vector<float> bias = test::RandomVec(rng, N), x = test::RandomVec(rng, size_t(M) * K);
        std::vector<float> r = test::RandomVec(rng, size_t(M) * N);
        auto dw = test::Upload(t, w_nk), db = test::Upload(t, bias), dx = test::Upload(t, x);
        auto dr = test::Upload(t, r);
        DevBuf dy(size_t(M) * N * DTypeSize(t)), dws(SmallGemmWorkspaceBytes(N, splits));
        DevBuf counters(kSmallGemmMaxTiles * sizeof(int));
        CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
        const bool has_bias = e != GemmEpilogue::kNone;
        // Fused: three launches, each on a poisoned output, so a counter left non-zero by one
        // launch (no reduction, or a reduction too early) shows in the next.
        for (int launch = 0; launch < (fused ? 3 : 1); ++launch) {
          CUDA_CHECK(cudaMemset(dy.get(), 0xff, dy.bytes()));
          if (mode == 2) {
            SmallGemmAsync(t, dx->get(), M, K, dw->get(), N, has_bias ? db->get() : nullptr, e,
                           with_res ? dr->get() : nullptr, dy.get(), K / splits, dws.get(),
                           counters.as<int>(), nullptr);
          } else {
            SmallGemm(t, dx->get(), M, K, dw->get(), N, has_bias ? db->get() : nullptr, e,
                      with_res ? dr->get() : nullptr, dy.get(), splits, fused, dws.get(),
                      counters.as<int>(), nullptr);
          }
        }
        std::vector<float> got = test::Download(t, dy.get(), size_t(M) * N), want(got.size());
        for (int m = 0; m < M; ++m) {
          for (int n = 0; n < N; ++n) {
            double v = has_bias ? bias[n] : 0.0;
            for (int k = 0; k < K; ++k) v += double(x[size_t(m) * K + k]) * w_nk[size_t(n) * K + k];
            if (e == GemmEpilogue::kBiasGelu) v = ref::Gelu(v);
            if (e == GemmEpilogue::kBiasGeluTanh) v = ref::GeluTanh(v);
            if (e == GemmEpilogue::kBiasTanh) v = std::tanh(v);
            if (with_res) v += r[size_t(m) * N + n];
            want[size_t(m) * N + n] = float(v);
          }
        }
        EXPECT_LE(ref::RelErr(got, want), test::Tol(t));
        std::vector<int> cnt(N / 64);
        CUDA_CHECK(cudaMemcpy(cnt.data(), counters.get(), cnt.size() * 4, cudaMemcpyDeviceToHost));
        for (int c : cnt) ASSERT_EQ(c, 0) << "a tile counter was not reset";
      }
    }
  }
  EXPECT_FALSE(SmallGemmEligible(DType::kF32, 8, 768, 768));
  EXPECT_FALSE(SmallGemmEligible(DType::kF16, 65, 768, 768));
  EXPECT_FALSE(SmallGemmEligible(DType::kF16, 8, 760, 768));
}

// INT8 / FP8 GEMMs: against a host simulation of the same quantisation (per-tensor activation
// scale, per-channel weight scales, exact products, FP32 sums) within the output type's rounding
// (FP32 out: within the bound the arithmetic allows, computed per case),
// and against the FP32 GEMM within the expected quantisation error (uniform data: about 0.6%
// normalised for INT8, about 3% for E4M3's 3 mantissa bits).
float HostQuantDequant(float v, QuantType q) {
  if (q == QuantType::kInt8) return std::max(-127.f, std::min(127.f, std::nearbyint(v)));
  const __nv_fp8_storage_t b = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(b, __NV_E4M3)));
}

TEST(CudaQuantGemm, Int8AndFp8MatchSimulationAndFp32WithinQuantisationError) {
  std::mt19937_64 rng(test::Seed() + 9);
  struct Case { int M, K, N; GemmEpilogue epi; bool res; };
  const Case cases[] = {{1, 768, 768, GemmEpilogue::kBias, false},
                        {64, 768, 2304, GemmEpilogue::kBias, false},
                        {37, 256, 1024, GemmEpilogue::kBiasGeluTanh, false},
                        {300, 3072, 768, GemmEpilogue::kBias, true},
                        {128, 128, 64, GemmEpilogue::kBiasGelu, false},
                        {16, 64, 48, GemmEpilogue::kBiasTanh, false},
                        {8, 64, 32, GemmEpilogue::kNone, true}};
  for (QuantType q : {QuantType::kInt8, QuantType::kFp8E4M3}) {
    if (!QuantTypeSupported(q)) {  // not silent: the type must be refused with an error
      std::vector<float> w(64 * 64, 0.1f);
      EXPECT_THROW(QuantGemm(w.data(), 64, 64, nullptr, GemmEpilogue::kNone, q, 0.01f,
                             DType::kF16),
                   Error);
      std::printf("%s GEMMs not supported on this GPU: refusal checked\n", QuantTypeName(q));
      continue;
    }
    for (DType out : test::AllTypes()) {
      for (const Case& c : cases) {
        SCOPED_TRACE(std::string(QuantTypeName(q)) + " -> " + Name(out) + " M=" +
                     std::to_string(c.M) + " K=" + std::to_string(c.K) + " N=" +
                     std::to_string(c.N) + " " + GemmEpilogueName(c.epi) + (c.res ? " +res" : ""));
        const float wsc = 1.f / std::sqrt(float(c.K));
        std::vector<float> w = test::RandomVec(rng, size_t(c.K) * c.N, -wsc, wsc);
        std::vector<float> bias = test::RandomVec(rng, c.N, -0.5f, 0.5f);
        std::vector<float> x = test::RandomVec(rng, size_t(c.M) * c.K);
        std::vector<float> r = test::RandomVec(rng, size_t(c.M) * c.N);
        auto dx = test::Upload(out, x);  // activations arrive in the output type
        auto dr = test::Upload(out, r);
        float amax = 0.f;
        for (float v : x) amax = std::max(amax, std::fabs(v));
        const float xs = amax / QuantMax(q);
        const bool has_bias = c.epi != GemmEpilogue::kNone;
        QuantGemm g(w.data(), c.K, c.N, has_bias ? bias.data() : nullptr, c.epi, q, xs, out);
        LtWorkspace ws;
        g.Prepare(c.M, c.res, ws, nullptr);
        std::printf("%s M=%d K=%d N=%d -> %s: %s\n", QuantTypeName(q), c.M, c.K, c.N,
                    Name(out).c_str(), g.path(c.M).c_str());
        DevBuf dxq(size_t(c.M) * c.K), dy(size_t(c.M) * c.N * DTypeSize(out));
        DevBuf acc(std::max<size_t>(g.AccBytes(c.M), 1));
        QuantizeActivations(out, dx->get(), int64_t(c.M) * c.K, xs, q, dxq.get(), nullptr);
        CUDA_CHECK(cudaMemset(dy.get(), 0xff, dy.bytes()));
        g.Run(dxq.get(), c.M, dy.get(), c.res ? dr->get() : nullptr, acc.get(), ws, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<float> got = test::Download(out, dy.get(), size_t(c.M) * c.N);

        // Host: the same quantisation, then exact products summed in double.
        std::vector<float> xq(x.size()), wq(w.size()), sc(c.N);
        for (size_t i = 0; i < x.size(); ++i) xq[i] = HostQuantDequant(x[i] / xs, q);
        for (int n = 0; n < c.N; ++n) {
          float m = 0.f;
          for (int k = 0; k < c.K; ++k) m = std::max(m, std::fabs(w[size_t(k) * c.N + n]));
          sc[n] = m > 0.f ? m / QuantMax(q) : 1.f;
          ASSERT_FLOAT_EQ(g.weight_scales()[n], sc[n]);
          for (int k = 0; k < c.K; ++k)
            wq[size_t(k) * c.N + n] = HostQuantDequant(w[size_t(k) * c.N + n] / sc[n], q);
        }
        auto finish = [&](double v, size_t i, int n) {
          if (has_bias) v += bias[n];
          if (c.epi == GemmEpilogue::kBiasGelu) v = ref::Gelu(v);
          if (c.epi == GemmEpilogue::kBiasGeluTanh) v = ref::GeluTanh(v);
          if (c.epi == GemmEpilogue::kBiasTanh) v = std::tanh(v);
          if (c.res) v += r[i];
          return float(v);
        };
        // The FP32 output's bound, from the arithmetic, per element (e) and then normalised like
        // RelErr, so it holds for every seed:
        //   accumulation: INT8 sums in int32, exactly; FP8 in the tensor cores keeps about 14
        //     bits of each partial sum (quant_gemm.h) and, without fast accumulation, is promoted
        //     to FP32 at intervals, so it loses at most 2^-13 of sum_k |xq_k wq_k| (scaled);
        //   epilogue: the scale product, scaling, int32-to-float, bias, activation (erff/tanhf,
        //     2 ulp) and residual are at most 16 FP32 roundings of the operands' magnitudes,
        //     bounded here by 2^-18 (64 units of 2^-24); the activations' slope is at most 1.13.
        const double acc_loss = q == QuantType::kFp8E4M3 ? std::ldexp(1.0, -13) : 0.0;
        const double epi_loss = std::ldexp(1.0, -18), slope = 1.13;
        double e2 = 0, sim2 = 0;
        std::vector<float> sim(got.size()), full(got.size());
        for (int m = 0; m < c.M; ++m) {
          for (int n = 0; n < c.N; ++n) {
            double sq = 0, sf = 0, sa = 0;
            for (int k = 0; k < c.K; ++k) {
              const double p = double(xq[size_t(m) * c.K + k]) * wq[size_t(k) * c.N + n];
              sq += p;
              sa += std::fabs(p);
              sf += double(x[size_t(m) * c.K + k]) * w[size_t(k) * c.N + n];
            }
            const size_t i = size_t(m) * c.N + n;
            const double scale = double(xs) * sc[n], a = sq * scale;
            sim[i] = finish(a, i, n);
            full[i] = finish(sf, i, n);
            const double mag = std::fabs(a) + (has_bias ? std::fabs(bias[n]) : 0.0) +
                               (c.res ? std::fabs(r[i]) : 0.0) + std::fabs(sim[i]);
            const double e = slope * acc_loss * sa * scale + epi_loss * slope * mag;
            e2 += e * e;
            sim2 += double(sim[i]) * sim[i];
          }
        }
        const double fp32_bound = std::sqrt(e2) / std::max(std::sqrt(sim2), 1e-30);
        EXPECT_LE(ref::RelErr(got, sim), out == DType::kF32 ? fp32_bound : test::Tol(out));
        EXPECT_LE(ref::RelErr(got, full), q == QuantType::kInt8 ? 2e-2 : 8e-2);
      }
    }
  }
  EXPECT_THROW(QuantGemm(nullptr, 60, 64, nullptr, GemmEpilogue::kNone, QuantType::kInt8, 0.1f,
                         DType::kF16),
               Error);
}

TEST(CudaGemm, TuningCacheRoundTripsThroughAFile) {
  std::mt19937_64 rng(test::Seed() + 2);
  std::vector<float> w = test::RandomVec(rng, 256 * 512);
  GemmTuningCache cache;
  Gemm g(w.data(), 256, 512, nullptr, GemmEpilogue::kNone, DType::kF16, &cache, true);
  LtWorkspace ws;
  g.Prepare(128, false, ws, nullptr);
  ASSERT_EQ(cache.size(), 1u);
  const std::string path = "/tmp/hotline_gemm_cache_test.txt";
  cache.Save(path);
  GemmTuningCache loaded;
  ASSERT_TRUE(loaded.Load(path));
  ASSERT_EQ(loaded.size(), 1u);
  const auto a = cache.Snapshot().begin()->second, b = loaded.Snapshot().begin()->second;
  EXPECT_EQ(0, std::memcmp(&a.algo, &b.algo, sizeof(a.algo)));
  EXPECT_EQ(a.desc, b.desc);
  EXPECT_EQ(a.small_splits, b.small_splits);
  EXPECT_EQ(a.small_fused, b.small_fused);
  EXPECT_EQ(a.small_kslice, b.small_kslice);
  EXPECT_GT(a.candidates, 1);  // timed several candidates
}

TEST(CudaLayerNorm, BiasResidualAndAliasing) {
  std::mt19937_64 rng(test::Seed() + 3);
  for (int variant : {0, 1}) {
  ScopedKernelVariants vs(variant);  // every variant must pass the same checks
  for (DType t : test::AllTypes()) {
    for (int H : {1, 37, 64, 256, 768, 1000, 1024}) {
      for (int mode = 0; mode < 4; ++mode) {  // plain, +bias, +bias+residual, in place
        SCOPED_TRACE(Name(t) + " H=" + std::to_string(H) + " mode " + std::to_string(mode) +
                     " variant " + std::to_string(variant));
        const int rows = 1 + int(rng() % 150);
        std::vector<float> x = test::RandomVec(rng, size_t(rows) * H, -3, 3);
        std::vector<float> r = test::RandomVec(rng, size_t(rows) * H);
        std::vector<float> b = test::RandomVec(rng, H);
        std::vector<float> g = test::RandomVec(rng, H, 0.5f, 1.5f), be = test::RandomVec(rng, H);
        auto dx = test::Upload(t, x);
        auto dr = test::Upload(t, r);
        auto db = test::Upload(t, b);
        auto dg = test::UploadF32(g), dbe = test::UploadF32(be);
        DevBuf dy(size_t(rows) * H * DTypeSize(t));
        CUDA_CHECK(cudaMemset(dy.get(), 0xff, dy.bytes()));
        void* y = mode == 3 ? dx->get() : dy.get();
        LayerNorm(t, dx->get(), mode >= 1 ? db->get() : nullptr, mode >= 2 ? dr->get() : nullptr,
                  dg->as<float>(), dbe->as<float>(), 1e-5f, rows, H, y, nullptr);
        std::vector<float> got = test::Download(t, y, size_t(rows) * H);
        std::vector<float> want(got.size());
        ref::LayerNorm(x.data(), mode >= 1 ? b.data() : nullptr, mode >= 2 ? r.data() : nullptr,
                       g.data(), be.data(), 1e-5f, rows, H, want.data());
        EXPECT_LE(ref::RelErr(got, want), test::Tol(t));
      }
    }
  }
  }
}

TEST(CudaEmbeddingLayerNorm, PackedBatchesWithAndWithoutTypes) {
  std::mt19937_64 rng(test::Seed() + 4);
  const int V = 1000, P = 130, TV = 2;
  for (int variant : {0, 1}) {
  ScopedKernelVariants vs(variant);  // every variant must pass the same checks
  for (DType t : test::AllTypes()) {
    for (int H : {64, 100, 768, 1024}) {  // 100: not a whole number of vectors (variant 0 path)
      for (int with_types = 0; with_types < 2; ++with_types) {
        SCOPED_TRACE(Name(t) + " H=" + std::to_string(H) + " types " + std::to_string(with_types) +
                     " variant " + std::to_string(variant));
        const int batch = 1 + int(rng() % 9), max_len = 1 + int(rng() % P);
        std::vector<int32_t> cu = test::RandomCu(rng, batch, max_len);
        const int T = cu.back();
        std::vector<int32_t> ids(T), types(T);
        for (auto& i : ids) i = int32_t(rng() % V);
        for (auto& i : types) i = int32_t(rng() % TV);
        std::vector<float> word = test::RandomVec(rng, size_t(V) * H),
                           pos = test::RandomVec(rng, size_t(P) * H),
                           type = test::RandomVec(rng, size_t(TV) * H),
                           g = test::RandomVec(rng, H, 0.5f, 1.5f), b = test::RandomVec(rng, H);
        auto dw = test::Upload(t, word), dp = test::Upload(t, pos), dt = test::Upload(t, type);
        auto dg = test::UploadF32(g), db = test::UploadF32(b);
        auto dids = test::UploadRaw(ids), dtypes = test::UploadRaw(types);
        auto dcu = test::UploadRaw(cu);
        DevBuf dy(size_t(T) * H * DTypeSize(t));
        CUDA_CHECK(cudaMemset(dy.get(), 0xff, dy.bytes()));
        EmbeddingLayerNorm(t, dids->as<int32_t>(), with_types ? dtypes->as<int32_t>() : nullptr,
                           dcu->as<int32_t>(), batch, T, dw->get(), V, dp->get(), P, dt->get(), TV,
                           dg->as<float>(), db->as<float>(), 1e-12f, H, dy.get(), nullptr);
        std::vector<float> got = test::Download(t, dy.get(), size_t(T) * H);
        std::vector<float> want(got.size());
        ref::Embed(ids.data(), with_types ? types.data() : nullptr, cu.data(), batch, word.data(),
                   pos.data(), type.data(), g.data(), b.data(), 1e-12f, H, want.data());
        EXPECT_LE(ref::RelErr(got, want), test::Tol(t));
      }
    }
  }
  }
}

void CheckAttention(DType t, int heads, int D, int batch, int max_len, std::mt19937_64& rng) {
  SCOPED_TRACE(Name(t) + " heads=" + std::to_string(heads) + " D=" + std::to_string(D) +
               " batch=" + std::to_string(batch) + " max_len=" + std::to_string(max_len) +
               (AttentionHasFastPath(t, D) ? " (tensor cores)" : " (exact kernel)") +
               " variant " + std::to_string(GetKernelVariants().attention));
  std::vector<int32_t> cu = test::RandomCu(rng, batch, max_len);
  const int T = cu.back(), extra = 5;  // rows past the last sequence must stay untouched
  const int HD = heads * D;
  std::vector<float> qkv = test::RandomVec(rng, size_t(T + extra) * 3 * HD, -2.f, 2.f);
  auto dq = test::Upload(t, qkv);
  auto dcu = test::UploadRaw(cu);
  DevBuf dctx(size_t(T + extra) * HD * DTypeSize(t));
  CUDA_CHECK(cudaMemset(dctx.get(), 0xff, dctx.bytes()));
  const float scale = 1.f / std::sqrt(float(D));
  // Launch bound larger than the real maximum, as a graph bucket does.
  Attention(t, dq->get(), dcu->as<int32_t>(), batch, max_len + 17, heads, D, scale, dctx.get(),
            nullptr);
  std::vector<float> got = test::Download(t, dctx.get(), size_t(T + extra) * HD);
  std::vector<float> want(size_t(T) * HD);
  ref::Attention(qkv.data(), cu.data(), batch, heads, D, scale, want.data());
  std::vector<float> got_rows(got.begin(), got.begin() + size_t(T) * HD);
  EXPECT_LE(ref::RelErr(got_rows, want), test::Tol(t));
  for (size_t i = size_t(T) * HD; i < got.size(); ++i) {
    ASSERT_TRUE(std::isnan(got[i])) << "row " << i / HD
                                    << " belongs to no sequence but was written";
  }
}

TEST(CudaAttention, PackedVariableLengthsAllTypesAndHeadSizes) {
  std::mt19937_64 rng(test::Seed() + 5);
  for (int variant : {0, 1, 2})
  for (DType t : test::AllTypes()) {
    ScopedKernelVariants vs(-1, variant);
    for (int D : {32, 64, 128, 48, 80}) {
      for (int max_len : {1, 17, 64, 65, 128, 200}) {
        CheckAttention(t, D == 64 ? 12 : 3, D, 1 + int(rng() % 6), max_len, rng);
      }
    }
  }
}

TEST(CudaAttention, EveryLengthUpTo130AtHead64) {
  std::mt19937_64 rng(test::Seed() + 6);
  for (int variant : {0, 1, 2})
  for (DType t : {DType::kF16, DType::kBF16}) {
    ScopedKernelVariants vs(-1, variant);
    std::vector<int32_t> lens;
    for (int L = 1; L <= 130; ++L) lens.push_back(L);
    std::vector<int32_t> cu(1, 0);
    for (int L : lens) cu.push_back(cu.back() + L);
    const int batch = int(lens.size()), heads = 2, D = 64, HD = heads * D, T = cu.back();
    std::vector<float> qkv = test::RandomVec(rng, size_t(T) * 3 * HD, -2.f, 2.f);
    auto dq = test::Upload(t, qkv);
    auto dcu = test::UploadRaw(cu);
    DevBuf dctx(size_t(T) * HD * DTypeSize(t));
    const float scale = 0.125f;
    Attention(t, dq->get(), dcu->as<int32_t>(), batch, 130, heads, D, scale, dctx.get(), nullptr);
    std::vector<float> got = test::Download(t, dctx.get(), size_t(T) * HD), want(got.size());
    ref::Attention(qkv.data(), cu.data(), batch, heads, D, scale, want.data());
    // Per sequence, so a wrong tile boundary at any length shows up.
    for (int b = 0; b < batch; ++b) {
      std::vector<float> g(got.begin() + size_t(cu[b]) * HD, got.begin() + size_t(cu[b + 1]) * HD);
      std::vector<float> w(want.begin() + size_t(cu[b]) * HD,
                           want.begin() + size_t(cu[b + 1]) * HD);
      EXPECT_LE(ref::RelErr(g, w), test::Tol(t))
          << Name(t) << " length " << lens[b] << " variant " << variant;
    }
  }
}

// Variant 2's short-sequence kernel: batches of sequences of at most 64 tokens large enough to
// fill the GPU (the launch bound rounded to 64, as the encoder's buckets are), several heads per
// block (e.g. 160 x 12 heads at D = 64: 4 per block on 132 SMs x 4; 600 x 12: all 12, more than
// one wave), empty sequences among them; against the FP64 reference, rows outside every sequence
// untouched; variant 1 on the same inputs for comparison.
TEST(CudaAttention, ManyShortSequencesSeveralHeadsPerBlock) {
  std::mt19937_64 rng(test::Seed() + 7);
  struct Case { int D, heads, batch, max_len; };
  for (DType t : {DType::kF16, DType::kBF16}) {
    for (const Case k : {Case{64, 12, 160, 64}, Case{64, 12, 600, 37}, Case{32, 8, 300, 64},
                         Case{128, 4, 400, 50}, Case{64, 6, 250, 1}}) {
      for (int variant : {1, 2}) {
        ScopedKernelVariants vs(-1, variant);
        SCOPED_TRACE(Name(t) + " D=" + std::to_string(k.D) + " heads=" + std::to_string(k.heads) +
                     " batch=" + std::to_string(k.batch) + " max_len=" +
                     std::to_string(k.max_len) + " variant " + std::to_string(variant));
        std::vector<int32_t> cu = test::RandomCu(rng, k.batch, k.max_len);
        for (int b = 5; b < k.batch; b += 37) {  // some empty sequences
          const int len = cu[b + 1] - cu[b];
          for (int j = b + 1; j <= k.batch; ++j) cu[j] -= len;
        }
        const int T = cu.back(), HD = k.heads * k.D, extra = 3;
        std::vector<float> qkv = test::RandomVec(rng, size_t(T + extra) * 3 * HD, -2.f, 2.f);
        auto dq = test::Upload(t, qkv);
        auto dcu = test::UploadRaw(cu);
        DevBuf dctx(size_t(T + extra) * HD * DTypeSize(t));
        CUDA_CHECK(cudaMemset(dctx.get(), 0xff, dctx.bytes()));
        const float scale = 1.f / std::sqrt(float(k.D));
        Attention(t, dq->get(), dcu->as<int32_t>(), k.batch, 64, k.heads, k.D, scale, dctx.get(),
                  nullptr);
        std::vector<float> got = test::Download(t, dctx.get(), size_t(T + extra) * HD);
        std::vector<float> want(size_t(T) * HD);
        ref::Attention(qkv.data(), cu.data(), k.batch, k.heads, k.D, scale, want.data());
        std::vector<float> rows(got.begin(), got.begin() + size_t(T) * HD);
        EXPECT_LE(ref::RelErr(rows, want), test::Tol(t));
        for (size_t i = size_t(T) * HD; i < got.size(); ++i) {
          ASSERT_TRUE(std::isnan(got[i])) << "row " << i / HD << " belongs to no sequence";
        }
      }
    }
  }
}

TEST(CudaHeads, SoftmaxArgmaxAndGather) {
  std::mt19937_64 rng(test::Seed() + 7);
  for (DType t : test::AllTypes()) {
    for (int n : {1, 5, 41, 64, 100}) {
      SCOPED_TRACE(Name(t) + " n=" + std::to_string(n));
      const int rows = 1 + int(rng() % 300), ld = (n + 7) / 8 * 8;
      std::vector<float> x = test::RandomVec(rng, size_t(rows) * ld, -5, 5);
      auto dx = test::Upload(t, x);
      DevBuf dl(size_t(rows) * n * 4), dp(size_t(rows) * n * 4), da(size_t(rows) * 4);
      SoftmaxArgmax(t, dx->get(), rows, n, ld, dl.as<float>(), dp.as<float>(), da.as<int32_t>(),
                    nullptr);
      std::vector<float> l(size_t(rows) * n), p(size_t(rows) * n);
      std::vector<int32_t> a(rows);
      CUDA_CHECK(cudaMemcpy(l.data(), dl.get(), l.size() * 4, cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaMemcpy(p.data(), dp.get(), p.size() * 4, cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaMemcpy(a.data(), da.get(), a.size() * 4, cudaMemcpyDeviceToHost));
      for (int r = 0; r < rows; ++r) {
        const float* xr = &x[size_t(r) * ld];
        int best = 0;
        double mx = xr[0], sum = 0;
        for (int i = 1; i < n; ++i) if (xr[i] > xr[best]) best = i, mx = xr[i];
        for (int i = 0; i < n; ++i) sum += std::exp(xr[i] - mx);
        ASSERT_EQ(a[r], best) << "row " << r;
        for (int i = 0; i < n; ++i) {
          ASSERT_EQ(l[size_t(r) * n + i], xr[i]);
          ASSERT_NEAR(p[size_t(r) * n + i], std::exp(xr[i] - mx) / sum, 1e-5);
        }
      }
    }
    // [CLS] gather.
    std::vector<int32_t> cu = test::RandomCu(rng, 7, 20);
    const int T = cu.back(), H = 48;
    std::vector<float> x = test::RandomVec(rng, size_t(T) * H);
    auto dx = test::Upload(t, x);
    auto dcu = test::UploadRaw(cu);
    DevBuf dy(size_t(7) * H * DTypeSize(t));
    GatherFirstToken(t, dx->get(), dcu->as<int32_t>(), 7, T, H, dy.get(), nullptr);
    std::vector<float> got = test::Download(t, dy.get(), size_t(7) * H);
    for (int b = 0; b < 7; ++b)
      for (int i = 0; i < H; ++i) ASSERT_EQ(got[size_t(b) * H + i], x[size_t(cu[b]) * H + i]);
  }
}

TEST(CudaErrors, BadArgumentsThrowHotlineErrors) {
  EXPECT_THROW(Attention(DType::kF16, nullptr, nullptr, 1, 8, 2, 300, 1.f, nullptr, nullptr),
               Error);
  EXPECT_THROW(LayerNorm(DType::kF32, nullptr, nullptr, nullptr, nullptr, nullptr, 1e-5f, 4, 0,
                         nullptr, nullptr),
               Error);
  std::vector<int32_t> cu = {0, 3, 2};
  EXPECT_THROW(CheckPackedBatch(cu.data(), 2, 8, 16), Error);
  cu = {0, 3, 20};
  EXPECT_THROW(CheckPackedBatch(cu.data(), 2, 8, 16), Error);
  EXPECT_EQ(CheckPackedBatch(cu.data(), 2, 8, 17), 17);
  GemmTuningCache cache;
  std::vector<float> w(4);
  EXPECT_THROW(Gemm(w.data(), 0, 4, nullptr, GemmEpilogue::kNone, DType::kF16, &cache, false),
               Error);
  // A failing CUDA call: the message names the file and line and CUDA's own text.
  try {
    CUDA_CHECK(cudaMemcpy(nullptr, reinterpret_cast<void*>(8), 16, cudaMemcpyDeviceToDevice));
    FAIL() << "expected a throw";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("kernels_test.cc:"), std::string::npos) << m;
    EXPECT_NE(m.find("cudaMemcpy"), std::string::npos) << m;
  }
  cudaGetLastError();  // clear the sticky-free error state of the failed call
}

}  // namespace
}  // namespace hotline::engine::cuda
