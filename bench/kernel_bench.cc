// Micro-benchmark of the CPU kernels (not a test; never run by `make test`).
//
//   hotline_kernel_bench [--layers 4 --hidden 256 --heads 4 --ffn 1024] [--iters 200]
//
// 1. Each GEMM shape of one encoder layer, each tactic, at M = 32 (batch 1 x seq 32) and
//    M = 1024 (batch 32 x seq 32): median microseconds and GFLOP/s.
// 2. A whole encoder forward built from the kernels alone (embeddings + LayerNorm, then per layer
//    QKV GEMM, attention, output GEMM + residual, LayerNorm, FFN1 + GELU, FFN2 + residual,
//    LayerNorm), random weights, with the fastest tactic per shape: median latency for 1 x 32,
//    1 x 64 and throughput for 32 x 32, for FP32 and BF16. This is what the engine's plan executor
//    does, minus its bookkeeping, so it bounds what `hotline perf` can reach.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/cpu/kernels.h"

namespace cpu = hotline::engine::cpu;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<float> Rand(size_t n, std::mt19937& rng, float a) {
  std::uniform_real_distribution<float> d(-a, a);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// HOTLINE_BENCH_CPUTIME=1: process CPU time instead of wall time. With OMP_NUM_THREADS=1 this
// ignores the time the thread spends descheduled, which is what a shared machine adds.
double NowUs() {
  static const bool cputime = std::getenv("HOTLINE_BENCH_CPUTIME") != nullptr;
  if (!cputime) {
    return std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count();
  }
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

// Median by default; HOTLINE_BENCH_MIN=1 takes the minimum (more stable on a loaded machine).
template <typename F>
double MedianUs(F f, int iters) {
  static const bool use_min = std::getenv("HOTLINE_BENCH_MIN") != nullptr;
  for (int i = 0; i < std::max(3, iters / 10); ++i) f();
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    const double s = NowUs();
    f();
    t.push_back(NowUs() - s);
  }
  if (use_min) return *std::min_element(t.begin(), t.end());
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

struct Config {
  int layers = 4, hidden = 256, heads = 4, ffn = 1024, vocab = 21128, iters = 200;
};

struct Shape {
  const char* name;
  int K, N;
  cpu::Epilogue epi;
  bool residual;
};

// Picks the fastest tactic for (shape, precision) at M and prints the table row.
int Tune(const Shape& s, cpu::GemmPrecision prec, int M, int iters, std::mt19937& rng,
         bool print) {
  auto w = Rand(static_cast<size_t>(s.K) * s.N, rng, 0.05f);
  auto b = Rand(s.N, rng, 0.1f);
  auto x = Rand(static_cast<size_t>(M) * s.K, rng, 1.0f);
  std::vector<float> y(static_cast<size_t>(M) * s.N), r(y.size(), 0.5f);
  int best = 0;
  double best_us = 1e30;
  for (int t : cpu::Gemm::Tactics(prec)) {
    cpu::Gemm g(w.data(), s.K, s.N, b.data(), s.epi, prec, t);
    const double us = MedianUs([&] { g.Run(x.data(), M, y.data(), s.residual ? r.data() : nullptr); },
                               iters);
    if (print) {
      std::printf("  %-6s %-4s M=%-5d K=%-5d N=%-5d %-12s %9.1f us %7.1f GFLOP/s\n", s.name,
                  prec == cpu::GemmPrecision::kBF16 ? "bf16" : "fp32", M, s.K, s.N,
                  cpu::Gemm::TacticName(t), us, 2.0 * M * s.K * s.N / us * 1e-3);
    }
    if (us < best_us) {
      best_us = us;
      best = t;
    }
  }
  return best;
}

struct Layer {
  std::unique_ptr<cpu::Gemm> qkv, out, ffn1, ffn2;
  std::vector<float> g1, b1, g2, b2;
};

struct Model {
  Config c;
  std::vector<float> word, pos, type, eg, eb;
  std::vector<Layer> layers;
  // activations
  std::vector<float> h, qkv, ctx, inter, scratch;
  std::vector<int32_t> ids, cu;

  Model(const Config& cfg, cpu::GemmPrecision prec, const std::map<std::string, int>& tactic,
        std::mt19937& rng)
      : c(cfg) {
    const int H = c.hidden;
    word = Rand(static_cast<size_t>(c.vocab) * H, rng, 0.1f);
    pos = Rand(512 * static_cast<size_t>(H), rng, 0.1f);
    type = Rand(2 * static_cast<size_t>(H), rng, 0.1f);
    eg.assign(H, 1.0f);
    eb.assign(H, 0.0f);
    for (int l = 0; l < c.layers; ++l) {
      Layer L;
      auto mk = [&](int K, int N, cpu::Epilogue e, const char* name) {
        auto w = Rand(static_cast<size_t>(K) * N, rng, 1.0f / std::sqrt(static_cast<float>(K)));
        auto b = Rand(N, rng, 0.02f);
        return std::make_unique<cpu::Gemm>(w.data(), K, N, b.data(), e, prec, tactic.at(name));
      };
      L.qkv = mk(H, 3 * H, cpu::Epilogue::kNone, "qkv");
      L.out = mk(H, H, cpu::Epilogue::kNone, "out");
      L.ffn1 = mk(H, c.ffn, cpu::Epilogue::kGelu, "ffn1");
      L.ffn2 = mk(c.ffn, H, cpu::Epilogue::kNone, "ffn2");
      L.g1.assign(H, 1.0f);
      L.b1.assign(H, 0.0f);
      L.g2.assign(H, 1.0f);
      L.b2.assign(H, 0.0f);
      layers.push_back(std::move(L));
    }
  }

  void Prepare(int batch, int seq, std::mt19937& rng) {
    const int T = batch * seq, H = c.hidden;
    h.assign(static_cast<size_t>(T) * H, 0.0f);
    qkv.assign(static_cast<size_t>(T) * 3 * H, 0.0f);
    ctx.assign(static_cast<size_t>(T) * H, 0.0f);
    inter.assign(static_cast<size_t>(T) * c.ffn, 0.0f);
    scratch.assign(cpu::AttentionScratchFloats(seq, omp_get_max_threads()), 0.0f);
    std::uniform_int_distribution<int> d(0, c.vocab - 1);
    ids.resize(T);
    for (auto& i : ids) i = d(rng);
    cu.assign(batch + 1, 0);
    for (int b = 0; b <= batch; ++b) cu[b] = b * seq;
  }

  // Per-op accumulated microseconds when profiling (HOTLINE_BENCH_PROFILE=1).
  std::map<std::string, double> prof;
  bool profile = std::getenv("HOTLINE_BENCH_PROFILE") != nullptr;
  template <typename F>
  void Op(const char* name, F f) {
    if (!profile) return f();
    const double s = NowUs();
    f();
    prof[name] += NowUs() - s;
  }
  void PrintProfile(int runs) {
    for (auto& [k, v] : prof) std::printf("    %-10s %9.1f us/forward\n", k.c_str(), v / runs);
    prof.clear();
  }

  void Forward(int batch) {
    const int T = cu[batch], H = c.hidden;
    Op("embed_ln", [&] {
      cpu::EmbeddingLayerNorm(ids.data(), nullptr, cu.data(), batch, word.data(), c.vocab,
                              pos.data(), 512, type.data(), 2, eg.data(), eb.data(), 1e-12f, H,
                              h.data());
    });
    const float scale = 1.0f / std::sqrt(static_cast<float>(H / c.heads));
    for (const Layer& L : layers) {
      Op("qkv", [&] { L.qkv->Run(h.data(), T, qkv.data()); });
      Op("attention", [&] {
        cpu::Attention(qkv.data(), cu.data(), batch, c.heads, H / c.heads, scale, ctx.data(),
                       scratch.data());
      });
      Op("out", [&] { L.out->Run(ctx.data(), T, h.data(), h.data()); });
      Op("ln", [&] {
        cpu::LayerNorm(h.data(), nullptr, L.g1.data(), L.b1.data(), 1e-12f, T, H, h.data());
      });
      Op("ffn1", [&] { L.ffn1->Run(h.data(), T, inter.data()); });
      Op("ffn2", [&] { L.ffn2->Run(inter.data(), T, h.data(), h.data()); });
      Op("ln", [&] {
        cpu::LayerNorm(h.data(), nullptr, L.g2.data(), L.b2.data(), 1e-12f, T, H, h.data());
      });
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  Config c;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    int v = std::atoi(argv[i + 1]);
    if (a == "--layers") c.layers = v;
    else if (a == "--hidden") c.hidden = v;
    else if (a == "--heads") c.heads = v;
    else if (a == "--ffn") c.ffn = v;
    else if (a == "--iters") c.iters = v;
  }
  std::printf("isa %s, %d OpenMP threads, model %dx%d heads %d ffn %d\n",
              cpu::CpuIsaString().c_str(), omp_get_max_threads(), c.layers, c.hidden, c.heads,
              c.ffn);
  std::mt19937 rng(1);
  const Shape shapes[] = {{"qkv", c.hidden, 3 * c.hidden, cpu::Epilogue::kNone, false},
                          {"out", c.hidden, c.hidden, cpu::Epilogue::kNone, true},
                          {"ffn1", c.hidden, c.ffn, cpu::Epilogue::kGelu, false},
                          {"ffn2", c.ffn, c.hidden, cpu::Epilogue::kNone, true}};
  for (auto prec : {cpu::GemmPrecision::kFP32, cpu::GemmPrecision::kBF16}) {
    for (int M : {32, 1024}) {
      std::map<std::string, int> tactic;
      for (const Shape& s : shapes) tactic[s.name] = Tune(s, prec, M, c.iters, rng, true);
      Model m(c, prec, tactic, rng);
      const char* p = prec == cpu::GemmPrecision::kBF16 ? "bf16" : "fp32";
      if (M == 32) {
        for (int seq : {32, 64}) {
          m.Prepare(1, seq, rng);
          const double us = MedianUs([&] { m.Forward(1); }, c.iters);
          std::printf("forward %s batch 1 x seq %d: %.3f ms\n", p, seq, us / 1000);
          if (m.profile) m.PrintProfile(c.iters + std::max(3, c.iters / 10));
        }
      } else {
        m.Prepare(32, 32, rng);
        const double us = MedianUs([&] { m.Forward(32); }, std::max(10, c.iters / 10));
        std::printf("forward %s batch 32 x seq 32: %.2f ms = %.0f seq/s\n", p, us / 1000,
                    32 / (us * 1e-6));
        if (m.profile) m.PrintProfile(std::max(10, c.iters / 10) + 3);
      }
    }
  }
  return 0;
}
