// GPU benchmark of the CUDA encoder runner on BERT-base and small joint intent + slot encoders
// with random weights (PERFORMANCE.md's G1, G2, G4, G5), FP16:
//   latency   batch 1 x seq 64: wall time of a whole Run (host staging, graph launch, copies back,
//             synchronise), median of many calls over 4 rotating input sets
//   throughput batch 128 x seq 64: sequences / median Run time
//   mixed     1024 requests of 8..128 tokens (uniform, mean ~68), packed padding-free into
//             batches of 128 (and of 32, the peers' batch size); sequences / time of a whole pass
//   memory    base, profile 128 x 128: our device allocations (weights + one context) and the
//             change in the device's free memory over creating both (cuBLASLt and CUDA runtime
//             internals, graphs included)
// Writes JSON (--out FILE) and prints a short table.
//   hotline_cuda_bench [--out results.json] [--models base,small] [--reps N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/encoder.h"

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
  std::vector<double> ms;
  const auto t_end = Clock::now() + std::chrono::duration<double>(target_s);
  for (int i = 0; i < min_reps || Clock::now() < t_end; ++i) {
    const Inputs& in = sets[i % sets.size()];
    const auto t0 = Clock::now();
    ctx.Run(in.ids.data(), nullptr, in.cu.data(), in.batch(), &out);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (ms.size() > 20000) break;
  }
  const int B = sets[0].batch();
  return {{"median_ms", Median(ms)}, {"p10_ms", Pct(ms, 0.1)}, {"p99_ms", Pct(ms, 0.99)},
          {"reps", ms.size()}, {"seq_per_s", B / Median(ms) * 1e3}};
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

}  // namespace

int main(int argc, char** argv) {
  std::string out_path, models = "base,small", lengths_path;
  double target_s = 1.0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out" && i + 1 < argc) out_path = argv[++i];
    else if (a == "--models" && i + 1 < argc) models = argv[++i];
    else if (a == "--target-s" && i + 1 < argc) target_s = std::stod(argv[++i]);
    else if (a == "--mixed-lengths" && i + 1 < argc) lengths_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--out FILE] [--models base,small] [--target-s S] "
                   "[--mixed-lengths FILE]\n",
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
      if (models.find(kind) == std::string::npos) continue;
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
      M["memory"] = {{"weights_mib", enc->weight_bytes() / 1048576.0},
                     {"context_mib", ctx->device_bytes() / 1048576.0},
                     {"allocated_mib", (enc->weight_bytes() + ctx->device_bytes()) / 1048576.0},
                     {"device_free_delta_mib", (double(free0) - double(free1)) / 1048576.0},
                     {"profile", "128x128"}};
      std::vector<Inputs> l1, l128;
      for (int s = 0; s < 4; ++s) {
        l1.push_back(MakeInputs(rng, {64}));
        l128.push_back(MakeInputs(rng, std::vector<int>(128, 64)));
      }
      M["latency_1x64"] = TimeRuns(*ctx, l1, target_s, 200);
      M["throughput_128x64"] = TimeRuns(*ctx, l128, target_s, 30);
      M["mixed_1024_b128"] = Mixed(*ctx, mixed, 128, 5);
      M["mixed_1024_b32"] = Mixed(*ctx, mixed, 32, 5);
      M["graphs"] = ctx->graphs();
      M["gemm_choices"] = enc->TuningReport();
      // GEMM time of one 128x64 batch from the tuned choices (layer GEMMs x layers).
      double gemm_ms = 0;
      for (const auto& [k, v] : enc->TuningReport()) {
        if (k.rfind("8192x", 0) != 0) continue;
        const auto pos = v.rfind(" ms of");
        const auto start = v.rfind(' ', pos - 1);
        gemm_ms += std::stod(v.substr(start + 1, pos - start - 1));
      }
      M["gemm_ms_128x64_tuned_sum"] = gemm_ms * c.layers;  // slot head excluded (<1%)
      R[kind] = M;
      std::printf("%s: 1x64 %.3f ms | 128x64 %.0f seq/s | mixed b128 %.0f seq/s, b32 %.0f seq/s | "
                  "alloc %.0f MiB, device delta %.0f MiB\n",
                  kind.c_str(), M["latency_1x64"]["median_ms"].get<double>(),
                  M["throughput_128x64"]["seq_per_s"].get<double>(),
                  M["mixed_1024_b128"]["seq_per_s"].get<double>(),
                  M["mixed_1024_b32"]["seq_per_s"].get<double>(),
                  M["memory"]["allocated_mib"].get<double>(),
                  M["memory"]["device_free_delta_mib"].get<double>());
      std::fflush(stdout);
    }
    if (!out_path.empty()) std::ofstream(out_path) << R.dump(1) << "\n";
    return 0;
  } catch (const hotline::Error& e) {
    std::fprintf(stderr, "hotline_cuda_bench: %s\n", e.what());
    return 1;
  }
}
