// INT8 CPU kernels (engine/cpu/kernels.h): GemmS8 exactly on integers and against an fp32
// reference within the derived quantisation error bound; QuantizeS8; the fused LayerNorm and
// embedding kernels that write s8.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "base/error.h"
#include "engine/cpu/kernels.h"
#include "engine/int8_test_util.h"  // tests/engine/int8_test_util.h

namespace hotline::engine::cpu {
namespace {

using test::RandomS8;

std::vector<float> RandomF(size_t n, float a, std::mt19937* rng) {
  std::uniform_real_distribution<float> d(-a, a);
  std::vector<float> v(n);
  for (auto& e : v) e = d(*rng);
  return v;
}

TEST(QuantizeS8Test, RoundsHalfToEvenAndClamps) {
  const std::vector<float> x = {0.f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 1.49f, 126.6f, 300.f, -300.f,
                                -126.5f, 3.f, 7.25f, -8.75f, 64.f, 10.f, 11.f, 0.25f};
  std::vector<int8_t> y(x.size());
  QuantizeS8(x.data(), int64_t(x.size()), 1.f, y.data());  // 16 vectorised + 2 scalar tail
  for (size_t k = 0; k < x.size(); ++k) {
    const float want = std::max(-127.f, std::min(127.f, std::nearbyint(x[k])));
    EXPECT_EQ(int(y[k]), int(want)) << "x=" << x[k];
  }
  EXPECT_EQ(int(y[1]), 0);   // 0.5 -> 0 (even)
  EXPECT_EQ(int(y[3]), 2);   // 2.5 -> 2
  EXPECT_EQ(int(y[8]), 127);
  EXPECT_EQ(int(y[9]), -127);
  std::vector<int8_t> z(3);
  const float s[] = {1.f, -2.f, 3.f};
  QuantizeS8(s, 3, 10.f, z.data());
  EXPECT_EQ(std::vector<int>(z.begin(), z.end()), (std::vector<int>{10, -20, 30}));
}

// With unit scales the GEMM is an exact integer dot product (|acc| < 2^24 stays exact in fp32):
// catches int16 saturation of non-VNNI kernels at the full weight range S8WeightQmax allows.
TEST(GemmS8Test, UnitScalesGiveTheExactIntegerProduct) {
  std::mt19937 rng(7);
  const int qmax = S8WeightQmax();
  const std::vector<std::tuple<int, int, int>> shapes = {{1, 64, 16}, {37, 128, 384},
                                                         {5, 512, 25}, {6, 1023, 17}};
  for (int tactic : GemmS8::Tactics()) {
    for (const auto& [M, K, N] : shapes) {
      auto x = RandomS8(size_t(M) * K, 127, &rng);
      // Extreme codes too: every x = +-127 and w = +-qmax in the first rows.
      for (int k = 0; k < K; ++k) x[k] = (k % 3) ? 127 : -127;
      auto w = RandomS8(size_t(K) * N, qmax, &rng);
      for (int n = 0; n < N; ++n) w[n] = int8_t(qmax);
      std::vector<float> ws(N, 1.f), y(size_t(M) * N);
      GemmS8 g(w.data(), K, N, ws.data(), 1.f, nullptr, Epilogue::kNone, 0.f, tactic);
      EXPECT_EQ(g.tactic(), tactic);
      g.Run(x.data(), M, y.data());
      SCOPED_TRACE(Gemm::TacticName(tactic));
      test::ExpectExactS8Product(x, w, y, M, K, N);
    }
  }
}

// Quantised GEMM vs the fp32 product. With x = qx*sx + dx (|dx| <= sx/2) and
// W = qw*s_n + dw (|dw| <= s_n/2), |y_q - y| <= sum_k |x_k| s_n/2 + sx/2 |w_kn| + sx s_n/4
// before the epilogue; GELU is 1.13-Lipschitz and tanh 1-Lipschitz, so the bound carries over
// scaled by 1.13. A small fp32 rounding allowance is added.
TEST(GemmS8Test, MatchesFp32WithinTheQuantisationBound) {
  std::mt19937 rng(11);
  const int qmax = S8WeightQmax();
  const int M = 33, K = 96, N = 40;
  const auto x = RandomF(size_t(M) * K, 2.f, &rng);
  const auto w = RandomF(size_t(K) * N, 0.3f, &rng);
  const auto bias = RandomF(N, 0.5f, &rng);
  const auto res = RandomF(size_t(M) * N, 1.f, &rng);
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float sx = amax / 127.f;
  std::vector<int8_t> xq(x.size()), wq(w.size());
  QuantizeS8(x.data(), int64_t(x.size()), 1.f / sx, xq.data());
  std::vector<float> ws(N, 0.f);
  for (int k = 0; k < K; ++k) {
    for (int n = 0; n < N; ++n) ws[n] = std::max(ws[n], std::fabs(w[size_t(k) * N + n]));
  }
  for (float& s : ws) s /= float(qmax);
  for (int k = 0; k < K; ++k) {
    for (int n = 0; n < N; ++n) {
      wq[size_t(k) * N + n] = int8_t(std::nearbyint(w[size_t(k) * N + n] / ws[n]));
    }
  }
  for (int tactic : GemmS8::Tactics()) {
    for (Epilogue e : {Epilogue::kNone, Epilogue::kGelu, Epilogue::kTanh}) {
      for (bool with_res : {false, true}) {
        GemmS8 g(wq.data(), K, N, ws.data(), sx, bias.data(), e, 0.f, tactic);
        std::vector<float> y(size_t(M) * N);
        g.Run(xq.data(), M, y.data(), with_res ? res.data() : nullptr);
        double worst = 0;
        for (int m = 0; m < M; ++m) {
          for (int n = 0; n < N; ++n) {
            double ref = bias[n], bound = 0;
            for (int k = 0; k < K; ++k) {
              const double xv = x[size_t(m) * K + k], wv = w[size_t(k) * N + n];
              ref += xv * wv;
              bound += std::fabs(xv) * ws[n] / 2 + sx / 2 * std::fabs(wv) + sx * ws[n] / 4;
            }
            if (e == Epilogue::kGelu) ref = 0.5 * ref * (1 + std::erf(ref / std::sqrt(2.0)));
            if (e == Epilogue::kTanh) ref = std::tanh(ref);
            if (e == Epilogue::kGelu) bound *= 1.13;
            if (with_res) ref += res[size_t(m) * N + n];
            const double err = std::fabs(y[size_t(m) * N + n] - ref);
            ASSERT_LE(err, bound + 1e-4 * (1 + std::fabs(ref)))
                << "m=" << m << " n=" << n << " epilogue " << int(e) << " "
                << Gemm::TacticName(tactic);
            worst = std::max(worst, err / bound);
          }
        }
        // The bound is worst case; typical errors use a small part of it (random rounding).
        EXPECT_LT(worst, 0.8);
      }
    }
  }
}

TEST(GemmS8Test, S8OutputIsTheRequantisedFp32Output) {
  std::mt19937 rng(3);
  const int M = 17, K = 64, N = 48;
  const auto xq = RandomS8(size_t(M) * K, 127, &rng);
  const auto wq = RandomS8(size_t(K) * N, S8WeightQmax(), &rng);
  std::vector<float> ws(N), bias = RandomF(N, 0.2f, &rng);
  for (int n = 0; n < N; ++n) ws[n] = 0.001f * float(1 + n % 5);
  const float sx = 0.02f, out_scale = 0.01f;
  for (int tactic : GemmS8::Tactics()) {
    SCOPED_TRACE(Gemm::TacticName(tactic));
    GemmS8 f(wq.data(), K, N, ws.data(), sx, bias.data(), Epilogue::kGelu, 0.f, tactic);
    GemmS8 q(wq.data(), K, N, ws.data(), sx, bias.data(), Epilogue::kGelu, out_scale, tactic);
    EXPECT_TRUE(q.s8_output());
    std::vector<float> y(size_t(M) * N);
    std::vector<int8_t> yq(size_t(M) * N);
    f.Run(xq.data(), M, y.data());
    q.Run(xq.data(), M, yq.data());
    int clipped = 0;
    for (size_t e = 0; e < y.size(); ++e) {
      const float want = std::max(-127.f, std::min(127.f, std::nearbyint(y[e] / out_scale)));
      clipped += std::fabs(y[e] / out_scale) > 127;
      ASSERT_LE(std::fabs(float(yq[e]) - want), 1.f) << e;  // a tie may round either way
    }
    EXPECT_LT(clipped, int(y.size()));  // the scales keep most values inside the grid
    std::vector<float> res(size_t(M) * N);
    EXPECT_THROW(q.Run(xq.data(), M, yq.data(), res.data()), Error);
  }
}

// Every tactic computes the same function: the integer products are exact in all of them, so
// only the fp32 scaling may round differently (a few ulp), and an s8 output at most one code
// apart (a value at a rounding tie). Odd shapes: K not a multiple of 4, N not of 16, M not of 4,
// and a residual that aliases the output.
TEST(GemmS8Test, TacticsAgree) {
  const std::vector<int> tactics = GemmS8::Tactics();
  if (tactics.size() < 2) GTEST_SKIP() << "one int8 tactic on this CPU: nothing to compare";
  std::mt19937 rng(21);
  const int qmax = S8WeightQmax();
  for (const auto& [M, K, N] : std::vector<std::tuple<int, int, int>>{
           {1, 256, 768}, {3, 30, 7}, {9, 257, 33}, {70, 1024, 256}, {130, 64, 1030}}) {
    const auto xq = RandomS8(size_t(M) * K, 127, &rng);
    const auto wq = RandomS8(size_t(K) * N, qmax, &rng);
    std::vector<float> ws(N), bias = RandomF(N, 0.5f, &rng);
    for (int n = 0; n < N; ++n) ws[n] = 0.0005f * float(1 + n % 7);
    const auto res = RandomF(size_t(M) * N, 1.f, &rng);
    for (Epilogue e : {Epilogue::kNone, Epilogue::kGelu, Epilogue::kTanh}) {
      std::vector<std::vector<float>> out;
      std::vector<std::vector<int8_t>> outq;
      for (int t : tactics) {
        GemmS8 g(wq.data(), K, N, ws.data(), 0.02f, bias.data(), e, 0.f, t);
        std::vector<float> y = res;  // in place: y = act(x w + b) + y
        g.Run(xq.data(), M, y.data(), y.data());
        out.push_back(y);
        GemmS8 q(wq.data(), K, N, ws.data(), 0.02f, bias.data(), e, 0.05f, t);
        std::vector<int8_t> yq(size_t(M) * N);
        q.Run(xq.data(), M, yq.data());
        outq.push_back(yq);
      }
      for (size_t t = 1; t < tactics.size(); ++t) {
        for (size_t i = 0; i < out[0].size(); ++i) {
          ASSERT_NEAR(out[t][i], out[0][i], 1e-5 * (1 + std::fabs(out[0][i])))
              << M << "x" << K << "x" << N << " i=" << i << " " << Gemm::TacticName(tactics[t]);
          ASSERT_LE(std::abs(int(outq[t][i]) - int(outq[0][i])), 1) << i;
        }
      }
    }
  }
}

TEST(GemmS8Test, RefusesBadArgumentsAndOutOfRangeWeights) {
  std::vector<int8_t> w(16 * 8, 1);
  std::vector<float> ws(8, 1.f);
  EXPECT_THROW(GemmS8(w.data(), 0, 8, ws.data(), 1.f, nullptr, Epilogue::kNone), Error);
  EXPECT_THROW(GemmS8(w.data(), 16, 8, ws.data(), 0.f, nullptr, Epilogue::kNone), Error);
  EXPECT_THROW(GemmS8(w.data(), 16, 8, ws.data(), 1.f, nullptr, Epilogue::kNone, 0.f, 1), Error);
  if (S8WeightQmax() < 127) {
    w[5] = 127;  // beyond this CPU's 7-bit range
    EXPECT_THROW(GemmS8(w.data(), 16, 8, ws.data(), 1.f, nullptr, Epilogue::kNone), Error);
  }
  EXPECT_EQ(std::string(Gemm::TacticName(GemmS8::Tactics()[0])), "onednn_s8");
}

TEST(LayerNormS8Test, WritesTheFp32RowAndItsQuantisedCopy) {
  std::mt19937 rng(5);
  const int rows = 9, hidden = 40;
  const auto x = RandomF(size_t(rows) * hidden, 3.f, &rng);
  const auto r = RandomF(size_t(rows) * hidden, 1.f, &rng);
  const auto g = RandomF(hidden, 1.f, &rng);
  const auto b = RandomF(hidden, 0.5f, &rng);
  std::vector<float> want(x.size()), y(x.size());
  LayerNorm(x.data(), r.data(), g.data(), b.data(), 1e-12f, rows, hidden, want.data());
  std::vector<int8_t> yq(x.size()), yq2(x.size()), wantq(x.size());
  const float inv = 127.f / 2.5f;
  QuantizeS8(want.data(), int64_t(want.size()), inv, wantq.data());
  LayerNormS8(x.data(), r.data(), g.data(), b.data(), 1e-12f, rows, hidden, y.data(), yq.data(),
              inv);
  EXPECT_EQ(y, want);
  EXPECT_EQ(yq, wantq);
  LayerNormS8(x.data(), r.data(), g.data(), b.data(), 1e-12f, rows, hidden, nullptr, yq2.data(),
              inv);
  EXPECT_EQ(yq2, wantq);
}

TEST(EmbeddingLayerNormS8Test, DequantisesRowsInTheGather) {
  std::mt19937 rng(9);
  const int vocab = 30, hidden = 16, max_pos = 8;
  auto wq = RandomS8(size_t(vocab) * hidden, 127, &rng);
  std::vector<float> wscale(vocab), word(size_t(vocab) * hidden);
  for (int v = 0; v < vocab; ++v) {
    wscale[v] = 0.01f * float(v + 1);
    for (int h = 0; h < hidden; ++h) word[v * hidden + h] = float(wq[v * hidden + h]) * wscale[v];
  }
  const auto pos = RandomF(size_t(max_pos) * hidden, 0.5f, &rng);
  const auto type = RandomF(size_t(2) * hidden, 0.5f, &rng);
  const auto g = RandomF(hidden, 1.f, &rng);
  const auto b = RandomF(hidden, 0.2f, &rng);
  const std::vector<int32_t> ids = {1, 5, 29, 0, 7, 7, 3};
  const std::vector<int32_t> types = {0, 0, 1, 0, 0, 1, 1};
  const std::vector<int32_t> cu = {0, 4, 7};
  std::vector<float> want(ids.size() * hidden), got(ids.size() * hidden);
  EmbeddingLayerNorm(ids.data(), types.data(), cu.data(), 2, word.data(), vocab, pos.data(),
                     max_pos, type.data(), 2, g.data(), b.data(), 1e-12f, hidden, want.data());
  std::vector<int8_t> q(ids.size() * hidden), wantq(ids.size() * hidden);
  EmbeddingLayerNormS8(ids.data(), types.data(), cu.data(), 2, nullptr, wq.data(), wscale.data(),
                       vocab, pos.data(), max_pos, type.data(), 2, g.data(), b.data(), 1e-12f,
                       hidden, got.data(), q.data(), 20.f);
  EXPECT_EQ(got, want);
  QuantizeS8(want.data(), int64_t(want.size()), 20.f, wantq.data());
  EXPECT_EQ(q, wantq);
  const std::vector<int32_t> bad = {1, 30};
  const std::vector<int32_t> cu1 = {0, 2};
  EXPECT_THROW(EmbeddingLayerNormS8(bad.data(), nullptr, cu1.data(), 1, nullptr, wq.data(),
                                    wscale.data(), vocab, pos.data(), max_pos, type.data(), 2,
                                    g.data(), b.data(), 1e-12f, hidden, got.data(), nullptr, 1.f),
               Error);
}

}  // namespace
}  // namespace hotline::engine::cpu
