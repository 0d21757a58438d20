// The AVX-512 packed INT8 GEMMs: packed_vnni (GemmS8 tactic 7, engine/cpu/gemm_s8_vnni.cc) and
// packed_amx (tactic 8, gemm_s8_amx.cc). Each is offered exactly where the CPU has AVX512-VNNI
// (AMX: also AMX-TILE and AMX-INT8), checked against the kernel's own report in /proc/cpuinfo,
// not against our cpuid code; then, for each: exact int32 accumulation over the full 8-bit range
// against a naive int64 reference, odd shapes through every micro-tile tail (M = 1..9, K and N
// not multiples of 4, 16 or 64), the fused epilogues (bias, GELU, tanh, residual, requantised s8
// output) against a double-precision reference built from the integer product, the same result
// on 1 and 2 threads, and the build-time tuner's candidate list and timing.
//
// On a CPU without VNNI (or AMX) a kernel cannot run: the tests print that they test only its
// refusal there (the tactic is not offered, constructing it throws kFailedPrecondition), do so,
// and still test the kernels the CPU has.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/backend.h"
#include "engine/cpu/kernels.h"
#include "engine/int8_test_util.h"  // tests/engine/int8_test_util.h
#include "engine/engine.h"

namespace hotline::engine::cpu {
namespace {

constexpr int kPackedVnni = 7;
constexpr int kPackedAmx = 8;

// The "flags" line of /proc/cpuinfo (the kernel's view of cpuid and of what the OS enabled).
std::vector<std::string> ProcCpuFlags() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("flags", 0) == 0) {
      std::istringstream ss(line.substr(line.find(':') + 1));
      std::vector<std::string> out;
      for (std::string w; ss >> w;) out.push_back(w);
      return out;
    }
  }
  return {};
}

bool ProcHas(const std::vector<std::string>& flags, const std::string& f) {
  return std::find(flags.begin(), flags.end(), f) != flags.end();
}

// What packed_vnni needs, from /proc/cpuinfo: AVX-512 F/BW/VL/DQ and AVX512-VNNI.
bool ProcSaysVnni() {
  const auto f = ProcCpuFlags();
  if (f.empty()) {
    ADD_FAILURE() << "/proc/cpuinfo has no flags line: cannot check the CPU independently";
    return false;
  }
  for (const char* need : {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"}) {
    if (!ProcHas(f, need)) return false;
  }
  return true;
}

bool ProcSaysAmx() {
  const auto f = ProcCpuFlags();
  return ProcSaysVnni() && ProcHas(f, "amx_tile") && ProcHas(f, "amx_int8");
}

bool Offered(const std::vector<int>& t, int tactic) {
  return std::find(t.begin(), t.end(), tactic) != t.end();
}

void ExpectRefused(int tactic, int K, int N);

// The AVX-512 packed tactics this CPU runs; for each one it lacks, says so in the test output and
// checks that constructing it is refused.
std::vector<int> RunnableOrSay(const char* what) {
  std::vector<int> out;
  const auto offered = GemmS8::Tactics();
  for (int t : {kPackedVnni, kPackedAmx}) {
    if (Offered(offered, t)) {
      out.push_back(t);
      continue;
    }
    std::printf("[ NOTE     ] %s: this CPU cannot run %s (%s); testing only that it is refused\n",
                what, Gemm::TacticName(t),
                t == kPackedVnni ? "no AVX512-VNNI" : "no usable AMX-INT8");
    ExpectRefused(t, 7, 9);
  }
  return out;
}

using test::RandomS8;

void ExpectRefused(int tactic, int K, int N) {
  std::vector<int8_t> w(size_t(K) * N, 1);
  std::vector<float> ws(N, 1.f);
  try {
    GemmS8 g(w.data(), K, N, ws.data(), 1.f, nullptr, Epilogue::kNone, 0.f, tactic);
    ADD_FAILURE() << Gemm::TacticName(tactic) << " was constructed on a CPU that lacks it";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find(Gemm::TacticName(tactic)), std::string::npos) << e.what();
  }
}

TEST(GemmS8VnniTest, OfferedExactlyWhereTheCpuHasVnni) {
  const bool proc = ProcSaysVnni();
  EXPECT_EQ(CpuHasVnni(), proc) << "cpuid/xgetbv and /proc/cpuinfo disagree about AVX512-VNNI";
  const auto t = GemmS8::Tactics();
  EXPECT_TRUE(Offered(t, 5)) << "onednn_s8 is always offered";
  EXPECT_EQ(Offered(t, kPackedVnni), proc);
  EXPECT_STREQ(Gemm::TacticName(kPackedVnni), "packed_vnni");
  EXPECT_STREQ(Gemm::TacticName(kPackedAmx), "packed_amx");
  // AMX only where the CPU reports it (and the OS grants it: CpuHasAmxInt8 asks).
  const bool proc_amx = ProcSaysAmx();
  EXPECT_EQ(Offered(t, kPackedAmx), proc_amx && CpuHasAmxInt8());
  if (Offered(t, kPackedAmx)) EXPECT_TRUE(proc_amx);
  if (proc_amx && !CpuHasAmxInt8()) {
    std::printf(
        "[ NOTE     ] the CPU reports AMX-INT8 but the OS refused this process its tile "
        "state: packed_amx is not offered\n");
  }
  if (!proc_amx) EXPECT_FALSE(CpuHasAmxInt8());
  // The 7-bit AVX2 kernel is never offered beside VNNI: VNNI plans use 8-bit weights.
  if (proc) EXPECT_FALSE(Offered(t, 6));
  EXPECT_EQ(S8WeightQmax(), proc ? 127 : 63);
  // The backend's tuner sees the same list, and the auto choice is the packed kernel.
  auto be = CreateBackend(BackendKind::kCPU);
  EXPECT_EQ(be->GemmTactics(Precision::kINT8), t);
  EXPECT_EQ(be->TacticName(kPackedVnni), "packed_vnni");
  for (int tactic : {kPackedVnni, kPackedAmx}) {
    if (!Offered(t, tactic)) {
      std::printf(
          "[ NOTE     ] %s is not offered on this CPU: testing that the tuner cannot "
          "time it\n",
          Gemm::TacticName(tactic));
      EXPECT_THROW(be->TimeGemm(tactic, 32, 64, 64, Precision::kINT8), Error);
      continue;
    }
    const double ms = be->TimeGemm(tactic, 32, 256, 256, Precision::kINT8);
    EXPECT_GT(ms, 0.0);
    EXPECT_LT(ms, 1e3);
  }
  if (!proc) return;
  std::vector<int8_t> w(64, 1);
  std::vector<float> ws(8, 1.f);
  GemmS8 g(w.data(), 8, 8, ws.data(), 1.f, nullptr, Epilogue::kNone);
  EXPECT_EQ(g.tactic(), Offered(t, kPackedAmx) ? kPackedAmx : kPackedVnni);
}

// Full-range codes (x, w in [-127, 127], extremes forced in) and shapes that run every row tail
// (M % 8 = 1..7), a single panel and an odd number of panels, K % 4 != 0 (zero-padded quads)
// and K = 1023 (|acc| up to 127 * 127 * 1023 < 2^24: exact in the fp32 output). Unit scales make
// the output the integer product itself; the reference is a naive int64 sum.
TEST(GemmS8VnniTest, Int32AccumulationIsExactOnOddShapes) {
  for (int tactic : RunnableOrSay("Int32AccumulationIsExactOnOddShapes")) {
    SCOPED_TRACE(Gemm::TacticName(tactic));
    std::mt19937 rng(17);
    const std::vector<std::tuple<int, int, int>> shapes = {
        {1, 1, 1},     {1, 256, 256},  {2, 3, 5},      {3, 100, 70},   {5, 63, 17},
        {7, 129, 47},  {8, 64, 16},    {9, 65, 33},    {15, 1023, 41}, {16, 250, 100},
        {33, 77, 130}, {70, 200, 300}, {130, 64, 1030}};
    for (const auto& [M, K, N] : shapes) {
      auto x = RandomS8(size_t(M) * K, 127, &rng);
      auto w = RandomS8(size_t(K) * N, 127, &rng);
      // Row 0 all +-127, column 0 all +127: the largest magnitudes the codes allow.
      for (int k = 0; k < K; ++k) x[k] = (k % 3) ? 127 : -127;
      for (int k = 0; k < K; ++k) w[size_t(k) * N] = 127;
      if (M > 1) {
        for (int k = 0; k < K; ++k) x[size_t(K) + k] = -127;  // row 1 x column 0: -127*127*K
      }
      std::vector<float> ws(N, 1.f), y(size_t(M) * N, -999.f);
      GemmS8 g(w.data(), K, N, ws.data(), 1.f, nullptr, Epilogue::kNone, 0.f, tactic);
      ASSERT_EQ(g.tactic(), tactic);
      g.Run(x.data(), M, y.data());
      test::ExpectExactS8Product(x, w, y, M, K, N);
    }
  }
}

// The fused epilogue on odd shapes: y = act(acc * sx * ws[n] + b[n]) (+ res), or its s8
// requantisation, against double arithmetic on the exact integer product. The only differences
// allowed are fp32 rounding (a few ulp; GELU's rational erf is within 1e-6 of std::erf) and, for
// s8 output, one code at a rounding tie. The s8 store must not write past the valid columns.
TEST(GemmS8VnniTest, EpiloguesMatchADoubleReferenceOnOddShapes) {
  for (int tactic : RunnableOrSay("EpiloguesMatchADoubleReferenceOnOddShapes")) {
    SCOPED_TRACE(Gemm::TacticName(tactic));
    std::mt19937 rng(29);
    std::uniform_real_distribution<float> uf(-1.f, 1.f);
    for (const auto& [M, K, N] : std::vector<std::tuple<int, int, int>>{
             {1, 256, 256}, {1, 30, 7}, {6, 257, 33}, {11, 96, 49}, {32, 256, 41}}) {
      const auto x = RandomS8(size_t(M) * K, 127, &rng);
      const auto w = RandomS8(size_t(K) * N, 127, &rng);
      std::vector<float> ws(N), bias(N), res(size_t(M) * N);
      for (int n = 0; n < N; ++n) {
        ws[n] = 0.0004f * float(1 + n % 7);
        bias[n] = 0.5f * uf(rng);
      }
      for (auto& r : res) r = uf(rng);
      const float sx = 0.02f, out_scale = 0.03f;
      std::vector<int64_t> acc(size_t(M) * N, 0);
      for (int m = 0; m < M; ++m) {
        for (int n = 0; n < N; ++n) {
          for (int k = 0; k < K; ++k) {
            acc[size_t(m) * N + n] += int64_t(x[size_t(m) * K + k]) * w[size_t(k) * N + n];
          }
        }
      }
      for (Epilogue e : {Epilogue::kNone, Epilogue::kGelu, Epilogue::kTanh}) {
        for (int mode = 0; mode < 3; ++mode) {  // 0 fp32, 1 fp32 + residual in place, 2 s8 out
          SCOPED_TRACE(std::to_string(M) + "x" + std::to_string(K) + "x" + std::to_string(N) +
                       " epilogue " + std::to_string(int(e)) + " mode " + std::to_string(mode));
          GemmS8 g(w.data(), K, N, ws.data(), sx, bias.data(), e, mode == 2 ? out_scale : 0.f,
                   tactic);
          std::vector<float> y = res;
          // One guard row past the output: an s8 store must stay inside M*N bytes.
          std::vector<int8_t> yq(size_t(M) * N + 64, int8_t(99));
          if (mode == 2) {
            g.Run(x.data(), M, yq.data());
          } else {
            g.Run(x.data(), M, y.data(), mode == 1 ? y.data() : nullptr);
          }
          for (int m = 0; m < M; ++m) {
            for (int n = 0; n < N; ++n) {
              const size_t i = size_t(m) * N + n;
              double ref = double(acc[i]) * double(sx * ws[n]) + bias[n];
              if (e == Epilogue::kGelu) ref = 0.5 * ref * (1 + std::erf(ref / std::sqrt(2.0)));
              if (e == Epilogue::kTanh) ref = std::tanh(ref);
              if (mode == 1) ref += res[i];
              if (mode == 2) {
                const double q = std::max(-127.0, std::min(127.0, std::nearbyint(ref / out_scale)));
                ASSERT_LE(std::fabs(double(yq[i]) - q), 1.0) << "m=" << m << " n=" << n;
              } else {
                ASSERT_NEAR(y[i], ref, 2e-6 * (1 + std::fabs(ref))) << "m=" << m << " n=" << n;
              }
            }
          }
          if (mode == 2) {
            for (size_t i = size_t(M) * N; i < yq.size(); ++i) ASSERT_EQ(int(yq[i]), 99) << i;
          }
        }
      }
    }
  }
}

// Real-valued data quantised as the engine does: within the derived quantisation bound of the
// fp32 product (as GemmS8Test.MatchesFp32WithinTheQuantisationBound, here with 8-bit weights
// and odd shapes).
TEST(GemmS8VnniTest, MatchesFp32WithinTheQuantisationBound) {
  for (int tactic : RunnableOrSay("MatchesFp32WithinTheQuantisationBound")) {
    SCOPED_TRACE(Gemm::TacticName(tactic));
    std::mt19937 rng(31);
    std::uniform_real_distribution<float> ux(-2.f, 2.f), uw(-0.3f, 0.3f);
    for (const auto& [M, K, N] :
         std::vector<std::tuple<int, int, int>>{{1, 70, 19}, {13, 200, 90}}) {
      std::vector<float> x(size_t(M) * K), w(size_t(K) * N), ws(N, 0.f);
      for (auto& v : x) v = ux(rng);
      for (auto& v : w) v = uw(rng);
      float amax = 0;
      for (float v : x) amax = std::max(amax, std::fabs(v));
      const float sx = amax / 127.f;
      std::vector<int8_t> xq(x.size()), wq(w.size());
      QuantizeS8(x.data(), int64_t(x.size()), 1.f / sx, xq.data());
      for (int k = 0; k < K; ++k) {
        for (int n = 0; n < N; ++n) ws[n] = std::max(ws[n], std::fabs(w[size_t(k) * N + n]));
      }
      for (float& s : ws) s /= 127.f;
      for (int k = 0; k < K; ++k) {
        for (int n = 0; n < N; ++n) {
          wq[size_t(k) * N + n] = int8_t(std::nearbyint(w[size_t(k) * N + n] / ws[n]));
        }
      }
      GemmS8 g(wq.data(), K, N, ws.data(), sx, nullptr, Epilogue::kNone, 0.f, tactic);
      std::vector<float> y(size_t(M) * N);
      g.Run(xq.data(), M, y.data());
      for (int m = 0; m < M; ++m) {
        for (int n = 0; n < N; ++n) {
          double ref = 0, bound = 0;
          for (int k = 0; k < K; ++k) {
            const double xv = x[size_t(m) * K + k], wv = w[size_t(k) * N + n];
            ref += xv * wv;
            bound += std::fabs(xv) * ws[n] / 2 + sx / 2 * std::fabs(wv) + sx * ws[n] / 4;
          }
          ASSERT_LE(std::fabs(y[size_t(m) * N + n] - ref), bound + 1e-4 * (1 + std::fabs(ref)))
              << "m=" << m << " n=" << n;
        }
      }
    }
  }
}

// The job split (row chunks x panel chunks) depends on the thread count and on the size: every
// split must give the same bits, since each output is one exact integer product scaled once.
// (Small GEMMs run on one thread anyway: ParallelWorth, cpu_isa.h.)
TEST(GemmS8VnniTest, SameResultOnOneAndTwoThreads) {
  const int saved = omp_get_max_threads();
  for (int tactic : RunnableOrSay("SameResultOnOneAndTwoThreads")) {
    SCOPED_TRACE(Gemm::TacticName(tactic));
    std::mt19937 rng(41);
    for (const auto& [M, K, N] : std::vector<std::tuple<int, int, int>>{
             {32, 256, 768}, {130, 64, 1030}, {200, 1024, 256}, {3, 512, 4096},
             {520, 1024, 1024}}) {  // the last is parallel even under OMP_WAIT_POLICY=passive
      const auto x = RandomS8(size_t(M) * K, 127, &rng);
      const auto w = RandomS8(size_t(K) * N, 127, &rng);
      std::vector<float> ws(N, 0.001f), b(N, 0.25f);
      GemmS8 g(w.data(), K, N, ws.data(), 0.01f, b.data(), Epilogue::kGelu, 0.f, tactic);
      std::vector<float> y1(size_t(M) * N), y2(size_t(M) * N);
      omp_set_num_threads(1);
      g.Run(x.data(), M, y1.data());
      omp_set_num_threads(2);
      g.Run(x.data(), M, y2.data());
      ASSERT_EQ(y1, y2) << M << "x" << K << "x" << N;
    }
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace hotline::engine::cpu
