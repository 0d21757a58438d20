// Gemm against a naive double-precision reference, for every tactic this CPU offers and every
// ISA table it can run (the packed tactics go through the table; oneDNN ignores it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "engine/cpu/kernels.h"
#include "test_util.h"

namespace hotline::engine::cpu {
namespace {

using testing::NearNormalised;
using testing::RandomVec;

struct Shape {
  int M, K, N;
};

std::vector<double> GemmRef(const std::vector<float>& x, const std::vector<float>& w,
                            const std::vector<float>* bias, Epilogue e,
                            const std::vector<float>* res, int M, int K, int N) {
  std::vector<double> y(static_cast<size_t>(M) * N);
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      double s = bias != nullptr ? (*bias)[n] : 0.0;
      for (int k = 0; k < K; ++k) {
        s += static_cast<double>(x[static_cast<size_t>(m) * K + k]) * w[static_cast<size_t>(k) * N + n];
      }
      if (e == Epilogue::kGelu) s = testing::GeluRef(s);
      if (e == Epilogue::kTanh) s = std::tanh(s);
      if (res != nullptr) s += (*res)[static_cast<size_t>(m) * N + n];
      y[static_cast<size_t>(m) * N + n] = s;
    }
  }
  return y;
}

const char* EpiName(Epilogue e) {
  return e == Epilogue::kGelu ? "gelu" : e == Epilogue::kTanh ? "tanh" : "none";
}

class GemmTest : public ::testing::TestWithParam<Isa> {};

// Runs one configuration and compares; residual in place (y aliases residual) when `inplace`.
void RunOne(int tactic, GemmPrecision prec, const Shape& s, Epilogue e, bool with_bias,
            bool with_res, bool inplace, std::mt19937& rng) {
  const double tol = prec == GemmPrecision::kFP32 ? 1e-5 : 4e-2;
  const float ws = 1.0f / std::sqrt(static_cast<float>(s.K));
  auto x = RandomVec(static_cast<size_t>(s.M) * s.K, rng);
  auto w = RandomVec(static_cast<size_t>(s.K) * s.N, rng, -ws, ws);
  auto bias = RandomVec(s.N, rng);
  auto res = RandomVec(static_cast<size_t>(s.M) * s.N, rng);
  const auto ref = GemmRef(x, w, with_bias ? &bias : nullptr, e, with_res ? &res : nullptr, s.M,
                           s.K, s.N);
  Gemm g(w.data(), s.K, s.N, with_bias ? bias.data() : nullptr, e, prec, tactic);
  ASSERT_EQ(g.tactic(), tactic);
  ASSERT_EQ(g.K(), s.K);
  ASSERT_EQ(g.N(), s.N);
  // The Gemm must hold its own copies: clobber the caller's buffers.
  std::fill(w.begin(), w.end(), 0.0f);
  std::fill(bias.begin(), bias.end(), 1e6f);
  std::vector<float> y;
  if (inplace && with_res) {
    y = res;
    g.Run(x.data(), s.M, y.data(), y.data());
  } else {
    y.assign(static_cast<size_t>(s.M) * s.N, 12345.0f);
    g.Run(x.data(), s.M, y.data(), with_res ? res.data() : nullptr);
  }
  const std::string what = std::string(Gemm::TacticName(tactic)) + " M=" + std::to_string(s.M) +
                           " K=" + std::to_string(s.K) + " N=" + std::to_string(s.N) + " " +
                           EpiName(e) + (with_bias ? " bias" : "") +
                           (with_res ? (inplace ? " residual(in place)" : " residual") : "");
  EXPECT_TRUE(NearNormalised(y, ref, tol, what));
}

const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> shapes = {
      {1, 64, 64},   {1, 17, 33},   {2, 256, 768}, {7, 256, 256}, {13, 100, 47},
      {16, 256, 512}, {8, 1024, 128}, {3, 1, 5},  {100, 65, 50}, {6, 31, 16},
      {9, 48, 96},
  };
  return shapes;
}

void Sweep(GemmPrecision prec, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int tactic : Gemm::Tactics(prec)) {
    for (const Shape& s : Shapes()) {
      for (Epilogue e : {Epilogue::kNone, Epilogue::kGelu, Epilogue::kTanh}) {
        RunOne(tactic, prec, s, e, /*bias=*/true, /*res=*/false, false, rng);
      }
      RunOne(tactic, prec, s, Epilogue::kNone, false, false, false, rng);
      RunOne(tactic, prec, s, Epilogue::kGelu, true, true, false, rng);
      RunOne(tactic, prec, s, Epilogue::kNone, true, true, true, rng);
      RunOne(tactic, prec, s, Epilogue::kTanh, false, true, true, rng);
    }
  }
}

TEST_P(GemmTest, Fp32MatchesReference) {
  testing::ScopedIsa isa(GetParam());
  Sweep(GemmPrecision::kFP32, 101);
}

TEST_P(GemmTest, Bf16MatchesReference) {
  testing::ScopedIsa isa(GetParam());
  Sweep(GemmPrecision::kBF16, 202);
}

// Every M from 1 to 40 exercises each remainder of the row micro-tiles.
TEST_P(GemmTest, EveryRowCount) {
  testing::ScopedIsa isa(GetParam());
  std::mt19937 rng(303);
  for (GemmPrecision prec : {GemmPrecision::kFP32, GemmPrecision::kBF16}) {
    for (int tactic : Gemm::Tactics(prec)) {
      for (int M = 1; M <= 40; ++M) {
        RunOne(tactic, prec, {M, 40, 72}, Epilogue::kGelu, true, M % 2 == 0, M % 4 == 0, rng);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, GemmTest, ::testing::ValuesIn(testing::SupportedIsas()),
                         testing::IsaParamName);

// Run is const and documented thread-safe for different outputs: two threads, same Gemm.
TEST(GemmThreads, ConcurrentRunsAgree) {
  std::mt19937 rng(404);
  const int M = 24, K = 128, N = 96;
  for (GemmPrecision prec : {GemmPrecision::kFP32, GemmPrecision::kBF16}) {
    for (int tactic : Gemm::Tactics(prec)) {
      auto w = RandomVec(static_cast<size_t>(K) * N, rng, -0.1f, 0.1f);
      auto b = RandomVec(N, rng);
      Gemm g(w.data(), K, N, b.data(), Epilogue::kGelu, prec, tactic);
      std::vector<std::vector<float>> xs, ys(4);
      for (int i = 0; i < 4; ++i) xs.push_back(RandomVec(static_cast<size_t>(M) * K, rng));
      std::vector<std::vector<float>> serial(4);
      for (int i = 0; i < 4; ++i) {
        serial[i].resize(static_cast<size_t>(M) * N);
        g.Run(xs[i].data(), M, serial[i].data());
      }
      std::vector<std::thread> threads;
      for (int i = 0; i < 4; ++i) {
        threads.emplace_back([&, i] {
          ys[i].resize(static_cast<size_t>(M) * N);
          for (int rep = 0; rep < 20; ++rep) g.Run(xs[i].data(), M, ys[i].data());
        });
      }
      for (auto& t : threads) t.join();
      for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(ys[i], serial[i]) << Gemm::TacticName(tactic) << " thread " << i;
      }
    }
  }
}

TEST(GemmErrors, BadArgumentsThrow) {
  std::vector<float> w(16, 0.5f);
  EXPECT_THROW(Gemm(w.data(), 0, 4, nullptr, Epilogue::kNone, GemmPrecision::kFP32), Error);
  EXPECT_THROW(Gemm(w.data(), 4, -1, nullptr, Epilogue::kNone, GemmPrecision::kFP32), Error);
  EXPECT_THROW(Gemm(nullptr, 4, 4, nullptr, Epilogue::kNone, GemmPrecision::kFP32), Error);
  // A tactic of the other precision, or an unknown one, is refused with the available list.
  try {
    Gemm g(w.data(), 4, 4, nullptr, Epilogue::kNone, GemmPrecision::kFP32, 4);
    ADD_FAILURE() << "fp32 accepted the bf16 tactic";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("available"), std::string::npos) << e.what();
    EXPECT_EQ(e.code(), Code::kFailedPrecondition);
  }
  EXPECT_THROW(Gemm(w.data(), 4, 4, nullptr, Epilogue::kNone, GemmPrecision::kBF16, 99), Error);
  Gemm g(w.data(), 4, 4, nullptr, Epilogue::kNone, GemmPrecision::kFP32);
  std::vector<float> x(8, 1.0f), y(8, 0.0f);
  EXPECT_THROW(g.Run(x.data(), -1, y.data()), Error);
  EXPECT_NO_THROW(g.Run(x.data(), 0, y.data()));
  EXPECT_THROW(g.Run(nullptr, 2, y.data()), Error);
}

TEST(GemmTactics, ListedAndNamed) {
  for (GemmPrecision prec : {GemmPrecision::kFP32, GemmPrecision::kBF16}) {
    const auto t = Gemm::Tactics(prec);
    ASSERT_FALSE(t.empty());
    for (int id : t) {
      EXPECT_GT(id, 0);
      EXPECT_STRNE(Gemm::TacticName(id), "unknown");
    }
  }
  EXPECT_STREQ(Gemm::TacticName(12345), "unknown");
  // Auto resolves to a listed tactic.
  std::vector<float> w(64, 0.25f);
  for (GemmPrecision prec : {GemmPrecision::kFP32, GemmPrecision::kBF16}) {
    Gemm g(w.data(), 8, 8, nullptr, Epilogue::kNone, prec, 0);
    const auto t = Gemm::Tactics(prec);
    EXPECT_NE(std::find(t.begin(), t.end(), g.tactic()), t.end());
  }
}

}  // namespace
}  // namespace hotline::engine::cpu
