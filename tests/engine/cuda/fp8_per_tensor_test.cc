// FP8 with per-tensor weight scales (quant_gemm.h WeightScaling::kPerTensor, the FP8 encoders'
// default) and the quantised-output attention (encoder_quant.h AttentionQuant):
//   1. QuantGemm per tensor against CPU references in double:
//      - from the dequantised operands (the E4M3 values the GEMM multiplies): only the FP32
//        accumulation, the FP16/BF16 bias, cuBLASLt's tanh-GELU evaluation and the output
//        rounding differ -> tight bound, 10x below the quantisation error (FP16 out: 5e-3, BF16
//        out: 1e-2, E4M3 out: its own rounding, 2^-4 per value -> 0.065);
//      - from the FP32 operands: the quantisation error itself, <= 0.08 (E4M3 rounds each
//        operand by up to 2^-4, RMS ~3.6%, so a product carries ~5% and a K-term sum about the
//        same relative RMS), and per tensor no worse than per channel by more than 25% + 0.005
//        on weights whose columns differ 20x in magnitude (E4M3's precision is relative: a
//        smaller channel keeps its 3 mantissa bits until values fall below max / 2^15);
//      - the weight scale equals max |W| / 448 (hand formula) for every column;
//      - on sm_90 the path is cuBLASLt's per-tensor FP8 GEMM ("per-tensor scales"), with the
//        residual (beta = 1) in cuBLASLt too (whether it also takes the E4M3 output is printed).
//      Also at 4,096 rows, where QuantGemm's wide search chooses the configuration.
//   2. AttentionQuant against Attention followed by QuantizeActivations: every byte equal (at most
//      0.1% of bytes one E4M3/INT8 step apart, none further), FP16/BF16, head sizes 32/64/128,
//      batch 1 (16-query blocks) and larger batches, FP8 and INT8; FP32 is refused.
//   3. The whole FP8 encoder (4 layers, BERT-base width) per tensor against the FP16 encoder
//      (argmax agreement, relative error), against a CPU simulation with the same per-tensor
//      rounding (<= 0.08, as encoder_quant_test.cc bounds per channel), no worse than per
//      channel, and the same (bit-identical expected, 1e-3 asserted) with the attention fusion
//      on and off.
//   4. QuantGemm's choices through a timing-cache file (GemmTuningCache, QuantGemm::SetTuning) at
//      4,096 rows: saved, loaded, taken without timing and computing the same bytes; a foreign
//      entry refused and timed again; no tuning takes the heuristic's first, untimed.
//   5. Our own FP8 GEMM for FFN1 (fp8_gemm_sm90.h, sm_90): every configuration against a host
//      reference computed from the very E4M3 codes it multiplies (at most 5% of bytes one E4M3
//      step apart and 0.1% further: fast accumulation alone puts cuBLASLt's FFN1 at 0.03%
//      further, H200 2026-12-02), at a row count that leaves partial tiles; then through
//      QuantGemm (own_gemm 2 forces it, 0 never takes it; the choice kept in a timing-cache file
//      and taken from it in a later "process"); the same for the other two epilogues (bias FP16
//      out, bias + residual in place), every configuration against the host in double, FFN2's
//      shape with its residual through QuantGemm.
// Skips loudly when no CUDA device is present.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>

#include "engine/cuda/encoder_quant.h"
#include "engine/cuda/fp8_gemm_sm90.h"
#include "tests/engine/cuda/quant_reference.h"
#include "tests/engine/cuda/quant_test_util.h"
#include "tests/engine/cuda/test_util.h"

namespace hotline::engine::cuda {
namespace {

int DeviceSm() {
  int dev = 0, major = 0, minor = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  return major * 10 + minor;
}

float E4m3ToFloat(uint8_t b) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(b, __NV_E4M3)));
}

struct GemmCase {
  int M, K, N;
  GemmEpilogue epi;
  bool residual;
  DType out;
  bool e4m3_out;
  const char* name;
};

// y = epi(x . W + b) (+ r) in double from the given (already rounded) operands.
std::vector<float> RefGemm(const std::vector<float>& x, const std::vector<float>& w,
                           const std::vector<float>& b, const std::vector<float>* r, int M, int K,
                           int N, GemmEpilogue epi) {
  std::vector<float> y(size_t(M) * N);
#pragma omp parallel for schedule(static)
  for (int m = 0; m < M; ++m) {
    std::vector<double> acc(N, 0.0);
    for (int k = 0; k < K; ++k) {
      const double xv = x[size_t(m) * K + k];
      const float* wr = &w[size_t(k) * N];
      for (int n = 0; n < N; ++n) acc[n] += xv * wr[n];
    }
    for (int n = 0; n < N; ++n) {
      double v = acc[n] + b[n];
      if (epi == GemmEpilogue::kBiasGeluTanh) v = ref::GeluTanh(v);
      if (r) v += (*r)[size_t(m) * N + n];
      y[size_t(m) * N + n] = float(v);
    }
  }
  return y;
}

TEST(CudaFp8PerTensor, GemmMatchesDequantisedAndFp32References) {
  if (!test::HaveGpu("fp8 per-tensor")) GTEST_SKIP() << "no CUDA device";
  if (!QuantTypeSupported(QuantType::kFp8E4M3)) {
    std::vector<float> w(32 * 32, 0.1f);
    EXPECT_THROW(QuantGemm(w.data(), 32, 32, nullptr, GemmEpilogue::kNone, QuantType::kFp8E4M3,
                           0.01f, DType::kF16, 64, WeightScaling::kPerTensor),
                 Error);
    GTEST_SKIP() << "no FP8 on this GPU: refusal checked";
  }
  const bool sm90 = DeviceSm() >= 90;
  std::mt19937_64 rng(test::Seed() + 71);
  const GemmCase cases[] = {
      {200, 768, 2304, GemmEpilogue::kBias, false, DType::kF16, false, "qkv-like fp16"},
      {333, 768, 768, GemmEpilogue::kBias, true, DType::kF16, false, "out+residual fp16"},
      {128, 768, 3072, GemmEpilogue::kBiasGeluTanh, false, DType::kF16, false, "ffn1 gelu fp16"},
      {128, 768, 3072, GemmEpilogue::kBiasGeluTanh, false, DType::kF16, true, "ffn1 gelu e4m3 out"},
      {64, 3072, 768, GemmEpilogue::kBias, true, DType::kF16, false, "ffn2+residual fp16 M=64"},
      {96, 512, 256, GemmEpilogue::kBias, true, DType::kBF16, false, "bf16 out+residual"},
      // 4,096 rows: the wide search (KernelVariants::gemm_search, on by default) picks among
      // tiles, kernel options, cluster shapes and swizzles the heuristic never offered; its
      // choice must compute the same GEMM ("of N" in the path: N configurations timed).
      {4096, 768, 2304, GemmEpilogue::kBias, false, DType::kF16, false, "qkv-like fp16 M=4096"},
      {4096, 768, 768, GemmEpilogue::kBias, true, DType::kF16, false, "out+residual M=4096"},
      {4096, 768, 3072, GemmEpilogue::kBiasGeluTanh, false, DType::kF16, true,
       "ffn1 gelu e4m3 out M=4096"},
  };
  LtWorkspace ws;
  for (const GemmCase& gc : cases) {
    SCOPED_TRACE(gc.name);
    const int M = gc.M, K = gc.K, N = gc.N;
    // Columns of different magnitudes (x0.05 .. x1): per-channel scales would differ 20x.
    std::vector<float> w = test::RandomVec(rng, size_t(K) * N, -1.f, 1.f);
    std::vector<float> colscale = test::RandomVec(rng, N, 0.05f, 1.f);
    for (int k = 0; k < K; ++k)
      for (int n = 0; n < N; ++n) w[size_t(k) * N + n] *= 0.06f * colscale[n];
    std::vector<float> bias = test::RandomVec(rng, N, -0.5f, 0.5f);
    std::vector<float> x = test::RandomVec(rng, size_t(M) * K, -2.f, 2.f);
    auto dx = test::Upload(gc.out, x);  // x now holds the values the device holds
    const float xs = 2.f / 224;         // |x| <= 2 -> 224 (FP8 calibration keeps 2x headroom)
    const float ys = 8.f / 224;         // the E4M3 output's scale (|y| well below 8)
    std::vector<float> res;
    std::unique_ptr<test::DevBuf> dres;
    if (gc.residual) {
      res = test::RandomVec(rng, size_t(M) * N, -1.f, 1.f);
      dres = test::Upload(gc.out, res);
    }

    QuantGemm pt(w.data(), K, N, bias.data(), gc.epi, QuantType::kFp8E4M3, xs, gc.out, 4096,
                 WeightScaling::kPerTensor);
    QuantGemm pc(w.data(), K, N, bias.data(), gc.epi, QuantType::kFp8E4M3, xs, gc.out, 4096,
                 WeightScaling::kPerChannel);
    // The weight scale: max |W| / 448 for every column (hand formula).
    float wmax = 0.f;
    for (float v : w) wmax = std::max(wmax, std::fabs(v));
    ASSERT_EQ(pt.weight_scales().size(), size_t(N));
    for (float s : pt.weight_scales()) ASSERT_EQ(s, wmax / 448.f);
    EXPECT_EQ(pt.scaling(), WeightScaling::kPerTensor);
    if (gc.e4m3_out) pt.SetQuantisedOutput(ys);

    pt.Prepare(M, gc.residual, ws, nullptr);
    pc.Prepare(M, gc.residual, ws, nullptr);
    std::printf("%s M=%d K=%d N=%d: per tensor [%s], per channel [%s]\n", gc.name, M, K, N,
                pt.path(M).c_str(), pc.path(M).c_str());
    if (sm90) {
      // Which path cuBLASLt takes is a capability, not a correctness matter: on the H200 with
      // cuBLASLt 13.1 (2026-12-02) it refused the fused per-tensor GEMM and the FP32-scratch
      // path ran (the results below are checked either way). Said loudly, not asserted.
      if (!pt.Fused(M, gc.residual)) {
        std::printf("*** NOTE: cuBLASLt refused the fused per-tensor FP8 GEMM for %s: %s ***\n",
                    gc.name, pt.path(M).c_str());
      }
      if (gc.e4m3_out && !pt.QuantisedOutput(M)) {  // a capability, not a correctness matter
        std::printf("*** NOTE: cuBLASLt took no E4M3 output for %s: FFN1 keeps its quantise "
                    "pass ***\n", gc.name);
      }
    }

    test::DevBuf xq(size_t(M) * K), y(size_t(M) * N * 2), y2(size_t(M) * N * 2);
    test::DevBuf acc(std::max<size_t>({pt.AccBytes(M), pc.AccBytes(M), size_t(1)}));
    QuantizeActivations(gc.out, dx->get(), int64_t(M) * K, xs, QuantType::kFp8E4M3, xq.get(),
                        nullptr);
    const size_t ybytes = size_t(M) * N * DTypeSize(gc.out);
    if (gc.residual) {  // y starts as the residual: C = D, in place, as the encoder runs it
      CUDA_CHECK(cudaMemcpy(y.get(), dres->get(), ybytes, cudaMemcpyDeviceToDevice));
      CUDA_CHECK(cudaMemcpy(y2.get(), dres->get(), ybytes, cudaMemcpyDeviceToDevice));
    }
    pt.Run(xq.get(), M, y.get(), gc.residual ? y.get() : nullptr, acc.get(), ws, nullptr);
    pc.Run(xq.get(), M, y2.get(), gc.residual ? y2.get() : nullptr, acc.get(), ws, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());

    std::vector<float> got(size_t(M) * N);
    const bool e4m3 = pt.QuantisedOutput(M);
    if (e4m3) {
      std::vector<uint8_t> bytes(got.size());
      CUDA_CHECK(cudaMemcpy(bytes.data(), y.get(), bytes.size(), cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < got.size(); ++i) got[i] = E4m3ToFloat(bytes[i]) * ys;
    } else {
      got = test::Download(gc.out, y.get(), got.size());
    }
    const std::vector<float> got_pc = test::Download(gc.out, y2.get(), got.size());

    // Dequantised operands: x and W rounded exactly as the device rounds them.
    std::vector<float> xd(x.size());
    for (size_t i = 0; i < x.size(); ++i) xd[i] = ref::QDQ(x[i], xs, QuantType::kFp8E4M3);
    const std::vector<float> wd = ref::QDQWeightsPerTensor(w, QuantType::kFp8E4M3);
    const std::vector<float>* rp = gc.residual ? &res : nullptr;
    const std::vector<float> want_q = RefGemm(xd, wd, bias, rp, M, K, N, gc.epi);
    const std::vector<float> want = RefGemm(x, w, bias, rp, M, K, N, gc.epi);
    // The quantisation error is measured on the GEMM part only (the residual is exact input).
    auto minus_res = [&](std::vector<float> v) {
      if (rp)
        for (size_t i = 0; i < v.size(); ++i) v[i] -= res[i];
      return v;
    };
    const double e_tight = ref::RelErr(got, want_q);
    const double e_pt = ref::RelErr(minus_res(got), minus_res(want));
    const double e_pc = ref::RelErr(minus_res(got_pc), minus_res(want));
    std::printf("  vs dequantised operands %.5f (%s out); vs fp32 operands: per tensor %.4f, "
                "per channel %.4f\n",
                e_tight, e4m3 ? "e4m3" : DTypeName(gc.out), e_pt, e_pc);
    const double tight = e4m3 ? 0.065 : gc.out == DType::kBF16 ? 1e-2 : 5e-3;
    EXPECT_LE(e_tight, tight);
    EXPECT_LE(e_pt, e4m3 ? 0.10 : 0.08);
    EXPECT_LE(e_pc, 0.08);
    if (!e4m3) {
      EXPECT_LE(e_pt, 1.25 * e_pc + 0.005);
    }
  }
}

TEST(CudaFp8PerTensor, BadOptionsAreRefused) {
  if (!test::HaveGpu("fp8 per-tensor")) GTEST_SKIP() << "no CUDA device";
  EXPECT_EQ(ParseWeightScaling("per_tensor"), WeightScaling::kPerTensor);
  EXPECT_EQ(ParseWeightScaling("per_channel"), WeightScaling::kPerChannel);
  EXPECT_THROW(ParseWeightScaling("per_row"), Error);
  std::vector<float> w(32 * 32, 0.1f);
  // Fast accumulation is an FP8 option.
  EXPECT_THROW(QuantGemm(w.data(), 32, 32, nullptr, GemmEpilogue::kNone, QuantType::kInt8, 0.01f,
                         DType::kF16, 64, WeightScaling::kPerChannel, true),
               Error);
  w[5] = NAN;
  EXPECT_THROW(QuantGemm(w.data(), 32, 32, nullptr, GemmEpilogue::kNone, QuantType::kInt8, 0.01f,
                         DType::kF16, 64, WeightScaling::kPerTensor),
               Error);
  // The plan record line round-trips; an unknown value is an error, a missing line says so.
  WeightScaling s = WeightScaling::kPerChannel;
  EXPECT_TRUE(ParseFp8WeightScalingLine("x\n" + Fp8WeightScalingLine(WeightScaling::kPerTensor),
                                        &s));
  EXPECT_EQ(s, WeightScaling::kPerTensor);
  EXPECT_FALSE(ParseFp8WeightScalingLine("hotline-quant-scales fp8 0\n", &s));
  EXPECT_THROW(ParseFp8WeightScalingLine("hotline-fp8-weight-scaling per_row\n", &s), Error);
  int k = -1;
  EXPECT_TRUE(ParseFp8FastAccumLine("x\n" + Fp8FastAccumLine(768) + "y\n", &k));
  EXPECT_EQ(k, 768);
  EXPECT_FALSE(ParseFp8FastAccumLine("hotline-quant-scales fp8 0\n", &k));
  EXPECT_THROW(ParseFp8FastAccumLine("hotline-fp8-fast-accum-max-k -3\n", &k), Error);
  EXPECT_THROW(ParseFp8FastAccumLine("hotline-fp8-fast-accum-max-k 12x\n", &k), Error);
  // Any bound is recorded as one a load accepts (above every K: "every GEMM").
  EXPECT_TRUE(ParseFp8FastAccumLine(Fp8FastAccumLine(2000000000), &k));
  EXPECT_EQ(k, kFp8FastAccumAll);
  EXPECT_TRUE(ParseFp8FastAccumLine(Fp8FastAccumLine(-4), &k));
  EXPECT_EQ(k, 0);
  // Attention with a quantised output: FP32 has no such kernel and says so.
  EXPECT_FALSE(AttentionQuantSupported(DType::kF32, 64));
  EXPECT_FALSE(AttentionQuantSupported(DType::kF16, 48));
  EXPECT_THROW(AttentionQuant(DType::kF32, nullptr, nullptr, 1, 8, 2, 64, 1.f, 1.f,
                              QuantType::kFp8E4M3, nullptr, nullptr),
               Error);
  EXPECT_THROW(AttentionQuant(DType::kF16, nullptr, nullptr, 1, 8, 2, 64, 1.f, 0.f,
                              QuantType::kFp8E4M3, nullptr, nullptr),
               Error);
  // The kernel writes 4-byte words: an out_ld or ctx_q that breaks their alignment is refused.
  alignas(16) static uint8_t buf[64];
  EXPECT_THROW(AttentionQuant(DType::kF16, nullptr, nullptr, 1, 8, 2, 64, 1.f, 1.f,
                              QuantType::kFp8E4M3, buf, nullptr, false, 130),
               Error);
  EXPECT_THROW(AttentionQuant(DType::kF16, nullptr, nullptr, 1, 8, 2, 64, 1.f, 1.f,
                              QuantType::kFp8E4M3, buf + 2, nullptr),
               Error);
}

// Code distance between two 8-bit values in the type's order (E4M3: sign-magnitude codes).
int CodeDistance(uint8_t a, uint8_t b, QuantType q) {
  if (q == QuantType::kInt8) return std::abs(int(int8_t(a)) - int(int8_t(b)));
  auto ord = [](uint8_t v) { return (v & 0x80) ? -int(v & 0x7F) : int(v & 0x7F); };
  return std::abs(ord(a) - ord(b));
}

TEST(CudaFp8PerTensor, AttentionQuantEqualsAttentionThenQuantise) {
  if (!test::HaveGpu("fp8 per-tensor")) GTEST_SKIP() << "no CUDA device";
  std::mt19937_64 rng(test::Seed() + 72);
  for (QuantType q : {QuantType::kFp8E4M3, QuantType::kInt8}) {
    for (DType t : {DType::kF16, DType::kBF16}) {
      for (int D : {32, 64, 128}) {
        for (int batch : {1, 9, 150}) {  // 1: one-warp blocks; 9 x 130: two key tiles; 150 x 64
          const int heads = D == 64 ? 12 : 4, H = heads * D;
          const int max_len = batch == 9 ? 130 : 64;
          SCOPED_TRACE(std::string(QuantTypeName(q)) + " " + DTypeName(t) + " D=" +
                       std::to_string(D) + " batch=" + std::to_string(batch));
          ASSERT_TRUE(AttentionQuantSupported(t, D));
          const std::vector<int32_t> cu = test::RandomCu(rng, batch, max_len);
          const int T = cu.back();
          std::vector<float> qkv = test::RandomVec(rng, size_t(T) * 3 * H, -2.f, 2.f);
          auto dq = test::Upload(t, qkv);
          auto dcu = test::UploadRaw(cu);
          test::DevBuf ctx(size_t(T) * H * DTypeSize(t)), a(size_t(T) * H), b(size_t(T) * H);
          CUDA_CHECK(cudaMemset(a.get(), 0, a.bytes()));
          CUDA_CHECK(cudaMemset(b.get(), 0, b.bytes()));
          const float scale = 1.f / std::sqrt(float(D));
          const float os = 1.f / QuantMax(q) * (q == QuantType::kInt8 ? 1.f : 2.f);  // |ctx|<=2
          const int max_seqlen = (max_len + 63) / 64 * 64;  // as the encoder rounds it
          Attention(t, dq->get(), dcu->as<int32_t>(), batch, max_seqlen, heads, D, scale,
                    ctx.get(), nullptr);
          QuantizeActivations(t, ctx.get(), int64_t(T) * H, os, q, a.get(), nullptr);
          AttentionQuant(t, dq->get(), dcu->as<int32_t>(), batch, max_seqlen, heads, D, scale, os,
                         q, b.get(), nullptr);
          CUDA_CHECK(cudaDeviceSynchronize());
          std::vector<uint8_t> ha(a.bytes()), hb(b.bytes());
          CUDA_CHECK(cudaMemcpy(ha.data(), a.get(), ha.size(), cudaMemcpyDeviceToHost));
          CUDA_CHECK(cudaMemcpy(hb.data(), b.get(), hb.size(), cudaMemcpyDeviceToHost));
          int diff = 0, far = 0, nonzero = 0;
          for (size_t i = 0; i < ha.size(); ++i) {
            const int d = CodeDistance(ha[i], hb[i], q);
            diff += d != 0;
            far += d > 1;
            nonzero += hb[i] != 0;
          }
          EXPECT_EQ(far, 0);
          EXPECT_LE(diff, int(ha.size() / 1000));
          EXPECT_GT(nonzero, int(ha.size() / 2));  // the output is really there
          if (diff) std::printf("  %d of %zu bytes one step apart\n", diff, ha.size());
        }
      }
    }
  }
}

using test::Agree;

TEST(CudaFp8PerTensor, EncoderPerTensorAgreesWithFp16AndTheSimulation) {
  if (!test::HaveGpu("fp8 per-tensor")) GTEST_SKIP() << "no CUDA device";
  if (!QuantTypeSupported(QuantType::kFp8E4M3)) GTEST_SKIP() << "no FP8 on this GPU";
  std::mt19937_64 rng(test::Seed() + 73);
  EncoderConfig c;  // BERT-base width, 4 layers
  c.layers = 4;
  c.vocab = 5000;
  c.max_pos = 160;
  const EncoderWeights w = EncoderWeights::Random(c, rng());
  EXPECT_EQ(EncoderOptions().fp8_weight_scaling, WeightScaling::kPerTensor);  // the default
  const std::vector<float> amax = CalibrateEncoderAmax(
      c, w, test::QuantEncoderOptions(EncoderQuant::kNone, {}, 32), RandomEncoderBatches(c, 4, 16, 128, rng()));
  const std::vector<float> scales = ScalesFromAmax(amax, EncoderQuant::kFp8);
  const EncoderBatch b = RandomEncoderBatches(c, 1, 32, 128, rng())[0];
  const int B = int(b.cu.size()) - 1;

  auto f16 = CudaEncoder::Create(c, w, test::QuantEncoderOptions(EncoderQuant::kNone, {}, 32));
  EncoderOutputs o16;
  f16->CreateContext()->Run(b.ids.data(), b.types.data(), b.cu.data(), B, &o16);

  struct Run {
    WeightScaling sc;
    bool fuse_attention;
    EncoderOutputs out;
    int fast_accum_max_k = 0;
  };
  // The last run: the encoder's defaults (fast accumulation for every GEMM, FFN2's K = 3072 too).
  Run runs[] = {{WeightScaling::kPerTensor, true, {}},
                {WeightScaling::kPerTensor, false, {}},
                {WeightScaling::kPerChannel, true, {}},
                {WeightScaling::kPerTensor, true, {}, EncoderOptions().fp8_fast_accum_max_k}};
  for (Run& r : runs) {
    EncoderOptions o = test::QuantEncoderOptions(EncoderQuant::kFp8, scales, 32, r.sc);
    o.quant_fuse_attention = r.fuse_attention;
    o.fp8_fast_accum_max_k = r.fast_accum_max_k;
    auto enc = CudaEncoder::Create(c, w, o);
    auto ctx = enc->CreateContext();
    ctx->Run(b.ids.data(), b.types.data(), b.cu.data(), B, &r.out);
    for (const auto& p : enc->QuantPaths(CudaEncoderContext::TokenBucket(b.cu.back(), 32 * 128)))
      std::printf("  %s%s: %s\n", WeightScalingName(r.sc),
                  r.fuse_attention ? "" : " (attention unfused)", p.c_str());
  }
  const EncoderOutputs& pt = runs[0].out;
  const EncoderOutputs& pc = runs[2].out;
  // Attention writing the 8-bit input itself changes no byte of the GEMM inputs (or, at most, a
  // rare byte by one step: see AttentionQuantEqualsAttentionThenQuantise): same logits.
  const bool same = pt.intent_logits == runs[1].out.intent_logits &&
                    pt.slot_logits == runs[1].out.slot_logits;
  std::printf("attention fused vs unfused: %s\n", same ? "bit-identical" : "not bit-identical");
  EXPECT_LE(ref::RelErr(pt.intent_logits, runs[1].out.intent_logits), 1e-3);
  EXPECT_LE(ref::RelErr(pt.slot_logits, runs[1].out.slot_logits), 1e-3);

  const ref::EncoderResult sim = ref::QuantEncoder(c, w, scales, QuantType::kFp8E4M3, true, b.ids,
                                                   b.types, b.cu, nullptr, true);
  const double si = ref::RelErr(pt.intent_logits, sim.intent_logits);
  const double ss = ref::RelErr(pt.slot_logits, sim.slot_logits);
  const double ei = ref::RelErr(pt.intent_logits, o16.intent_logits);
  const double es = ref::RelErr(pt.slot_logits, o16.slot_logits);
  const double ci = ref::RelErr(pc.intent_logits, o16.intent_logits);
  const double cs = ref::RelErr(pc.slot_logits, o16.slot_logits);
  const int ia = Agree(pt.intent, o16.intent), sa = Agree(pt.slots, o16.slots);
  const int ca = Agree(pc.intent, o16.intent), csa = Agree(pc.slots, o16.slots);
  std::printf("fp8 per tensor vs fp16: intent %.4f slot %.4f, agree %d/%d intents %d/%zu slots; "
              "per channel vs fp16: %.4f %.4f, agree %d/%d, %d/%zu; per tensor vs simulation: "
              "%.4f %.4f\n",
              ei, es, ia, B, sa, o16.slots.size(), ci, cs, ca, B, csa, o16.slots.size(), si, ss);
  EXPECT_LE(si, 0.08);
  EXPECT_LE(ss, 0.08);
  {  // Fast accumulation (the default) stays near exact accumulation's error against FP16.
    const EncoderOutputs& fa = runs[3].out;
    const double fi = ref::RelErr(fa.intent_logits, o16.intent_logits);
    const double fs = ref::RelErr(fa.slot_logits, o16.slot_logits);
    std::printf("fp8 per tensor, fast accumulation for K <= %d (the default), vs fp16: intent %.4f "
                "slot %.4f, agree %d/%d intents (exact: %.4f %.4f)\n", runs[3].fast_accum_max_k, fi, fs,
                Agree(fa.intent, o16.intent), B, ei, es);
    EXPECT_LE(fi, 1.3 * ref::RelErr(pt.intent_logits, o16.intent_logits) + 0.01);
    EXPECT_LE(fs, 1.3 * ref::RelErr(pt.slot_logits, o16.slot_logits) + 0.01);
    EXPECT_GE(Agree(fa.intent, o16.intent), Agree(pt.intent, o16.intent) - 3);
  }
  EXPECT_LE(ei, 0.15);
  EXPECT_LE(es, 0.15);
  EXPECT_LE(ei, 1.3 * ci + 0.01);
  EXPECT_LE(es, 1.3 * cs + 0.01);
  EXPECT_GE(ia, int(0.6 * B));
  // Random weights leave near-tie intents: on one seed (H200, 2026-12-02) per tensor kept 23/32
  // where per channel kept 27 with relative errors 0.084 and 0.081, so within 6 of 32; the
  // relative-error bounds above are the tight comparison.
  EXPECT_GE(ia, ca - 6);
  EXPECT_GE(sa, int(0.85 * o16.slots.size()));
  for (int i = 0; i < B; ++i) {
    double s = 0;
    for (int k = 0; k < c.n_intents; ++k) s += pt.intent_probs[size_t(i) * c.n_intents + k];
    EXPECT_NEAR(s, 1.0, 1e-4);
  }
}

// Reads a whole text file (the timing cache as saved).
std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool SameAlgo(const cublasLtMatmulAlgo_t& a, const cublasLtMatmulAlgo_t& b) {
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

// QuantGemm's choices in the timing cache (QuantGemm::SetTuning, a GemmTuningCache file), at
// 4,096 rows (where the fused FP8 path runs the wide search, ~1 s), per channel and per tensor:
//   - the first GEMM times (source "timed") and its cache then holds exactly one entry, a
//     "quant|" key naming 4096x768x768, which Save writes and Load reads back with the same
//     algorithm bytes, candidate count and time (6 digits as written);
//   - after the process forgets its choices (as a new process starts), a second GEMM with the
//     loaded cache takes the file's choice without timing (source "timing cache", the file's
//     candidate count, the same algorithm, nothing added to the cache) and computes the same
//     output bytes as the first (same algorithm, same data; an in-place split-K reduction would
//     not be bit-stable: then 1e-3) and matches the CPU reference of the dequantised operands
//     (5e-3, as GemmMatchesDequantisedAndFp32References bounds it);
//   - a third GEMM in the same process reuses the process's choice (source "reused");
//   - an entry cuBLASLt does not accept for this problem (an FP16 algorithm stored under the
//     FP8 problem's key, saved and loaded) is not used: the GEMM times again and replaces it,
//     and still matches the reference;
//   - without tuning (SetTuning(cache, false)) the heuristic's first algorithm runs untimed
//     (ms -1, 0 candidates), under its own "|heuristic" key, and matches the reference.
TEST(CudaFp8PerTensor, QuantGemmChoicesPersistInTheTimingCacheFile) {
  if (!test::HaveGpu("quant timing cache")) GTEST_SKIP() << "no CUDA device";
  if (!QuantTypeSupported(QuantType::kFp8E4M3)) {
    GTEST_SKIP() << "no FP8 on this GPU (GemmMatchesDequantisedAndFp32References checks the "
                    "refusal)";
  }
  namespace fs = std::filesystem;
  const test::ScopedTempDir tmp("hotline_quant_timing_cache");  // removed also on ASSERTs
  const fs::path& dir = tmp.path();
  const std::string file = (dir / "timing.cache").string();
  const std::string foreign_file = (dir / "foreign.cache").string();
  std::mt19937_64 rng(test::Seed() + 91);
  const int M = 4096, K = 768, N = 768;
  std::vector<float> w = test::RandomVec(rng, size_t(K) * N, -0.06f, 0.06f);
  std::vector<float> bias = test::RandomVec(rng, N, -0.5f, 0.5f);
  std::vector<float> x = test::RandomVec(rng, size_t(M) * K, -2.f, 2.f);
  auto dx = test::Upload(DType::kF16, x);
  const float xs = 2.f / 224;
  LtWorkspace ws;
  test::DevBuf xq(size_t(M) * K), y1(size_t(M) * N * 2), y2(size_t(M) * N * 2);
  test::DevBuf acc(size_t(M) * N * 4);  // the largest scratch any path needs
  QuantizeActivations(DType::kF16, dx->get(), int64_t(M) * K, xs, QuantType::kFp8E4M3, xq.get(),
                      nullptr);
  std::vector<float> xd(x.size());
  for (size_t i = 0; i < x.size(); ++i) xd[i] = ref::QDQ(x[i], xs, QuantType::kFp8E4M3);
  auto run = [&](QuantGemm& g, const test::DevBuf& y) {
    g.Run(xq.get(), M, y.get(), nullptr, acc.get(), ws, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    return test::Download(DType::kF16, y.get(), size_t(M) * N);
  };
  // An FP16 algorithm: a valid cuBLASLt algorithm, but not one for an FP8 problem.
  cublasLtMatmulAlgo_t fp16_algo;
  {
    int ids[4], n = 0;
    ASSERT_EQ(cublasLtMatmulAlgoGetIds(ws.handle(), CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16F,
                                       CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, 4, ids, &n),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_GT(n, 0);
    ASSERT_EQ(cublasLtMatmulAlgoInit(ws.handle(), CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16F,
                                     CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, ids[0], &fp16_algo),
              CUBLAS_STATUS_SUCCESS);
  }

  for (WeightScaling sc : {WeightScaling::kPerChannel, WeightScaling::kPerTensor}) {
    SCOPED_TRACE(WeightScalingName(sc));
    const std::vector<float> wd = sc == WeightScaling::kPerTensor
                                      ? ref::QDQWeightsPerTensor(w, QuantType::kFp8E4M3)
                                      : ref::QDQWeights(w, K, N, QuantType::kFp8E4M3);
    const std::vector<float> want = RefGemm(xd, wd, bias, nullptr, M, K, N, GemmEpilogue::kBias);
    auto make = [&](GemmTuningCache* cache, bool tune) {
      auto g = std::make_unique<QuantGemm>(w.data(), K, N, bias.data(), GemmEpilogue::kBias,
                                           QuantType::kFp8E4M3, xs, DType::kF16, M, sc);
      g->SetTuning(cache, tune);
      g->Prepare(M, false, ws, nullptr);
      std::printf("  %s: %s\n", WeightScalingName(sc), g->path(M).c_str());
      return g;
    };

    // 1. Timed, stored, saved.
    QuantGemm::ForgetProcessChoices();
    GemmTuningCache c1;
    auto g1 = make(&c1, true);
    const QuantGemm::TuneInfo t1 = g1->Tuning(M, false);
    EXPECT_EQ(t1.source, QuantTuneSource::kTimed);
    EXPECT_GT(t1.candidates, 0);
    EXPECT_GT(t1.ms, 0.f);
    EXPECT_THROW(g1->SetTuning(nullptr, true), Error);  // only before Prepare
    ASSERT_EQ(c1.size(), 1u);
    const auto snap1 = c1.Snapshot();
    const std::string key = snap1.begin()->first;
    EXPECT_EQ(key.rfind("quant|fp8_e4m3|", 0), 0u) << key;
    EXPECT_NE(key.find("|4096x768x768|"), std::string::npos) << key;
    EXPECT_EQ(key.find("heuristic"), std::string::npos) << key;
    EXPECT_TRUE(SameAlgo(snap1.begin()->second.algo, t1.algo));
    c1.Save(file);
    const std::string text = ReadText(file);
    EXPECT_EQ(text.rfind("hotline-gemm-cache ", 0), 0u);
    EXPECT_NE(text.find("\n" + key + "\t"), std::string::npos) << text;
    const std::vector<float> out1 = run(*g1, y1);
    EXPECT_LE(ref::RelErr(out1, want), 5e-3);

    // 2. A "new process": the choice comes from the file, untimed, and computes the same.
    QuantGemm::ForgetProcessChoices();
    GemmTuningCache c2;
    ASSERT_TRUE(c2.Load(file));
    ASSERT_EQ(c2.size(), 1u);
    GemmTuningCache::Entry e2;
    ASSERT_TRUE(c2.Find(key, &e2));
    EXPECT_TRUE(SameAlgo(e2.algo, t1.algo));
    EXPECT_EQ(e2.candidates, t1.candidates);
    EXPECT_NEAR(e2.ms, t1.ms, 1e-5 * t1.ms);
    auto g2 = make(&c2, true);
    const QuantGemm::TuneInfo t2 = g2->Tuning(M, false);
    EXPECT_EQ(t2.source, QuantTuneSource::kCache);
    EXPECT_EQ(t2.candidates, t1.candidates);
    EXPECT_TRUE(SameAlgo(t2.algo, t1.algo));
    EXPECT_NE(g2->path(M).find("timing cache"), std::string::npos);
    EXPECT_EQ(g2->Fused(M, false), g1->Fused(M, false));
    EXPECT_EQ(c2.size(), 1u);
    const std::vector<float> out2 = run(*g2, y2);
    const bool inplace_splitk =
        AlgoConfig(t1.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) > 1 &&
        AlgoConfig(t1.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME) ==
            int(CUBLASLT_REDUCTION_SCHEME_INPLACE);
    if (inplace_splitk) {
      EXPECT_LE(ref::RelErr(out2, out1), 1e-3);
    } else {
      EXPECT_EQ(std::memcmp(out1.data(), out2.data(), out1.size() * sizeof(float)), 0)
          << "the same algorithm on the same data gave other bytes";
    }
    EXPECT_LE(ref::RelErr(out2, want), 5e-3);

    // 3. The same problem again in this process: the process-wide choice.
    auto g3 = make(nullptr, true);
    EXPECT_EQ(g3->Tuning(M, false).source, QuantTuneSource::kProcess);
    EXPECT_TRUE(SameAlgo(g3->Tuning(M, false).algo, t1.algo));

    // 4. An entry cuBLASLt refuses for this problem: timed again, replaced, still right.
    {
      GemmTuningCache foreign;
      GemmTuningCache::Entry bad = e2;
      bad.algo = fp16_algo;
      foreign.Put(key, bad);
      foreign.Save(foreign_file);
    }
    QuantGemm::ForgetProcessChoices();
    GemmTuningCache c4;
    ASSERT_TRUE(c4.Load(foreign_file));
    auto g4 = make(&c4, true);
    const QuantGemm::TuneInfo t4 = g4->Tuning(M, false);
    EXPECT_EQ(t4.source, QuantTuneSource::kTimed);
    EXPECT_GT(t4.candidates, 0);
    EXPECT_FALSE(SameAlgo(t4.algo, fp16_algo));
    GemmTuningCache::Entry e4;
    ASSERT_TRUE(c4.Find(key, &e4));
    EXPECT_TRUE(SameAlgo(e4.algo, t4.algo));
    EXPECT_LE(ref::RelErr(run(*g4, y2), want), 5e-3);

    // 5. No tuning: the heuristic's first algorithm, untimed, under its own key.
    QuantGemm::ForgetProcessChoices();
    GemmTuningCache c5;
    auto g5 = make(&c5, false);
    const QuantGemm::TuneInfo t5 = g5->Tuning(M, false);
    EXPECT_EQ(t5.source, QuantTuneSource::kHeuristic);
    EXPECT_EQ(t5.candidates, 0);
    EXPECT_EQ(t5.ms, -1.f);
    ASSERT_EQ(c5.size(), 1u);
    const std::string hkey = c5.Snapshot().begin()->first;
    EXPECT_NE(hkey.find("|heuristic"), std::string::npos) << hkey;
    EXPECT_EQ(hkey.find("|wide"), std::string::npos) << hkey;
    EXPECT_LE(ref::RelErr(run(*g5, y2), want), 5e-3);
  }
}

// Device E4M3 codes against wanted ones: how many differ, and how many by more than one E4M3
// step (the larger value's 1/8, or a subnormal step of 2^-9 near zero).
struct CodeDiff {
  int unequal = 0;
  int beyond_one_step = 0;
};
CodeDiff CompareE4m3(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  CodeDiff d;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    ++d.unequal;
    const float g = E4m3ToFloat(got[i]), w = E4m3ToFloat(want[i]);
    if (!(std::fabs(g - w) <= std::max(std::fabs(g), std::fabs(w)) / 8 + 1.f / 512))
      ++d.beyond_one_step;
  }
  return d;
}

// The FP8 encoders' GEMMs on the host from E4M3 codes, x [M, K] and w [N, K], a and b the
// per-tensor scales: z = a * b * (x . w^T) + bias (in double).
std::vector<double> RefZ(const std::vector<uint8_t>& xc, const std::vector<uint8_t>& wc,
                         const std::vector<float>& bias, float a, float b, int M, int N, int K) {
  std::vector<float> xf(xc.size()), wf(wc.size());
  for (size_t i = 0; i < xc.size(); ++i) xf[i] = E4m3ToFloat(xc[i]);
  for (size_t i = 0; i < wc.size(); ++i) wf[i] = E4m3ToFloat(wc[i]);
  std::vector<double> z(size_t(M) * N);
#pragma omp parallel for schedule(static)
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      double acc = 0;
      for (int k = 0; k < K; ++k) acc += double(xf[size_t(m) * K + k]) * wf[size_t(n) * K + k];
      z[size_t(m) * N + n] = double(a) * b * acc + bias[n];
    }
  }
  return z;
}

// FFN1 as the FP8 encoders run it: y = code(gelu_tanh(z) / ys).
std::vector<uint8_t> RefFfn1Codes(const std::vector<uint8_t>& xc, const std::vector<uint8_t>& wc,
                                  const std::vector<float>& bias, float a, float b, float ys,
                                  int M, int N, int K) {
  const std::vector<double> z = RefZ(xc, wc, bias, a, b, M, N, K);
  std::vector<uint8_t> y(z.size());
  for (size_t i = 0; i < z.size(); ++i)
    y[i] = ref::Code8(float(ref::GeluTanh(z[i]) / ys), QuantType::kFp8E4M3);
  return y;
}

TEST(CudaFp8PerTensor, OwnFp8GemmEveryConfigurationMatchesTheHostReference) {
  if (!test::HaveGpu("own fp8 gemm")) GTEST_SKIP() << "no CUDA device";
  if (OwnFp8GemmConfigs() == 0) {
    std::printf("*** built without the own FP8 GEMM (no 90 in HOTLINE_CUDA_ARCHS or no CUTLASS "
                "headers): SKIPPED ***\n");
    GTEST_SKIP() << "built without the own FP8 GEMM";
  }
  std::mt19937_64 rng(test::Seed() + 131);
  const int M = 200, K = 768, N = 1024;  // 200 tokens: partial tiles
  std::vector<float> x = test::RandomVec(rng, size_t(M) * K, -2.f, 2.f);
  std::vector<float> w = test::RandomVec(rng, size_t(N) * K, -0.06f, 0.06f);
  std::vector<float> bias = test::RandomVec(rng, N, -0.5f, 0.5f);
  std::vector<float> res = test::RandomVec(rng, size_t(M) * N, -1.f, 1.f);
  auto dres = test::Upload(DType::kF16, res);  // res now holds the FP16 values
  const float xs = 2.f / 224, ys = 8.f / 224;
  float wmax = 0.f;
  for (float v : w) wmax = std::max(wmax, std::fabs(v));
  const float ws_ = wmax / 448.f;
  std::vector<uint8_t> xc(x.size()), wc(w.size());
  for (size_t i = 0; i < x.size(); ++i) xc[i] = ref::Code8(x[i] / xs, QuantType::kFp8E4M3);
  for (size_t i = 0; i < w.size(); ++i) wc[i] = ref::Code8(w[i] / ws_, QuantType::kFp8E4M3);
  const std::vector<double> z = RefZ(xc, wc, bias, ws_, xs, M, N, K);
  std::vector<uint8_t> want_codes(z.size());
  std::vector<float> want_bias(z.size()), want_res(z.size());
  for (size_t i = 0; i < z.size(); ++i) {
    want_codes[i] = ref::Code8(float(ref::GeluTanh(z[i]) / ys), QuantType::kFp8E4M3);
    want_bias[i] = float(z[i]);
    want_res[i] = float(z[i] + res[i]);
  }
  auto dx = test::UploadRaw(xc);
  auto dw = test::UploadRaw(wc);
  auto db = test::UploadF32(bias);
  auto dscale = test::UploadF32({ws_, xs, 1.f / ys});
  test::DevBuf y(size_t(M) * N * 2);
  auto problem = [&](OwnEpilogue e) {
    OwnFp8GemmProblem p;
    p.epilogue = e;
    p.w = dw->get();
    p.x = dx->get();
    p.bias = db->as<float>();
    p.a_scale = dscale->as<float>();
    p.b_scale = dscale->as<float>() + 1;
    p.d_scale = dscale->as<float>() + 2;
    p.residual = e == OwnEpilogue::kBiasResidualF16 ? y.get() : nullptr;  // in place
    p.y = y.get();
    p.M = M;
    p.N = N;
    p.K = K;
    return p;
  };
  if (DeviceSm() != 90) {  // sm_90a code: elsewhere refused, never launched
    EXPECT_FALSE(OwnFp8GemmAvailable());
    EXPECT_FALSE(OwnFp8GemmCheck(0, problem(OwnFp8GemmConfigEpilogue(0))).empty());
    GTEST_SKIP() << "not a compute capability 9.0 GPU: refusal checked";
  }
  ASSERT_TRUE(OwnFp8GemmAvailable());
  // Problems a configuration cannot take are refused with a reason, not run.
  OwnFp8GemmProblem bad = problem(OwnFp8GemmConfigEpilogue(0));
  bad.K = 760;  // not a multiple of 16
  EXPECT_NE(OwnFp8GemmCheck(0, bad).find("multiples of 16"), std::string::npos);
  const OwnEpilogue other = OwnFp8GemmConfigEpilogue(0) == OwnEpilogue::kGeluE4m3
                                ? OwnEpilogue::kBiasF16
                                : OwnEpilogue::kGeluE4m3;
  EXPECT_NE(OwnFp8GemmCheck(0, problem(other)).find("epilogue"), std::string::npos);
  OwnFp8GemmProblem no_res = problem(OwnEpilogue::kBiasResidualF16);
  no_res.residual = nullptr;
  for (int c = 0; c < OwnFp8GemmConfigs(); ++c) {
    if (OwnFp8GemmConfigEpilogue(c) == OwnEpilogue::kBiasResidualF16) {
      EXPECT_NE(OwnFp8GemmCheck(c, no_res).find("residual"), std::string::npos);
      break;
    }
  }
  EXPECT_THROW(OwnFp8GemmConfigName(OwnFp8GemmConfigs()), Error);
  test::DevBuf wsb(size_t(16) << 20);
  int seen[3] = {0, 0, 0};
  for (int c = 0; c < OwnFp8GemmConfigs(); ++c) {
    SCOPED_TRACE(OwnFp8GemmConfigName(c));
    const OwnEpilogue e = OwnFp8GemmConfigEpilogue(c);
    ++seen[int(e)];
    const OwnFp8GemmProblem p = problem(e);
    ASSERT_EQ(OwnFp8GemmCheck(c, p), "");
    ASSERT_LE(OwnFp8GemmWorkspaceBytes(c, p), wsb.bytes());
    if (e == OwnEpilogue::kBiasResidualF16) {
      CUDA_CHECK(cudaMemcpy(y.get(), dres->get(), size_t(M) * N * 2, cudaMemcpyDeviceToDevice));
    } else {
      CUDA_CHECK(cudaMemset(y.get(), 0x7f, y.bytes()));  // NaNs: a tile never written shows
    }
    OwnFp8GemmRun(c, p, wsb.get(), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    if (e == OwnEpilogue::kGeluE4m3) {
      std::vector<uint8_t> got(size_t(M) * N);
      CUDA_CHECK(cudaMemcpy(got.data(), y.get(), got.size(), cudaMemcpyDeviceToHost));
      const CodeDiff d = CompareE4m3(got, want_codes);
      std::printf("  own %-48s %6d of %zu bytes apart, %d by more than one step\n",
                  OwnFp8GemmConfigName(c).c_str(), d.unequal, got.size(), d.beyond_one_step);
      EXPECT_LE(d.beyond_one_step, int(0.001 * got.size()));
      EXPECT_LE(d.unequal, int(0.05 * got.size()));
    } else {
      // FP16 out: the FP16 rounding of the output (2^-11 relative) and fast accumulation.
      const std::vector<float> got = test::Download(DType::kF16, y.get(), size_t(M) * N);
      const double err =
          ref::RelErr(got, e == OwnEpilogue::kBiasF16 ? want_bias : want_res);
      std::printf("  own %-48s relative error %.2e\n", OwnFp8GemmConfigName(c).c_str(), err);
      EXPECT_LE(err, 2e-3);
    }
  }
  for (int e = 0; e < 3; ++e) EXPECT_GT(seen[e], 0) << OwnEpilogueName(OwnEpilogue(e));
}

TEST(CudaFp8PerTensor, QuantGemmTakesTheOwnFp8GemmOnlyAsAsked) {
  if (!test::HaveGpu("own fp8 gemm in QuantGemm")) GTEST_SKIP() << "no CUDA device";
  if (!OwnFp8GemmAvailable()) {
    std::printf("*** no own FP8 GEMM here (not sm_90, or built without it): SKIPPED ***\n");
    GTEST_SKIP() << "no own FP8 GEMM on this GPU or build";
  }
  namespace fs = std::filesystem;
  const test::ScopedTempDir tmp("hotline_own_fp8_cache");
  const std::string file = (tmp.path() / "timing.cache").string();
  std::mt19937_64 rng(test::Seed() + 137);
  const int M = 4096, K = 768, N = 3072;
  std::vector<float> w = test::RandomVec(rng, size_t(K) * N, -0.06f, 0.06f);  // [K, N]
  std::vector<float> bias = test::RandomVec(rng, N, -0.5f, 0.5f);
  std::vector<float> x = test::RandomVec(rng, size_t(M) * K, -2.f, 2.f);
  auto dx = test::Upload(DType::kF16, x);
  const float xs = 2.f / 224, ys = 8.f / 224;
  LtWorkspace ws;
  test::DevBuf xq(size_t(M) * K), y(size_t(M) * N);
  QuantizeActivations(DType::kF16, dx->get(), int64_t(M) * K, xs, QuantType::kFp8E4M3, xq.get(),
                      nullptr);
  // The reference from the codes QuantGemm multiplies: x as QuantizeActivations writes it
  // (ref::Code8, checked in GemmMatchesDequantisedAndFp32References), W per tensor.
  float wmax = 0.f;
  for (float v : w) wmax = std::max(wmax, std::fabs(v));
  const float wsc = wmax / 448.f;
  std::vector<uint8_t> xc(x.size()), wc(w.size());
  for (size_t i = 0; i < x.size(); ++i) xc[i] = ref::Code8(x[i] / xs, QuantType::kFp8E4M3);
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k)
      wc[size_t(n) * K + k] = ref::Code8(w[size_t(k) * N + n] / wsc, QuantType::kFp8E4M3);
  const std::vector<uint8_t> want = RefFfn1Codes(xc, wc, bias, wsc, xs, ys, M, N, K);
  auto run = [&](int own_gemm, GemmTuningCache* cache) {
    const ScopedKernelVariants v(-1, -1, -1, -1, own_gemm);
    auto g = std::make_unique<QuantGemm>(w.data(), K, N, bias.data(), GemmEpilogue::kBiasGeluTanh,
                                         QuantType::kFp8E4M3, xs, DType::kF16, M,
                                         WeightScaling::kPerTensor, /*fast_accum=*/true);
    g->SetQuantisedOutput(ys);
    g->SetTuning(cache, true);
    g->Prepare(M, false, ws, nullptr);
    EXPECT_TRUE(g->QuantisedOutput(M));
    CUDA_CHECK(cudaMemset(y.get(), 0x7f, y.bytes()));
    g->Run(xq.get(), M, y.get(), nullptr, nullptr, ws, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint8_t> got(size_t(M) * N);
    CUDA_CHECK(cudaMemcpy(got.data(), y.get(), got.size(), cudaMemcpyDeviceToHost));
    const CodeDiff d = CompareE4m3(got, want);
    std::printf("  own_gemm %d: %s; %d bytes apart, %d by more than one step\n", own_gemm,
                g->path(M).c_str(), d.unequal, d.beyond_one_step);
    EXPECT_LE(d.beyond_one_step, int(0.001 * got.size()));
    EXPECT_LE(d.unequal, int(0.05 * got.size()));
    return g;
  };
  QuantGemm::ForgetProcessChoices();
  {  // Never: cuBLASLt.
    auto g = run(0, nullptr);
    EXPECT_EQ(g->Tuning(M, false).own, -1);
    EXPECT_EQ(g->path(M).find("own sm90"), std::string::npos);
  }
  {  // Forced: ours, timed, kept in the cache and its file.
    GemmTuningCache cache;
    auto g = run(2, &cache);
    const QuantGemm::TuneInfo t = g->Tuning(M, false);
    EXPECT_GE(t.own, 0);
    EXPECT_EQ(t.source, QuantTuneSource::kTimed);
    EXPECT_GT(t.ms, 0.f);
    EXPECT_NE(g->path(M).find("own sm90"), std::string::npos);
    cache.Save(file);
    // A later process: the choice comes from the file, untimed, the same configuration.
    QuantGemm::ForgetProcessChoices();
    GemmTuningCache loaded;
    ASSERT_TRUE(loaded.Load(file));
    auto g2 = run(2, &loaded);
    const QuantGemm::TuneInfo t2 = g2->Tuning(M, false);
    EXPECT_EQ(t2.source, QuantTuneSource::kCache);
    EXPECT_EQ(t2.own, t.own);
    // The same process again: reused.
    auto g3 = run(2, &loaded);
    EXPECT_EQ(g3->Tuning(M, false).source, QuantTuneSource::kProcess);
    EXPECT_EQ(g3->Tuning(M, false).own, t.own);
  }
  {  // The default: whichever is faster here (printed, not asserted), correct either way.
    QuantGemm::ForgetProcessChoices();
    auto g = run(1, nullptr);
    const QuantGemm::TuneInfo t = g->Tuning(M, false);
    std::printf("  default choice: %s\n", t.own >= 0 ? "own" : "cuBLASLt");
  }
  // FFN2's shape with the residual in place (bias + residual, FP16 out), forced and never,
  // against the reference from the dequantised operands (as GemmMatchesDequantisedAnd...).
  {
    const int K2 = 3072, N2 = 768;
    std::vector<float> w2 = test::RandomVec(rng, size_t(K2) * N2, -0.03f, 0.03f);
    std::vector<float> b2 = test::RandomVec(rng, N2, -0.5f, 0.5f);
    std::vector<float> x2 = test::RandomVec(rng, size_t(M) * K2, -2.f, 2.f);
    std::vector<float> r2 = test::RandomVec(rng, size_t(M) * N2, -1.f, 1.f);
    auto dx2 = test::Upload(DType::kF16, x2);
    auto dr2 = test::Upload(DType::kF16, r2);
    test::DevBuf xq2(size_t(M) * K2), y2(size_t(M) * N2 * 2);
    QuantizeActivations(DType::kF16, dx2->get(), int64_t(M) * K2, xs, QuantType::kFp8E4M3,
                        xq2.get(), nullptr);
    std::vector<float> xd(x2.size());
    for (size_t i = 0; i < x2.size(); ++i) xd[i] = ref::QDQ(x2[i], xs, QuantType::kFp8E4M3);
    const std::vector<float> want2 =
        RefGemm(xd, ref::QDQWeightsPerTensor(w2, QuantType::kFp8E4M3), b2, &r2, M, K2, N2,
                GemmEpilogue::kBias);
    for (int own_gemm : {0, 2}) {
      QuantGemm::ForgetProcessChoices();
      const ScopedKernelVariants v(-1, -1, -1, -1, own_gemm);
      QuantGemm g(w2.data(), K2, N2, b2.data(), GemmEpilogue::kBias, QuantType::kFp8E4M3, xs,
                  DType::kF16, M, WeightScaling::kPerTensor, /*fast_accum=*/true);
      g.SetTuning(nullptr, true);
      g.Prepare(M, true, ws, nullptr);
      CUDA_CHECK(cudaMemcpy(y2.get(), dr2->get(), y2.bytes(), cudaMemcpyDeviceToDevice));
      g.Run(xq2.get(), M, y2.get(), y2.get(), nullptr, ws, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      const double err = ref::RelErr(test::Download(DType::kF16, y2.get(), want2.size()), want2);
      std::printf("  own_gemm %d, ffn2 + residual: %s; relative error %.2e\n", own_gemm,
                  g.path(M).c_str(), err);
      EXPECT_EQ(g.Tuning(M, true).own >= 0, own_gemm == 2);
      if (own_gemm == 2) {
        EXPECT_NE(g.path(M).find("bias+residual fp16"), std::string::npos) << g.path(M);
      }
      EXPECT_LE(err, 5e-3);
    }
  }
}

}  // namespace
}  // namespace hotline::engine::cuda
