// The AMX-BF16 GEMM (Gemm tactic 9, packed_amx_bf16; engine/cpu/gemm_bf16_amx.cc). It is offered
// exactly where the kernel's /proc/cpuinfo says AMX-TILE, AMX-BF16 and AVX512-BF16 (not checked
// against our own cpuid code). Then, against double-precision references computed here:
//   - tight: the reference from the bf16-rounded operands (rounded here, bit by bit, round to
//     nearest even): only fp32 accumulation error is allowed;
//   - loose: the reference from the fp32 operands, within the bf16 rounding bound;
// over odd shapes (M = 1..130, K and N not multiples of 32 / 16), every epilogue (bias, GELU,
// tanh, residual, residual in place), and the same bits on 1 and 2 threads.
// On a CPU without AMX-BF16 the test prints a NOTE and checks only that the tactic is refused.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/cpu/kernels.h"
#include "test_util.h"

namespace hotline::engine::cpu {
namespace {

constexpr int kAmxBf16 = 9;

bool ProcSaysAmxBf16() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream ss(line.substr(line.find(':') + 1));
    std::vector<std::string> flags;
    for (std::string w; ss >> w;) flags.push_back(w);
    auto has = [&](const char* x) {
      return std::find(flags.begin(), flags.end(), x) != flags.end();
    };
    return has("amx_tile") && has("amx_bf16") && has("avx512_bf16") && has("avx512f");
  }
  ADD_FAILURE() << "/proc/cpuinfo has no flags line";
  return false;
}

bool Offered() {
  const auto t = Gemm::Tactics(GemmPrecision::kBF16);
  return std::find(t.begin(), t.end(), kAmxBf16) != t.end();
}

// Round to nearest even bf16, returned as the float it represents (finite inputs).
float RoundBf16(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

struct Case {
  int M, K, N;
  Epilogue e;
  bool bias, res, inplace;
};

std::string Describe(const Case& c) {
  return "M=" + std::to_string(c.M) + " K=" + std::to_string(c.K) + " N=" + std::to_string(c.N) +
         (c.e == Epilogue::kGelu ? " gelu" : c.e == Epilogue::kTanh ? " tanh" : "") +
         (c.bias ? " bias" : "") + (c.res ? (c.inplace ? " residual(in place)" : " residual") : "");
}

// Runs one case and checks every element against both references. Returns the output.
std::vector<float> CheckCase(const Case& c, std::mt19937& rng) {
  const float ws = 1.0f / std::sqrt(float(c.K));
  auto x = testing::RandomVec(size_t(c.M) * c.K, rng, -2.0f, 2.0f);
  auto w = testing::RandomVec(size_t(c.K) * c.N, rng, -ws, ws);
  auto bias = testing::RandomVec(c.N, rng);
  auto res = testing::RandomVec(size_t(c.M) * c.N, rng);
  Gemm g(w.data(), c.K, c.N, c.bias ? bias.data() : nullptr, c.e, GemmPrecision::kBF16, kAmxBf16);
  EXPECT_EQ(g.tactic(), kAmxBf16);
  std::vector<float> y(size_t(c.M) * c.N, 12345.0f);
  if (c.res && c.inplace) {
    y = res;
    g.Run(x.data(), c.M, y.data(), y.data());
  } else {
    g.Run(x.data(), c.M, y.data(), c.res ? res.data() : nullptr);
  }
  int bad_tight = 0, bad_loose = 0;
  for (int m = 0; m < c.M; ++m) {
    for (int n = 0; n < c.N; ++n) {
      double s16 = 0, s32 = 0, mag16 = 0, mag32 = 0;
      for (int k = 0; k < c.K; ++k) {
        const float xv = x[size_t(m) * c.K + k], wv = w[size_t(k) * c.N + n];
        const double p16 = double(RoundBf16(xv)) * RoundBf16(wv), p32 = double(xv) * wv;
        s16 += p16;
        s32 += p32;
        mag16 += std::fabs(p16);
        mag32 += std::fabs(p32);
      }
      const double b = c.bias ? bias[n] : 0.0, r = c.res ? res[size_t(m) * c.N + n] : 0.0;
      auto finish = [&](double v) {
        v += b;
        if (c.e == Epilogue::kGelu) v = testing::GeluRef(v);
        if (c.e == Epilogue::kTanh) v = std::tanh(v);
        return v + r;
      };
      const double got = y[size_t(m) * c.N + n];
      // GELU' and tanh' are at most ~1.13 and 1: an input error e moves the output by <= 1.13 e.
      // Tight: fp32 accumulation (1e-5 of the magnitude sum, far below the 2^-7 relative
      // error of bf16-rounded operands that it must exclude) plus the fp32 epilogue's own
      // error (erf / exp approximations, ~1e-6).
      const double tight = 1.2 * 1e-5 * (mag16 + std::fabs(b)) + 2e-6 * (1 + std::fabs(r));
      // Loose: both operands rounded to bf16 (unit roundoff 2^-8), each product off by
      // <= 2 * 2^-8 relative.
      const double loose =
          1.2 * (2.0 * std::ldexp(1.0, -8) * mag32 + 1e-5 * (mag32 + std::fabs(b))) +
          2e-6 * (1 + std::fabs(r));
      if (!(std::fabs(got - finish(s16)) <= tight) && bad_tight++ < 3) {
        ADD_FAILURE() << Describe(c) << " [" << m << "," << n << "] got " << got
                      << ", bf16-operand reference " << finish(s16) << ", bound " << tight;
      }
      if (!(std::fabs(got - finish(s32)) <= loose) && bad_loose++ < 3) {
        ADD_FAILURE() << Describe(c) << " [" << m << "," << n << "] got " << got
                      << ", fp32-operand reference " << finish(s32) << ", bf16 bound " << loose;
      }
    }
  }
  return y;
}

TEST(GemmAmxBf16, OfferedExactlyWhereTheCpuHasIt) {
  const bool proc = ProcSaysAmxBf16();
  EXPECT_EQ(Offered(), proc) << "/proc/cpuinfo says AMX-BF16 " << (proc ? "yes" : "no");
  EXPECT_STREQ(Gemm::TacticName(kAmxBf16), "packed_amx_bf16");
  const auto f32 = Gemm::Tactics(GemmPrecision::kFP32);
  EXPECT_EQ(std::find(f32.begin(), f32.end(), kAmxBf16), f32.end()) << "offered for fp32";
  std::vector<float> w(64, 0.5f);
  try {
    Gemm g(w.data(), 8, 8, nullptr, Epilogue::kNone, GemmPrecision::kFP32, kAmxBf16);
    ADD_FAILURE() << "fp32 accepted packed_amx_bf16";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kFailedPrecondition);
  }
  if (!proc) {
    std::printf("NOTE: this CPU has no AMX-BF16: packed_amx_bf16 tested only for its refusal\n");
    try {
      Gemm g(w.data(), 8, 8, nullptr, Epilogue::kNone, GemmPrecision::kBF16, kAmxBf16);
      ADD_FAILURE() << "packed_amx_bf16 constructed on a CPU without AMX-BF16";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kFailedPrecondition);
    }
  }
}

TEST(GemmAmxBf16, EveryRowCountOddKN) {
  if (!Offered()) {
    std::printf("NOTE: no AMX-BF16 on this CPU: kernel not run\n");
    return;
  }
  std::mt19937 rng(7);
  for (int M = 1; M <= 130; ++M) {
    CheckCase({M, 45, 37, Epilogue::kNone, true, false, false}, rng);
  }
}

TEST(GemmAmxBf16, ShapesAndEpilogues) {
  if (!Offered()) {
    std::printf("NOTE: no AMX-BF16 on this CPU: kernel not run\n");
    return;
  }
  std::mt19937 rng(11);
  const int shapes[][3] = {{1, 256, 768}, {17, 1000, 50}, {32, 256, 41}, {33, 31, 16},
                           {64, 32, 16},  {130, 97, 200}, {5, 1, 3},     {48, 1024, 256}};
  for (const auto& s : shapes) {
    for (Epilogue e : {Epilogue::kNone, Epilogue::kGelu, Epilogue::kTanh}) {
      CheckCase({s[0], s[1], s[2], e, true, false, false}, rng);
    }
    CheckCase({s[0], s[1], s[2], Epilogue::kNone, false, false, false}, rng);
    CheckCase({s[0], s[1], s[2], Epilogue::kGelu, true, true, false}, rng);
    CheckCase({s[0], s[1], s[2], Epilogue::kNone, true, true, true}, rng);
    CheckCase({s[0], s[1], s[2], Epilogue::kTanh, false, true, true}, rng);
  }
}

TEST(GemmAmxBf16, OneAndTwoThreadsSameBits) {
  if (!Offered()) {
    std::printf("NOTE: no AMX-BF16 on this CPU: kernel not run\n");
    return;
  }
  // Large enough to be split across threads even when OpenMP threads sleep (ParallelWorth).
  const int M = 300, K = 512, N = 520;
  std::mt19937 rng(3);
  auto x = testing::RandomVec(size_t(M) * K, rng);
  auto w = testing::RandomVec(size_t(K) * N, rng, -0.05f, 0.05f);
  auto bias = testing::RandomVec(N, rng);
  auto res = testing::RandomVec(size_t(M) * N, rng);
  Gemm g(w.data(), K, N, bias.data(), Epilogue::kGelu, GemmPrecision::kBF16, kAmxBf16);
  const int saved = omp_get_max_threads();
  std::vector<float> y1(size_t(M) * N), y2(size_t(M) * N);
  omp_set_num_threads(1);
  g.Run(x.data(), M, y1.data(), res.data());
  omp_set_num_threads(2);
  g.Run(x.data(), M, y2.data(), res.data());
  omp_set_num_threads(saved);
  EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)), 0)
      << "1 and 2 threads differ";
  // And the result is right (not merely equal): spot-check a row against the fp32 operands.
  for (int n = 0; n < N; ++n) {
    double s = bias[n], mag = 0;
    for (int k = 0; k < K; ++k) {
      s += double(x[size_t(7) * K + k]) * w[size_t(k) * N + n];
      mag += std::fabs(double(x[size_t(7) * K + k]) * w[size_t(k) * N + n]);
    }
    const double ref = testing::GeluRef(s) + res[size_t(7) * N + n];
    EXPECT_NEAR(y1[size_t(7) * N + n], ref, 1.2 * (2 * std::ldexp(1.0, -8) + 1e-5) * mag + 1e-5);
  }
}

}  // namespace
}  // namespace hotline::engine::cpu
