// Micro-benchmark of the INT8 GEMM tactics (GemmS8; not a test, never run by `make test`).
//
//   OMP_NUM_THREADS=2 hotline_s8_gemm_bench [--hidden 256 --ffn 1024] [--iters 300] [--m 1,32,1024]
//
// Each GEMM shape of one encoder layer of the given size (qkv, out, ffn1 + GELU, ffn2 + residual,
// slot head N=41, pooler/intent rows), each tactic GemmS8::Tactics() offers on this CPU, at each
// M: median (HOTLINE_BENCH_MIN=1: minimum) microseconds per call and GMAC/s. Wall time; run it
// on a quiet machine and quote the load average.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/cpu/kernels.h"

namespace cpu = hotline::engine::cpu;

namespace {

template <typename F>
double TimeUs(F f, int iters) {
  static const bool use_min = std::getenv("HOTLINE_BENCH_MIN") != nullptr;
  for (int i = 0; i < std::max(5, iters / 10); ++i) f();
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    const auto s = std::chrono::steady_clock::now();
    f();
    t.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - s).count());
  }
  if (use_min) return *std::min_element(t.begin(), t.end());
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

struct Shape {
  const char* name;
  int K, N;
  cpu::Epilogue epi;
  bool residual;
  bool rows_are_batch;  // pooler: one row per sequence, not per token
};

}  // namespace

int main(int argc, char** argv) {
  int hidden = 256, ffn = 1024, iters = 300;
  std::vector<int> ms = {1, 32, 1024};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--hidden")
      hidden = std::atoi(v.c_str());
    else if (a == "--ffn")
      ffn = std::atoi(v.c_str());
    else if (a == "--iters")
      iters = std::atoi(v.c_str());
    else if (a == "--m") {
      ms.clear();
      std::stringstream ss(v);
      for (std::string t; std::getline(ss, t, ',');) ms.push_back(std::atoi(t.c_str()));
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  std::printf("isa %s, vnni %d, weight qmax %d, %d OpenMP threads\n", cpu::CpuIsaString().c_str(),
              int(cpu::CpuHasVnni()), cpu::S8WeightQmax(), omp_get_max_threads());
  const Shape shapes[] = {{"qkv", hidden, 3 * hidden, cpu::Epilogue::kNone, false, false},
                          {"out", hidden, hidden, cpu::Epilogue::kNone, true, false},
                          {"ffn1", hidden, ffn, cpu::Epilogue::kGelu, false, false},
                          {"ffn2", ffn, hidden, cpu::Epilogue::kNone, true, false},
                          {"slot", hidden, 41, cpu::Epilogue::kNone, false, false},
                          {"pooler", hidden, hidden, cpu::Epilogue::kTanh, false, true}};
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> wq(-cpu::S8WeightQmax(), cpu::S8WeightQmax()), xq(-127, 127);
  std::printf("%-7s %5s %5s %5s %-12s %10s %8s\n", "gemm", "M", "K", "N", "tactic", "us", "GMAC/s");
  for (int M : ms) {
    for (const Shape& s : shapes) {
      if (s.rows_are_batch && M > 32) continue;  // batch rows: at most the batch size
      std::vector<int8_t> w(size_t(s.K) * s.N), x(size_t(M) * s.K);
      for (auto& v : w) v = int8_t(wq(rng));
      for (auto& v : x) v = int8_t(xq(rng));
      std::vector<float> ws(s.N, 0.001f), b(s.N, 0.1f), y(size_t(M) * s.N, 0.5f);
      for (int t : cpu::GemmS8::Tactics()) {
        cpu::GemmS8 g(w.data(), s.K, s.N, ws.data(), 0.01f, b.data(), s.epi, 0.f, t);
        const double us =
            TimeUs([&] { g.Run(x.data(), M, y.data(), s.residual ? y.data() : nullptr); }, iters);
        std::printf("%-7s %5d %5d %5d %-12s %10.2f %8.1f\n", s.name, M, s.K, s.N,
                    cpu::Gemm::TacticName(t), us, double(M) * s.K * s.N / us * 1e-3);
      }
    }
  }
  return 0;
}
