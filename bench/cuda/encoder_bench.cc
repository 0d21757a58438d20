// GPU benchmark of the CUDA encoder runner on BERT-base and small joint intent + slot encoders
// with random weights (PERFORMANCE.md's G1, G2, G4, G5), FP16; and base with its four big GEMMs
// per layer in FP8 E4M3 and INT8 (G3, G5's INT8/FP8 figure: rows base_fp8 (per-tensor weight
// scales, the default), base_fp8_perchannel, base_fp8_fastacc, base_fp8_noqout (no fusions: FFN1
// without the E4M3 output, LayerNorm / attention and quantise apart), base_int8;
// activation scales calibrated (amax) first):
//   latency   batch 1 x seq 64: wall time of a whole Run (host staging, graph launch, copies back,
//             synchronise), median of many calls over 4 rotating input sets
//   throughput batch 128 x seq 64: sequences / median Run time
//   mixed     1024 requests of 8..128 tokens (uniform, mean ~68), packed padding-free into
//             batches of 128 (and of 32, the peers' batch size); sequences / time of a whole pass
//   memory    base, profile 128 x 128: our device allocations (weights + one context) and the
//             change in the device's free memory over creating both (cuBLASLt and CUDA runtime
//             internals, graphs included)
//   profile   (--profile) each kernel kind of one layer in isolation, at 1 x 64, 128 x 64 and the
//             mixed workload's first batch of 128: device time per launch from CUDA graph replays
//             of 20 back-to-back launches (host launch cost excluded, inter-kernel gaps included,
//             as inside our encoder graphs), every kernel variant and small-M GEMM candidate, the
//             whole layer sequence x layers, and the ceilings (device copy, large FP16 GEMM)
// Writes JSON (--out FILE) and prints a short table.
//   hotline_cuda_bench [--out results.json] [--models base,small] [--target-s S]
//                      [--mixed-lengths FILE] [--profile] [--profile-only]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/encoder.h"
#include "engine/cuda/encoder_quant.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/quant_gemm.h"
#include "engine/cuda/small_gemm.h"

namespace hc = hotline::engine::cuda;
using Clock = std::chrono::steady_clock;

namespace {

struct Inputs {
  std::vector<int32_t> ids, cu;
  int batch() const { return int(cu.size()) - 1; }
};

Inputs MakeInputs(std::mt19937_64& rng, const std::vector<int>& lens) {
  Inputs in;
  in.cu.push_back(0);
  for (int L : lens) {
    for (int t = 0; t < L; ++t) {
      in.ids.push_back(t == 0 ? 101 : t == L - 1 ? 102 : int32_t(672 + rng() % (8000 - 672)));
    }
    in.cu.push_back(in.cu.back() + L);
  }
  return in;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double Pct(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * (v.size() - 1) + 0.5))];
}

// Times Run over rotating input sets for about target_s (at least min_reps calls).
nlohmann::json TimeRuns(hc::CudaEncoderContext& ctx, const std::vector<Inputs>& sets,
                        double target_s, int min_reps) {
  hc::EncoderOutputs out;
  for (int w = 0; w < 10; ++w) {
    const Inputs& in = sets[w % sets.size()];
    ctx.Run(in.ids.data(), nullptr, in.cu.data(), in.batch(), &out);
  }
  std::vector<double> ms, dev_ms;
  ctx.set_device_timing(true);
  const auto t_end = Clock::now() + std::chrono::duration<double>(target_s);
  for (int i = 0; i < min_reps || Clock::now() < t_end; ++i) {
    const Inputs& in = sets[i % sets.size()];
    const auto t0 = Clock::now();
    ctx.Run(in.ids.data(), nullptr, in.cu.data(), in.batch(), &out);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    dev_ms.push_back(ctx.last_device_ms());
    if (ms.size() > 20000) break;
  }
  ctx.set_device_timing(false);
  const int B = sets[0].batch();
  // Wall: the whole Run as a caller sees it (checks, staging, launch, copies back, outputs).
  // Device: CUDA events around the graph launch, as the peers are timed (their outputs stay on
  // the GPU; ours include the copies to and from the host).
  return {{"median_ms", Median(ms)}, {"p10_ms", Pct(ms, 0.1)}, {"p99_ms", Pct(ms, 0.99)},
          {"reps", ms.size()}, {"seq_per_s", B / Median(ms) * 1e3},
          {"device_median_ms", Median(dev_ms)}, {"device_seq_per_s", B / Median(dev_ms) * 1e3}};
}

// Throughput of `n` contexts of one encoder, each driven by its own host thread (its own stream),
// as a server with n instances on one GPU runs them: one context's host work (staging, launch,
// copies back) and kernel tails overlap another's kernels. seq/s = all sequences / wall time.
nlohmann::json TimeConcurrent(hc::CudaEncoder& enc, hc::CudaEncoderContext& first, int n,
                              const std::vector<Inputs>& sets, double target_s) {
  std::vector<std::unique_ptr<hc::CudaEncoderContext>> own;
  std::vector<hc::CudaEncoderContext*> ctxs{&first};
  for (int i = 1; i < n; ++i) {
    own.push_back(enc.CreateContext());
    own.back()->Warmup({{sets[0].batch(), 64}});
    ctxs.push_back(own.back().get());
  }
  std::vector<long> runs(n, 0), seqs(n, 0);
  std::vector<std::string> errors(n);
  const auto t0 = Clock::now();
  const auto t_end = t0 + std::chrono::duration<double>(target_s);
  std::vector<std::thread> th;
  for (int i = 0; i < n; ++i) {
    th.emplace_back([&, i] {
      try {
        hc::EncoderOutputs out;
        for (long r = 0; r < 30 || Clock::now() < t_end; ++r) {
          const Inputs& in = sets[(r + i) % sets.size()];
          ctxs[i]->Run(in.ids.data(), nullptr, in.cu.data(), in.batch(), &out);
          ++runs[i];
          seqs[i] += in.batch();
        }
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (auto& t : th) t.join();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  for (const auto& e : errors) {
    if (!e.empty()) throw hotline::Error("2-context throughput: " + e);
  }
  long total = 0, total_seqs = 0;
  for (int i = 0; i < n; ++i) total += runs[i], total_seqs += seqs[i];
  return {{"contexts", n}, {"batches", total}, {"seconds", s},
          {"seq_per_s", double(total_seqs) / s}};
}

nlohmann::json Mixed(hc::CudaEncoderContext& ctx, const std::vector<int>& lens, int per_batch,
                     int passes) {
  std::mt19937_64 rng(99);
  std::vector<Inputs> batches;
  for (size_t i = 0; i < lens.size(); i += per_batch) {
    std::vector<int> part(lens.begin() + i, lens.begin() + std::min(lens.size(), i + per_batch));
    batches.push_back(MakeInputs(rng, part));
  }
  hc::EncoderOutputs out;
  std::vector<double> pass_ms;
  for (int p = 0; p < passes + 1; ++p) {  // pass 0 prepares the buckets (tuning, capture)
    const auto t0 = Clock::now();
    for (const auto& b : batches) ctx.Run(b.ids.data(), nullptr, b.cu.data(), b.batch(), &out);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (p > 0) pass_ms.push_back(ms);
  }
  const double med = Median(pass_ms);
  return {{"requests", lens.size()}, {"batch", per_batch}, {"batches", batches.size()},
          {"pass_ms_median", med}, {"pass_ms_all", pass_ms},
          {"seq_per_s", lens.size() / med * 1e3}, {"graphs", ctx.graphs()}};
}


// ---- --profile: per-kernel device times (see the header) ----

struct DevMem {
  void* p = nullptr;
  explicit DevMem(size_t bytes) { CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1)); }
  ~DevMem() { cudaFree(p); }
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
  template <typename T> T* as() const { return static_cast<T*>(p); }
};

struct ProfileRow {
  std::string name;
  double us;
  double bytes, flops;  // the fewest bytes moved and the FLOPs of one launch
};

// One entry: time, and achieved rates against the minimal bytes / FLOPs.
nlohmann::json RowJson(const ProfileRow& r) {
  return {{"us", r.us}, {"bytes", r.bytes}, {"flops", r.flops},
          {"gb_per_s", r.us > 0 ? r.bytes / r.us * 1e-3 : 0.0},
          {"tflop_per_s", r.us > 0 ? r.flops / r.us * 1e-6 : 0.0}};
}

nlohmann::json Ceilings() {
  nlohmann::json J;
  const size_t bytes = size_t(1) << 30;
  DevMem a(bytes), b(bytes);
  hc::FillRandom(hc::DType::kF32, a.p, int64_t(bytes / 4), 7u, 1.f, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const float ms = hc::TimeInGraph([&](cudaStream_t s) {
    return cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, s) == cudaSuccess;
  }, 5, 3);
  J["copy_1gib_read_plus_write_tb_per_s"] = ms > 0 ? 2.0 * bytes / (ms * 1e-3) / 1e12 : -1.0;
  // Large FP16 GEMM through our cuBLASLt wrapper (heuristic choice): the matrix-unit ceiling.
  const int n = 8192;
  std::vector<float> w(size_t(n) * n);
  std::mt19937_64 rng(3);
  for (auto& v : w) v = float(int(rng() % 2001) - 1000) * 1e-5f;
  hc::GemmTuningCache cache;
  hc::Gemm g(w.data(), n, n, nullptr, hc::GemmEpilogue::kNone, hc::DType::kF16, &cache, false);
  hc::LtWorkspace ws;
  DevMem x(size_t(n) * n * 2), y(size_t(n) * n * 2);
  hc::FillRandom(hc::DType::kF16, x.p, int64_t(n) * n, 9u, 1.f, nullptr);
  g.Prepare(n, false, ws, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const float gms = hc::TimeInGraph([&](cudaStream_t s) {
    g.Run(x.p, n, y.p, nullptr, ws, s);
    return true;
  }, 5, 3);
  J["gemm_fp16_8192_tflop_per_s"] = gms > 0 ? 2.0 * n * n * double(n) / (gms * 1e-3) / 1e12 : -1.0;
  return J;
}

// Profiles one layer's kernels at T tokens (sequences `lens`, padded to the bucket Tb).
nlohmann::json ProfileCase(const hc::EncoderConfig& c, const std::vector<int>& lens,
                           std::vector<ProfileRow>* table, const std::string& tag) {
  using hc::DType;
  const DType dt = DType::kF16;
  const int H = c.hidden, I = c.intermediate, nh = c.heads, D = c.head_dim();
  std::vector<int32_t> cu(1, 0);
  int longest = 0;
  for (int L : lens) {
    cu.push_back(cu.back() + L);
    longest = std::max(longest, L);
  }
  const int T = cu.back(), B = int(lens.size());
  const int Tb = hc::CudaEncoderContext::TokenBucket(T, 1 << 20);
  const int Sb = (longest + 63) / 64 * 64;
  std::mt19937_64 rng(5);
  auto rnd = [&](size_t n, float sc) {
    std::vector<float> v(n);
    for (auto& f : v) f = sc * (float(int(rng() % 2001) - 1000) * 1e-3f);
    return v;
  };
  hc::GemmTuningCache cache;
  std::vector<float> wq = rnd(size_t(H) * 3 * H, 0.05f), bq = rnd(3 * H, 0.05f);
  std::vector<float> wo = rnd(size_t(H) * H, 0.05f), bo = rnd(H, 0.05f);
  std::vector<float> w1 = rnd(size_t(H) * I, 0.05f), b1 = rnd(I, 0.05f);
  std::vector<float> w2 = rnd(size_t(I) * H, 0.05f), b2 = rnd(H, 0.05f);
  hc::Gemm gq(wq.data(), H, 3 * H, bq.data(), hc::GemmEpilogue::kBias, dt, &cache, true);
  hc::Gemm go(wo.data(), H, H, bo.data(), hc::GemmEpilogue::kBias, dt, &cache, true);
  hc::Gemm g1(w1.data(), H, I, b1.data(), hc::GemmEpilogue::kBiasGeluTanh, dt, &cache, true);
  hc::Gemm g2(w2.data(), I, H, b2.data(), hc::GemmEpilogue::kBias, dt, &cache, true);
  hc::LtWorkspace ws;
  DevMem x(size_t(Tb) * H * 2), u(size_t(Tb) * std::max(4 * H, I) * 2), dcu((B + 1) * 4);
  DevMem ln(size_t(2) * H * 4), ids(size_t(Tb) * 4);
  DevMem word(size_t(c.vocab) * H * 2), pos(size_t(c.max_pos) * H * 2), type(size_t(2) * H * 2);
  hc::FillRandom(dt, x.p, int64_t(Tb) * H, 1u, 1.f, nullptr);
  hc::FillRandom(dt, u.p, int64_t(Tb) * std::max(4 * H, I), 2u, 1.f, nullptr);
  hc::FillRandom(dt, word.p, int64_t(c.vocab) * H, 3u, 0.05f, nullptr);
  hc::FillRandom(dt, pos.p, int64_t(c.max_pos) * H, 4u, 0.05f, nullptr);
  hc::FillRandom(dt, type.p, int64_t(2) * H, 5u, 0.05f, nullptr);
  std::vector<float> lnh(2 * H);
  for (int i = 0; i < H; ++i) lnh[i] = 1.f + 0.01f * (i % 7), lnh[H + i] = 0.01f * (i % 5);
  CUDA_CHECK(cudaMemcpy(ln.p, lnh.data(), lnh.size() * 4, cudaMemcpyHostToDevice));
  std::vector<int32_t> cub(cu);
  cub.resize(B + 1);
  CUDA_CHECK(cudaMemcpy(dcu.p, cub.data(), cub.size() * 4, cudaMemcpyHostToDevice));
  std::vector<int32_t> idh(Tb);
  for (auto& i : idh) i = int32_t(672 + rng() % 7000);
  CUDA_CHECK(cudaMemcpy(ids.p, idh.data(), idh.size() * 4, cudaMemcpyHostToDevice));
  gq.Prepare(Tb, false, ws, nullptr);
  go.Prepare(Tb, true, ws, nullptr);
  g1.Prepare(Tb, false, ws, nullptr);
  g2.Prepare(Tb, true, ws, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());

  void* qkv = u.p;
  void* ctxp = u.as<char>() + size_t(Tb) * 3 * H * 2;
  const float* g = ln.as<float>();
  const float* be = g + H;
  const float scale = 1.f / std::sqrt(float(D));
  const double tok = Tb, es = 2;
  const double act = tok * H * es;  // one [T, H] activation
  nlohmann::json J;
  J["tokens"] = T;
  J["bucket"] = Tb;
  J["seq_bucket"] = Sb;
  auto add = [&](const std::string& name, double bytes, double flops,
                 const std::function<void(cudaStream_t)>& f) {
    const float ms = hc::TimeInGraph([&](cudaStream_t s) {
      f(s);
      return true;
    }, 20, 5);
    ProfileRow r{tag + " " + name, ms * 1e3, bytes, flops};
    J["kernels"][name] = RowJson(r);
    table->push_back(r);
  };
  auto gemm_row = [&](const std::string& name, hc::Gemm& gm, const void* in, void* out,
                      const void* res) {
    const double K = gm.K(), N = gm.ld();
    const double bytes = K * N * es + tok * K * es + tok * N * es * (res ? 2 : 1);
    add(name + " [" + gm.ChoiceFor(Tb, res != nullptr) + "]", bytes, 2 * tok * K * N,
        [&, in, out, res](cudaStream_t s) { gm.Run(in, Tb, out, res, ws, s); });
  };
  add("embed+ln", act + tok * H * es, 0, [&](cudaStream_t s) {
    hc::EmbeddingLayerNorm(dt, ids.as<int32_t>(), nullptr, dcu.as<int32_t>(), B, Tb, word.p,
                           c.vocab, pos.p, c.max_pos, type.p, 2, g, be, c.eps, H, x.p, s);
  });
  gemm_row("qkv", gq, x.p, qkv, nullptr);
  double att_flops = 0;
  for (int L : lens) att_flops += 4.0 * L * L * D * nh;
  for (int v : {0, 1, 2}) {
    hc::ScopedKernelVariants scope(-1, v);
    add("attention v" + std::to_string(v), 4 * act, att_flops, [&](cudaStream_t s) {
      hc::Attention(dt, qkv, dcu.as<int32_t>(), B, Sb, nh, D, scale, ctxp, s);
    });
  }
  gemm_row("out+res", go, ctxp, x.p, x.p);
  for (int v : {0, 1}) {
    hc::ScopedKernelVariants scope(v);
    add("layernorm v" + std::to_string(v), 2 * act, 0, [&](cudaStream_t s) {
      hc::LayerNorm(dt, x.p, nullptr, nullptr, g, be, c.eps, Tb, H, x.p, s);
    });
  }
  gemm_row("ffn1+gelu", g1, x.p, u.p, nullptr);
  gemm_row("ffn2+res", g2, u.p, x.p, x.p);
  // The whole layer sequence, `layers` times (the encoder body without embeddings and heads).
  const double layer_flops = 2 * tok * (double(H) * 3 * H + double(H) * H + 2.0 * H * I);
  for (int v : {0, 1, 2}) {  // old kernels; new without PDL; new with PDL
    hc::ScopedKernelVariants scope(v >= 1, v >= 1, v == 2);
    add("layers x" + std::to_string(c.layers) + (v == 0 ? " v0" : v == 1 ? " v1 nopdl" : " v1 pdl"),
        double(c.layers) * ((4.0 * H * H + 2.0 * H * I) * es), c.layers * (layer_flops + att_flops),
        [&](cudaStream_t s) {
          for (int l = 0; l < c.layers; ++l) {
            gq.Run(x.p, Tb, qkv, nullptr, ws, s);
            hc::Attention(dt, qkv, dcu.as<int32_t>(), B, Sb, nh, D, scale, ctxp, s);
            go.Run(ctxp, Tb, x.p, x.p, ws, s);
            hc::LayerNorm(dt, x.p, nullptr, nullptr, g, be, c.eps, Tb, H, x.p, s);
            g1.Run(x.p, Tb, u.p, nullptr, ws, s);
            g2.Run(u.p, Tb, x.p, x.p, ws, s);
            hc::LayerNorm(dt, x.p, nullptr, nullptr, g, be, c.eps, Tb, H, x.p, s);
          }
        });
  }
  // INT8 / FP8 GEMMs of the layer (for G3): activation quantisation and the GEMM with its
  // dequantising epilogue, timed separately; "layer gemms" is the four together.
  // FP8 per channel (OUTER_VEC_32F scale vectors) and per tensor (scalar scales: the plain FP8
  // GEMM, the encoders' default), with and without fast accumulation, side by side.
  struct QCfg { hc::QuantType q; hc::WeightScaling sc; bool fast; const char* name; };
  for (const QCfg qc : {QCfg{hc::QuantType::kInt8, hc::WeightScaling::kPerChannel, false, "int8"},
                        QCfg{hc::QuantType::kFp8E4M3, hc::WeightScaling::kPerChannel, false,
                             "fp8 per-channel"},
                        QCfg{hc::QuantType::kFp8E4M3, hc::WeightScaling::kPerTensor, false,
                             "fp8 per-tensor"},
                        QCfg{hc::QuantType::kFp8E4M3, hc::WeightScaling::kPerTensor, true,
                             "fp8 per-tensor fastacc"}}) {
    const hc::QuantType q = qc.q;
    if (!hc::QuantTypeSupported(q)) continue;
    const std::string qn = qc.name;
    const float xs = 4.f / hc::QuantMax(q);  // FillRandom data: |x| <= 1 (scale only matters
                                             // for accuracy, not for speed)
    const int mr = hc::QuantGemm::kMaxRows;
    hc::QuantGemm qq(wq.data(), H, 3 * H, bq.data(), hc::GemmEpilogue::kBias, q, xs, dt, mr,
                     qc.sc, qc.fast);
    hc::QuantGemm qo(wo.data(), H, H, bo.data(), hc::GemmEpilogue::kBias, q, xs, dt, mr, qc.sc,
                     qc.fast);
    hc::QuantGemm q1(w1.data(), H, I, b1.data(), hc::GemmEpilogue::kBiasGeluTanh, q, xs, dt, mr,
                     qc.sc, qc.fast);
    hc::QuantGemm q1e(w1.data(), H, I, b1.data(), hc::GemmEpilogue::kBiasGeluTanh, q, xs, dt, mr,
                      qc.sc, qc.fast);  // FFN1 writing E4M3 (FP8 only)
    hc::QuantGemm q2(w2.data(), I, H, b2.data(), hc::GemmEpilogue::kBias, q, xs, dt, mr, qc.sc,
                     qc.fast);
    // FFN1 with the bias epilogue only (E4M3 out): what the GELU epilogue costs (fast FP8 only).
    hc::QuantGemm q1b(w1.data(), H, I, b1.data(), hc::GemmEpilogue::kBias, q, xs, dt, mr, qc.sc,
                      qc.fast);
    // FFN1 E4M3 out in our own FP8 GEMM (fp8_gemm_sm90.h; KernelVariants::own_gemm 2: its
    // fastest configuration even where cuBLASLt's is faster), beside q1e in cuBLASLt alone.
    hc::QuantGemm q1own(w1.data(), H, I, b1.data(), hc::GemmEpilogue::kBiasGeluTanh, q, xs, dt,
                        mr, qc.sc, qc.fast);
    const bool fp8 = q == hc::QuantType::kFp8E4M3;
    const bool own = fp8 && qc.fast && qc.sc == hc::WeightScaling::kPerTensor &&
                     hc::OwnFp8GemmAvailable();
    if (fp8) q1e.SetQuantisedOutput(xs);
    if (fp8 && qc.fast) q1b.SetQuantisedOutput(xs);
    if (own) q1own.SetQuantisedOutput(xs);
    try {
      qq.Prepare(Tb, false, ws, nullptr);
      qo.Prepare(Tb, true, ws, nullptr);
      q1.Prepare(Tb, false, ws, nullptr);
      q2.Prepare(Tb, true, ws, nullptr);
      if (fp8) {
        hc::ScopedKernelVariants cublaslt_only(-1, -1, -1, -1, 0);
        q1e.Prepare(Tb, false, ws, nullptr);
      }
      if (fp8 && qc.fast) q1b.Prepare(Tb, false, ws, nullptr);
      if (own) {
        hc::ScopedKernelVariants forced(-1, -1, -1, -1, 2);
        q1own.Prepare(Tb, false, ws, nullptr);
      }
    } catch (const hotline::Error& e) {
      J["quant_error_" + qn] = e.what();
      continue;
    }
    DevMem xq(size_t(Tb) * I), acc(size_t(Tb) * std::max(3 * H, I) * 4);
    DevMem qy(size_t(Tb) * std::max(3 * H, I) * 2);  // [Tb, N] outputs of every shape
    hc::FillRandom(hc::DType::kF16, u.p, int64_t(Tb) * I, 21u, 1.f, nullptr);
    hc::QuantizeActivations(dt, u.p, int64_t(Tb) * I, xs, q, xq.p, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    if (qc.sc == hc::WeightScaling::kPerChannel) {  // the non-GEMM passes: once per type
      add(qn + " quantize [T,H]", act + tok * H, 0, [&](cudaStream_t s) {
        hc::QuantizeActivations(dt, x.p, int64_t(Tb) * H, xs, q, xq.p, s);
      });
      add(qn + " layernorm+quantize [T,H]", 2 * act + tok * H, 0, [&](cudaStream_t s) {
        hc::LayerNormQuant(dt, x.p, Tb, H, g, be, c.eps, xs, q, xq.p, s);
      });
      if (hc::AttentionQuantSupported(dt, D)) {  // variants 1 and 2 run the same kernel
        add(qn + " attention, quantised output", 3 * act + tok * H,
            4.0 * tok * Sb * H, [&](cudaStream_t s) {
              hc::AttentionQuant(dt, qkv, dcu.as<int32_t>(), B, Sb, nh, D, scale, xs, q, xq.p,
                                 s);
            });
      }
    }
    struct QS { const char* name; hc::QuantGemm* g; bool res; };
    for (const QS qs : {QS{"qkv", &qq, false}, QS{"out+res", &qo, true},
                        QS{"ffn1+gelu", &q1, false}, QS{"ffn2+res", &q2, true},
                        QS{"ffn1+gelu e4m3 out", &q1e, false},
                        QS{"ffn1+gelu e4m3 out, own", &q1own, false},
                        QS{"ffn1 bias only e4m3 out", &q1b, false}}) {
      if (qs.g == &q1e && !fp8) continue;
      if (qs.g == &q1own && !own) continue;
      if (qs.g == &q1b && !(fp8 && qc.fast)) continue;
      const double K = qs.g->K(), N = qs.g->N();
      add(qn + " " + qs.name + " [" + qs.g->path(Tb) + "]",
          K * N + tok * K + tok * N * es * (qs.res ? 2 : 1), 2 * tok * K * N,
          [&, qs](cudaStream_t s) {
            qs.g->Run(xq.p, Tb, qs.res ? x.p : qy.p, qs.res ? x.p : nullptr, acc.p, ws, s);
          });
    }
    if (own && Tb >= 4096) {
      // Every configuration of our own FP8 GEMM on FFN1's problem (random E4M3 weights, unit
      // scales: the time does not depend on the values), in the JSON; the table shows the best
      // variant of each kernel.
      DevMem w8(size_t(I) * H), ob(size_t(I) * 4), osc(64);
      hc::FillRandom(hc::DType::kF16, u.p, int64_t(I) * H, 23u, 1.f, nullptr);
      hc::QuantizeActivations(dt, u.p, int64_t(I) * H, xs, q, w8.p, nullptr);
      hc::FillRandom(hc::DType::kF32, ob.p, I, 24u, 0.5f, nullptr);
      const float ones[3] = {1.f, 1.f, 1.f};
      CUDA_CHECK(cudaMemcpy(osc.p, ones, sizeof(ones), cudaMemcpyHostToDevice));
      hc::OwnFp8GemmProblem op;
      op.w = w8.p;
      op.x = xq.p;
      op.bias = static_cast<const float*>(ob.p);
      op.a_scale = static_cast<const float*>(osc.p);
      op.b_scale = op.a_scale + 1;
      op.d_scale = op.a_scale + 2;
      op.y = qy.p;
      op.M = Tb;
      op.N = I;
      op.K = H;
      std::map<std::string, std::pair<double, std::string>> best_of_kernel;
      for (int cfg = 0; cfg < hc::OwnFp8GemmConfigs(); ++cfg) {
        const std::string name = hc::OwnFp8GemmConfigName(cfg);
        if (!hc::OwnFp8GemmCheck(cfg, op).empty() ||
            hc::OwnFp8GemmWorkspaceBytes(cfg, op) > ws.workspace_bytes())
          continue;
        const float ms = hc::TimeInGraph([&](cudaStream_t s) {
          hc::OwnFp8GemmRun(cfg, op, ws.workspace(), s);
          return true;
        }, 20, 5);
        J["own_fp8_ffn1_us"][name] = ms * 1e3;
        const std::string kernel = name.substr(0, name.find(" raster"));
        auto it = best_of_kernel.find(kernel);
        if (ms > 0 && (it == best_of_kernel.end() || ms * 1e3 < it->second.first))
          best_of_kernel[kernel] = {ms * 1e3, name};
      }
      const double flops = 2.0 * Tb * H * I;
      for (const auto& [kernel, b] : best_of_kernel)
        table->push_back({tag + " own ffn1 " + b.second, b.first, 0, flops});
    }
    const bool q1e_on = fp8 && q1e.QuantisedOutput(Tb);
    add(qn + " layer gemms x" + std::to_string(c.layers) + (q1e_on ? " (ffn1 e4m3 out)" : ""),
        double(c.layers) * (4.0 * H * H + 2.0 * H * I), c.layers * layer_flops,
        [&](cudaStream_t s) {
          for (int l = 0; l < c.layers; ++l) {
            qq.Run(xq.p, Tb, qy.p, nullptr, acc.p, ws, s);
            qo.Run(xq.p, Tb, x.p, x.p, acc.p, ws, s);
            (q1e_on ? q1e : q1).Run(xq.p, Tb, qy.p, nullptr, acc.p, ws, s);
            q2.Run(xq.p, Tb, x.p, x.p, acc.p, ws, s);
          }
        });
  }
  // Small-M GEMM candidates one by one (the tuner keeps only the fastest).
  if (hc::SmallGemmEligible(dt, Tb, H, 3 * H)) {
    hc::GemmTuningCache heur;
    hc::Gemm hq(wq.data(), H, 3 * H, bq.data(), hc::GemmEpilogue::kBias, dt, &heur, false);
    hc::Gemm h2(w2.data(), I, H, b2.data(), hc::GemmEpilogue::kBias, dt, &heur, false);
    hq.Prepare(Tb, false, ws, nullptr);
    h2.Prepare(Tb, true, ws, nullptr);
    gemm_row("qkv cublasLt-heuristic", hq, x.p, qkv, nullptr);
    gemm_row("ffn2+res cublasLt-heuristic", h2, u.p, x.p, x.p);
    DevMem wdev(size_t(I) * H * 2), bdev(size_t(I) * 2);
    DevMem ys(size_t(Tb) * std::max(3 * H, I) * 2);  // [Tb, N] outputs of every shape
    hc::FillRandom(dt, wdev.p, int64_t(I) * H, 11u, 0.05f, nullptr);
    hc::FillRandom(dt, bdev.p, I, 12u, 0.05f, nullptr);
    struct Shape { const char* name; int K, N; bool res; };
    for (const Shape sh : {Shape{"qkv", H, 3 * H, false}, Shape{"out+res", H, H, true},
                           Shape{"ffn1", H, I, false}, Shape{"ffn2+res", I, H, true}}) {
      for (int ks : hc::SmallGemmAsyncSlices(sh.K)) {
        const double bytes = double(sh.K) * sh.N * es + tok * sh.K * es +
                             tok * sh.N * es * (sh.res ? 2 : 1);
        add(std::string("small ") + sh.name + " async k" + std::to_string(ks), bytes,
            2 * tok * sh.K * sh.N, [&, sh, ks](cudaStream_t s) {
              hc::SmallGemmAsync(dt, sh.K == H ? x.p : u.p, Tb, sh.K, wdev.p, sh.N, bdev.p,
                                 hc::GemmEpilogue::kBias, sh.res ? x.p : nullptr, ys.p, ks,
                                 ws.workspace(), ws.counters(), s);
            });
      }
      for (int splits : hc::SmallGemmSplits(sh.K)) {
        if (hc::SmallGemmWorkspaceBytes(sh.N, splits) > ws.workspace_bytes()) continue;
        for (bool fused : {false, true}) {
          const double bytes = double(sh.K) * sh.N * es + tok * sh.K * es +
                               tok * sh.N * es * (sh.res ? 2 : 1);
          add(std::string("small ") + sh.name + " splits " + std::to_string(splits) +
                  (fused ? " fused" : " +reduce"),
              bytes, 2 * tok * sh.K * sh.N, [&, sh, splits, fused](cudaStream_t s) {
                // Input [Tb, K]: x (K = H) or u (K = I); residual [Tb, H]: x.
                hc::SmallGemm(dt, sh.K == H ? x.p : u.p, Tb, sh.K, wdev.p, sh.N, bdev.p,
                              hc::GemmEpilogue::kBias, sh.res ? x.p : nullptr, ys.p, splits,
                              fused, ws.workspace(), ws.counters(), s);
              });
        }
      }
    }
  }
  return J;
}

nlohmann::json Profile(const std::vector<int>& mixed, std::vector<ProfileRow>* table) {
  nlohmann::json P;
  P["ceilings"] = Ceilings();
  hc::EncoderConfig base;
  P["base_1x64"] = ProfileCase(base, {64}, table, "1x64");
  P["base_128x64"] = ProfileCase(base, std::vector<int>(128, 64), table, "128x64");
  std::vector<int> first(mixed.begin(), mixed.begin() + std::min<size_t>(128, mixed.size()));
  P["base_mixed128"] = ProfileCase(base, first, table, "mixed");
  return P;
}

// Latency, throughput, mixed workload and memory of one encoder (see the header).
nlohmann::json Measure(const std::string& label, const hc::EncoderConfig& c,
                       const hc::EncoderWeights& w, const hc::EncoderOptions& o,
                       std::mt19937_64& rng, const std::vector<int>& mixed, double target_s,
                       Clock::time_point t0) {
  CUDA_CHECK(cudaSetDevice(0));
  CUDA_CHECK(cudaDeviceSynchronize());
  size_t free0 = 0, free1 = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free0, &total));
  auto enc = hc::CudaEncoder::Create(c, w, o);
  auto ctx = enc->CreateContext();
  ctx->Warmup({{1, 64}, {128, 64}, {128, 128}});
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemGetInfo(&free1, &total));
  nlohmann::json M;
  M["build_and_warmup_s"] = std::chrono::duration<double>(Clock::now() - t0).count();
  M["precision"] = o.quant == hc::EncoderQuant::kNone ? hc::DTypeName(o.dtype)
                                                       : hc::EncoderQuantName(o.quant);
  M["memory"] = {{"weights_mib", enc->weight_bytes() / 1048576.0},
                 {"context_mib", ctx->device_bytes() / 1048576.0},
                 {"allocated_mib", (enc->weight_bytes() + ctx->device_bytes()) / 1048576.0},
                 {"device_free_delta_mib", (double(free0) - double(free1)) / 1048576.0},
                 {"context_activation_union_mib", ctx->activation_union_bytes() / 1048576.0},
                 {"qkv_head_groups_16384", enc->QkvGroups(16384)},
                 {"ffn_chunk_rows_16384", enc->FfnRows(16384)},
                 {"profile", "128x128"}};
  std::vector<Inputs> l1, l128;
  for (int s = 0; s < 4; ++s) {
    l1.push_back(MakeInputs(rng, {64}));
    l128.push_back(MakeInputs(rng, std::vector<int>(128, 64)));
  }
  M["latency_1x64"] = TimeRuns(*ctx, l1, target_s, 200);
  M["throughput_128x64"] = TimeRuns(*ctx, l128, target_s, 30);
  M["throughput_128x64_2ctx"] = TimeConcurrent(*enc, *ctx, 2, l128, target_s);
  M["mixed_1024_b128"] = Mixed(*ctx, mixed, 128, 5);
  M["mixed_1024_b32"] = Mixed(*ctx, mixed, 32, 5);
  M["graphs"] = ctx->graphs();
  M["gemm_choices"] = enc->TuningReport();
  if (o.quant != hc::EncoderQuant::kNone) {
    M["quant_paths_8192"] = enc->QuantPaths(8192);
    M["quant_paths_64"] = enc->QuantPaths(64);
    for (const auto& p : enc->QuantPaths(8192)) std::printf("  %s 128x64 %s\n", label.c_str(),
                                                          p.c_str());
  }
  // GEMM time of one 128x64 batch from the tuned choices (layer GEMMs x layers; -1 where one
  // was not timed).
  const double gemm_ms = enc->LayerGemmMs(8192);
  M["gemm_ms_128x64_tuned_sum"] = gemm_ms > 0 ? gemm_ms * c.layers : -1.0;  // slot head excluded
  std::printf("%s: 1x64 %.3f ms (device %.3f) | 128x64 %.0f seq/s (device %.0f, 2 contexts "
              "%.0f) | mixed b128 "
              "%.0f seq/s, b32 %.0f seq/s | alloc %.0f MiB, device delta %.0f MiB\n",
              label.c_str(), M["latency_1x64"]["median_ms"].get<double>(),
              M["latency_1x64"]["device_median_ms"].get<double>(),
              M["throughput_128x64"]["seq_per_s"].get<double>(),
              M["throughput_128x64"]["device_seq_per_s"].get<double>(),
              M["throughput_128x64_2ctx"]["seq_per_s"].get<double>(),
              M["mixed_1024_b128"]["seq_per_s"].get<double>(),
              M["mixed_1024_b32"]["seq_per_s"].get<double>(),
              M["memory"]["allocated_mib"].get<double>(),
              M["memory"]["device_free_delta_mib"].get<double>());
  std::fflush(stdout);
  return M;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path, models = "base,small", lengths_path, quant = "fp8,int8", only;
  std::string timing_cache;  // --timing-cache: every encoder's GEMM choices, loaded and saved
  int quant_chunk = -1;  // -1: the encoder's default
  double target_s = 1.0;
  bool profile = false, profile_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out" && i + 1 < argc) out_path = argv[++i];
    else if (a == "--models" && i + 1 < argc) models = argv[++i];
    else if (a == "--target-s" && i + 1 < argc) target_s = std::stod(argv[++i]);
    else if (a == "--mixed-lengths" && i + 1 < argc) lengths_path = argv[++i];
    else if (a == "--quant" && i + 1 < argc) quant = argv[++i];
    else if (a == "--quant-chunk" && i + 1 < argc) quant_chunk = std::stoi(argv[++i]);
    else if (a == "--variants" && i + 1 < argc) only = "," + std::string(argv[++i]) + ",";
    else if (a == "--timing-cache" && i + 1 < argc) timing_cache = argv[++i];
    else if (a == "--profile") profile = true;
    else if (a == "--profile-only") profile = profile_only = true;
    else {
      std::fprintf(stderr, "usage: %s [--out FILE] [--models base,small] [--target-s S] "
                   "[--mixed-lengths FILE] [--quant fp8,int8|none] [--quant-chunk ROWS] "
                   "[--variants fp8,fp8_exact,...] [--timing-cache FILE] "
                   "[--profile] [--profile-only]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    nlohmann::json R;
    cudaDeviceProp p{};
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    int rt = 0, drv = 0;
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv);
    R["env"] = {{"gpu", p.name}, {"sm", p.major * 10 + p.minor}, {"sms", p.multiProcessorCount},
                {"cuda_runtime", rt}, {"driver", drv}, {"cublaslt", cublasLtGetVersion()}};
    std::mt19937_64 rng(1234);
    // The mixed workload: 1024 lengths uniform in [8, 128].
    std::vector<int> mixed;
    if (!lengths_path.empty()) {  // the peers' exact lengths (device-check.sh writes them)
      std::ifstream in(lengths_path);
      for (int L; in >> L;) mixed.push_back(std::clamp(L, 1, 128));
      R["mixed_lengths_from"] = lengths_path;
    }
    if (mixed.empty())
      for (int i = 0; i < 1024; ++i) mixed.push_back(8 + int(rng() % 121));
    double mean = 0;
    for (int L : mixed) mean += L;
    R["mixed_mean_tokens"] = mean / mixed.size();

    for (const std::string kind : {"base", "small"}) {
      if (profile_only || models.find(kind) == std::string::npos) continue;
      hc::EncoderConfig c;
      if (kind == "small") {
        c.layers = 4; c.hidden = 256; c.heads = 4; c.intermediate = 1024;
      }
      const auto t0 = Clock::now();
      hc::EncoderWeights w = hc::EncoderWeights::Random(c, 42);
      hc::EncoderOptions o;
      o.dtype = hc::DType::kF16;
      o.max_batch = 128;
      o.max_seq = 128;
      o.timing_cache = timing_cache;  // a second run with the file: warm-up without timing
      R[kind] = Measure(kind, c, w, o, rng, mixed, target_s, t0);
      // FP8 / INT8 (G3, G5): the four big GEMMs per layer quantised, scales calibrated (amax)
      // on random batches of this workload's shape. Base only (the targets are base's).
      // fp8: the defaults (per-tensor weight scales, fast accumulation for every GEMM, E4M3
      // FFN1 output, every fusion, the memory tiling); fp8_exact: exact accumulation;
      // fp8_fast1024: fast accumulation for K <= 1024 (FFN2 exact); fp8_perchannel: per-channel x
      // per-token scale vectors, exact (the default before 2026-12-02); fp8_unchunked: the
      // defaults without the memory tiling (FFN row chunks, QKV head groups); fp8_noqout: per
      // channel, no fusions (LayerNorm / attention and their quantise passes apart);
      // fp8_search0: the defaults with KernelVariants::gemm_search 0 (the cuBLASLt heuristic's
      // candidates only, the choice before 2026-12-02's session 7); fp8_own0: the defaults with
      // KernelVariants::own_gemm 0 (FFN1 in cuBLASLt, never our own FP8 GEMM: before session 9).
      std::vector<std::string> variants = {"fp8",           "fp8_exact",   "fp8_fast1024",
                                           "fp8_perchannel", "fp8_unchunked", "fp8_noqout",
                                           "fp8_search0",   "fp8_own0",     "int8"};
      for (const std::string& variant : variants) {
        const std::string qn = variant.substr(0, variant.find('_'));
        if (kind != "base" || quant.find(qn) == std::string::npos) continue;
        if (!only.empty() && only.find("," + variant + ",") == std::string::npos) continue;
        const hc::EncoderQuant eq = hc::ParseEncoderQuant(qn);
        const std::string label = kind + "_" + variant;
        if (!hc::QuantTypeSupported(hc::ToQuantType(eq))) {
          R[label] = {{"error", qn + " not supported on this GPU"}};
          continue;
        }
        try {
          const auto tq = Clock::now();
          hc::EncoderOptions oq = o;
          oq.act_scales = hc::ScalesFromAmax(
              hc::CalibrateEncoderAmax(c, w, o, hc::RandomEncoderBatches(c, 4, 32, 128, 7)), eq);
          oq.quant = eq;
          if (quant_chunk >= 0) oq.quant_chunk_rows = quant_chunk;
          oq.quant_fp8_output = variant != "fp8_noqout";
          oq.quant_fuse_layernorm = variant != "fp8_noqout";  // the "no fusions" row
          oq.quant_fuse_attention = variant != "fp8_noqout";
          const bool per_channel = variant == "fp8_perchannel" || variant == "fp8_noqout";
          if (per_channel) oq.fp8_weight_scaling = hc::WeightScaling::kPerChannel;
          if (per_channel || variant == "fp8_exact") oq.fp8_fast_accum_max_k = 0;
          if (variant == "fp8_fast1024") oq.fp8_fast_accum_max_k = 1024;
          if (variant.find("unchunked") != std::string::npos) {
            oq.quant_ffn_chunk_rows = 0;
            oq.quant_qkv_group_tokens = 0;
          }
          int search = 0;  // the FP8 GEMMs' search level the row ran with (INT8 never searches)
          int own = 0;     // ... and whether FFN1 could take our own FP8 GEMM
          {
            hc::ScopedKernelVariants scope(-1, -1, -1, variant == "fp8_search0" ? 0 : -1,
                                           variant == "fp8_own0" ? 0 : -1);
            search = hc::GetKernelVariants().gemm_search;
            own = hc::GetKernelVariants().own_gemm;
            R[label] = Measure(label, c, w, oq, rng, mixed, target_s, tq);
          }
          R[label]["quant_chunk_rows"] = oq.quant_chunk_rows;
          if (eq == hc::EncoderQuant::kFp8) {
            R[label]["gemm_search"] = search;
            R[label]["own_gemm"] = own;
            R[label]["fp8_weight_scaling"] = hc::WeightScalingName(oq.fp8_weight_scaling);
            R[label]["fp8_fast_accum_max_k"] = oq.fp8_fast_accum_max_k;
          }
        } catch (const hotline::Error& e) {
          R[label] = {{"error", e.what()}};
          std::printf("%s: %s\n", label.c_str(), e.what());
        }
      }
    }
    if (profile) {
      std::vector<ProfileRow> table;
      R["profile"] = Profile(mixed, &table);
      if (!out_path.empty()) std::ofstream(out_path) << R.dump(1) << "\n";
      std::printf("ceilings: %s\n", R["profile"]["ceilings"].dump().c_str());
      std::printf("%-72s %9s %8s %8s\n", "profile (device time per launch, graph replays)", "us",
                  "GB/s", "TFLOP/s");
      for (const auto& r : table) {
        std::printf("%-72s %9.2f %8.0f %8.1f\n", r.name.substr(0, 72).c_str(), r.us,
                    r.us > 0 ? r.bytes / r.us * 1e-3 : 0.0, r.us > 0 ? r.flops / r.us * 1e-6 : 0.0);
      }
    }
    if (!out_path.empty()) std::ofstream(out_path) << R.dump(1) << "\n";
    return 0;
  } catch (const hotline::Error& e) {
    std::fprintf(stderr, "hotline_cuda_bench: %s\n", e.what());
    return 1;
  }
}
