// LayerNorm, EmbeddingLayerNorm, packed Attention, GELU and CPU feature detection against
// independent references (double precision; /proc/cpuinfo for the features).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/cpu/kernels.h"
#include "test_util.h"

namespace hotline::engine::cpu {
namespace {

using testing::NearNormalised;
using testing::RandomVec;

std::vector<double> LayerNormRef(const std::vector<float>& x, const std::vector<float>* r,
                                 const std::vector<float>& g, const std::vector<float>& b,
                                 double eps, int rows, int h) {
  std::vector<double> y(static_cast<size_t>(rows) * h);
  for (int i = 0; i < rows; ++i) {
    std::vector<double> v(h);
    double mean = 0;
    for (int j = 0; j < h; ++j) {
      v[j] = x[static_cast<size_t>(i) * h + j] + (r ? (*r)[static_cast<size_t>(i) * h + j] : 0.0);
      mean += v[j];
    }
    mean /= h;
    double var = 0;
    for (int j = 0; j < h; ++j) var += (v[j] - mean) * (v[j] - mean);
    var /= h;
    for (int j = 0; j < h; ++j) {
      y[static_cast<size_t>(i) * h + j] = (v[j] - mean) / std::sqrt(var + eps) * g[j] + b[j];
    }
  }
  return y;
}

class FusedTest : public ::testing::TestWithParam<Isa> {};

TEST_P(FusedTest, LayerNormMatchesReference) {
  testing::ScopedIsa isa(GetParam());
  std::mt19937 rng(11);
  for (int h : {1, 7, 37, 256, 768}) {
    for (int rows : {1, 3, 64, 200}) {
      for (int mode = 0; mode < 4; ++mode) {  // 0 plain, 1 residual, 2 in place, 3 y aliases r
        auto x = RandomVec(static_cast<size_t>(rows) * h, rng, -3.0f, 5.0f);
        auto r = RandomVec(static_cast<size_t>(rows) * h, rng);
        auto g = RandomVec(h, rng, 0.5f, 1.5f);
        auto b = RandomVec(h, rng);
        const bool with_r = mode != 0 && mode != 2;
        const auto ref = LayerNormRef(x, with_r ? &r : nullptr, g, b, 1e-12, rows, h);
        std::vector<float> y(x.size(), -7.0f);
        if (mode == 2) {
          y = x;
          LayerNorm(y.data(), nullptr, g.data(), b.data(), 1e-12f, rows, h, y.data());
        } else if (mode == 3) {
          y = r;
          LayerNorm(x.data(), y.data(), g.data(), b.data(), 1e-12f, rows, h, y.data());
        } else {
          LayerNorm(x.data(), with_r ? r.data() : nullptr, g.data(), b.data(), 1e-12f, rows, h,
                    y.data());
        }
        EXPECT_TRUE(NearNormalised(y, ref, 1e-5,
                                   "LayerNorm h=" + std::to_string(h) + " rows=" +
                                       std::to_string(rows) + " mode=" + std::to_string(mode)));
      }
    }
  }
  // A constant row has zero variance: output is beta (eps keeps it finite).
  std::vector<float> x(64, 3.0f), g(64, 2.0f), b(64, 0.25f), y(64);
  LayerNorm(x.data(), nullptr, g.data(), b.data(), 1e-5f, 1, 64, y.data());
  for (int j = 0; j < 64; ++j) EXPECT_FLOAT_EQ(y[j], 0.25f) << "index " << j;
}

TEST_P(FusedTest, EmbeddingLayerNormRestartsPositionsPerSequence) {
  testing::ScopedIsa isa(GetParam());
  std::mt19937 rng(12);
  const int vocab = 97, max_pos = 40, type_vocab = 2;
  for (int h : {32, 48, 768, 21}) {
    for (const std::vector<int>& lens : std::vector<std::vector<int>>{
             {1}, {40}, {5, 1, 40, 17}, {3, 3, 3, 3, 3, 3, 3, 3}, {0, 7, 0}}) {
      std::vector<int32_t> cu = {0};
      for (int l : lens) cu.push_back(cu.back() + l);
      const int T = cu.back(), batch = static_cast<int>(lens.size());
      std::uniform_int_distribution<int> id(0, vocab - 1), tt(0, type_vocab - 1);
      std::vector<int32_t> ids(T), types(T);
      for (int t = 0; t < T; ++t) {
        ids[t] = id(rng);
        types[t] = tt(rng);
      }
      auto word = RandomVec(static_cast<size_t>(vocab) * h, rng);
      auto pos = RandomVec(static_cast<size_t>(max_pos) * h, rng);
      auto type = RandomVec(static_cast<size_t>(type_vocab) * h, rng);
      auto g = RandomVec(h, rng, 0.5f, 1.5f);
      auto b = RandomVec(h, rng);
      for (bool with_types : {true, false}) {
        std::vector<float> sum(static_cast<size_t>(T) * h);
        for (int s = 0; s < batch; ++s) {
          for (int t = cu[s]; t < cu[s + 1]; ++t) {
            const int p = t - cu[s], ty = with_types ? types[t] : 0;
            for (int j = 0; j < h; ++j) {
              sum[static_cast<size_t>(t) * h + j] =
                  word[static_cast<size_t>(ids[t]) * h + j] +
                  pos[static_cast<size_t>(p) * h + j] + type[static_cast<size_t>(ty) * h + j];
            }
          }
        }
        const auto ref = LayerNormRef(sum, nullptr, g, b, 1e-12, T, h);
        std::vector<float> y(static_cast<size_t>(T) * h, -9.0f);
        EmbeddingLayerNorm(ids.data(), with_types ? types.data() : nullptr, cu.data(), batch,
                           word.data(), vocab, pos.data(), max_pos, type.data(), type_vocab,
                           g.data(), b.data(), 1e-12f, h, y.data());
        EXPECT_TRUE(NearNormalised(y, ref, 1e-5,
                                   "EmbeddingLayerNorm h=" + std::to_string(h) + " T=" +
                                       std::to_string(T) + (with_types ? " types" : "")));
      }
    }
  }
}

TEST(FusedErrors, EmbeddingRejectsBadInput) {
  const int h = 8, vocab = 10, max_pos = 4;
  std::vector<float> word(vocab * h, 0.1f), pos(max_pos * h, 0.2f), type(2 * h, 0.3f),
      g(h, 1.0f), b(h, 0.0f), y(64 * h);
  std::vector<int32_t> ids = {1, 2, 3, 10}, cu = {0, 4}, types = {0, 1, 2, 0};
  try {
    EmbeddingLayerNorm(ids.data(), nullptr, cu.data(), 1, word.data(), vocab, pos.data(),
                       max_pos, type.data(), 2, g.data(), b.data(), 1e-5f, h, y.data());
    ADD_FAILURE() << "out-of-vocabulary id accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 10"), std::string::npos) << e.what();
  }
  ids[3] = 4;
  EXPECT_THROW(EmbeddingLayerNorm(ids.data(), types.data(), cu.data(), 1, word.data(), vocab,
                                  pos.data(), max_pos, type.data(), 2, g.data(), b.data(), 1e-5f,
                                  h, y.data()),
               Error);  // token type 2 of 2
  std::vector<int32_t> long_cu = {0, 5}, long_ids = {1, 1, 1, 1, 1};
  EXPECT_THROW(EmbeddingLayerNorm(long_ids.data(), nullptr, long_cu.data(), 1, word.data(),
                                  vocab, pos.data(), max_pos, type.data(), 2, g.data(), b.data(),
                                  1e-5f, h, y.data()),
               Error);  // 5 tokens, 4 positions
  std::vector<int32_t> bad_cu = {0, 3, 2};
  EXPECT_THROW(EmbeddingLayerNorm(ids.data(), nullptr, bad_cu.data(), 2, word.data(), vocab,
                                  pos.data(), max_pos, type.data(), 2, g.data(), b.data(), 1e-5f,
                                  h, y.data()),
               Error);
  EXPECT_THROW(LayerNorm(y.data(), nullptr, g.data(), b.data(), 1e-5f, 2, 0, y.data()), Error);
}

// ctx for every sequence, head and query in double, softmax with the max subtracted.
std::vector<double> AttentionRef(const std::vector<float>& qkv, const std::vector<int32_t>& cu,
                                 int heads, int d, double scale) {
  const int hidden = heads * d, ld = 3 * hidden, T = cu.back();
  std::vector<double> ctx(static_cast<size_t>(T) * hidden);
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    for (int h = 0; h < heads; ++h) {
      for (int i = cu[s]; i < cu[s + 1]; ++i) {
        std::vector<double> p;
        double mx = -1e300;
        for (int j = cu[s]; j < cu[s + 1]; ++j) {
          double dot = 0;
          for (int c = 0; c < d; ++c) {
            dot += static_cast<double>(qkv[static_cast<size_t>(i) * ld + h * d + c]) *
                   qkv[static_cast<size_t>(j) * ld + hidden + h * d + c];
          }
          p.push_back(dot * scale);
          mx = std::max(mx, p.back());
        }
        double sum = 0;
        for (double& v : p) sum += (v = std::exp(v - mx));
        for (int c = 0; c < d; ++c) {
          double o = 0;
          for (int j = cu[s]; j < cu[s + 1]; ++j) {
            o += p[j - cu[s]] * qkv[static_cast<size_t>(j) * ld + 2 * hidden + h * d + c];
          }
          ctx[static_cast<size_t>(i) * hidden + h * d + c] = o / sum;
        }
      }
    }
  }
  return ctx;
}

TEST_P(FusedTest, AttentionStaysWithinEachSequence) {
  testing::ScopedIsa isa(GetParam());
  std::mt19937 rng(13);
  struct Case {
    int heads, d;
    std::vector<int> lens;
    float amp;  // input amplitude: large values stress the softmax's stability
  };
  const std::vector<Case> cases = {
      {4, 64, {1}, 1.0f},
      {4, 64, {32}, 1.0f},
      {4, 64, {1, 5, 32, 17, 64, 3}, 1.0f},
      {12, 64, {7, 0, 13}, 1.0f},
      {3, 20, {9, 1, 2}, 1.0f},
      {2, 5, {4, 11}, 1.0f},
      {1, 16, {33, 1, 128}, 1.0f},
      {2, 300, {5, 19}, 1.0f},  // head_dim past the transposed-key path
      {4, 64, {31, 16}, 0.0f},  // integer q, k: exact scores in the hundreds (see below)
  };
  for (const Case& c : cases) {
    std::vector<int32_t> cu = {0};
    for (int l : c.lens) cu.push_back(cu.back() + l);
    const int T = cu.back(), hidden = c.heads * c.d, batch = static_cast<int>(c.lens.size());
    const int max_len = *std::max_element(c.lens.begin(), c.lens.end());
    auto qkv = RandomVec(static_cast<size_t>(T) * 3 * hidden, rng, -c.amp, c.amp);
    float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
    if (c.amp == 0.0f) {
      // Stability: integer q and k in [-8, 8] make every score an exact integer of up to
      // several hundred (exp overflows fp32 past 88), so any error comes from the softmax.
      std::uniform_int_distribution<int> di(-8, 8);
      for (int t = 0; t < T; ++t) {
        for (int j = 0; j < 2 * hidden; ++j) qkv[static_cast<size_t>(t) * 3 * hidden + j] = di(rng);
        for (int j = 2 * hidden; j < 3 * hidden; ++j) {
          qkv[static_cast<size_t>(t) * 3 * hidden + j] = std::uniform_real_distribution<float>(-1, 1)(rng);
        }
      }
      scale = 0.5f;
    }
    const auto ref = AttentionRef(qkv, cu, c.heads, c.d, scale);
    std::vector<float> ctx(static_cast<size_t>(T) * hidden, -5.0f);
    std::vector<float> scratch(AttentionScratchFloats(max_len, omp_get_max_threads()));
    Attention(qkv.data(), cu.data(), batch, c.heads, c.d, scale, ctx.data(), scratch.data());
    std::string lens;
    for (int l : c.lens) lens += std::to_string(l) + ",";
    EXPECT_TRUE(NearNormalised(ctx, ref, 1e-5,
                               "Attention heads=" + std::to_string(c.heads) + " d=" +
                                   std::to_string(c.d) + " lens=" + lens));
  }
}

TEST_P(FusedTest, GeluMatchesErfReference) {
  testing::ScopedIsa isa(GetParam());
  std::mt19937 rng(14);
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{100003}}) {
    auto x = RandomVec(n, rng, -8.0f, 8.0f);
    std::vector<double> ref(n);
    for (int64_t i = 0; i < n; ++i) ref[i] = testing::GeluRef(x[i]);
    std::vector<float> y(n);
    Gelu(x.data(), n, y.data());
    EXPECT_TRUE(NearNormalised(y, ref, 1e-5, "Gelu n=" + std::to_string(n)));
    Gelu(x.data(), n, x.data());  // in place
    EXPECT_EQ(x, y);
  }
  // Per-element check near zero, where GELU is small: absolute error bound.
  std::vector<float> x = {0.0f, 1e-3f, -1e-3f, 0.5f, -0.5f, 3.0f, -3.0f, 10.0f, -10.0f};
  std::vector<float> y(x.size());
  Gelu(x.data(), static_cast<int64_t>(x.size()), y.data());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(y[i], testing::GeluRef(x[i]), 2e-6) << "x=" << x[i] << " index " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, FusedTest, ::testing::ValuesIn(testing::SupportedIsas()),
                         testing::IsaParamName);

// Independent reference: the kernel's view of the flags, as Linux reports them.
TEST(CpuFeatures, AgreeWithProcCpuinfo) {
  std::ifstream f("/proc/cpuinfo");
  if (!f) GTEST_SKIP() << "no /proc/cpuinfo on this system";
  std::string line;
  std::set<std::string> flags;
  while (std::getline(f, line)) {
    if (line.rfind("flags", 0) == 0) {
      std::istringstream ss(line.substr(line.find(':') + 1));
      std::string w;
      while (ss >> w) flags.insert(w);
      break;
    }
  }
  ASSERT_FALSE(flags.empty());
  const bool avx512 = flags.count("avx512f") && flags.count("avx512bw") &&
                      flags.count("avx512vl") && flags.count("avx512dq") && flags.count("fma");
  EXPECT_EQ(CpuHasAvx512(), avx512);
  EXPECT_EQ(CpuHasBf16(), avx512 && flags.count("avx512_bf16") > 0);
  EXPECT_EQ(CpuHasVnni(), avx512 && flags.count("avx512_vnni") > 0);
  const std::string isa = CpuIsaString();
  EXPECT_FALSE(isa.empty());
  if (CpuHasBf16()) {
    EXPECT_NE(isa.find("bf16"), std::string::npos) << isa;
  }
  if (!CpuHasAvx512()) {
    EXPECT_EQ(isa.find("avx512"), std::string::npos) << isa;
  }
  const bool avx2 = flags.count("avx2") && flags.count("fma");
  EXPECT_EQ(IsaSupported(Isa::kAvx2), avx2);
  EXPECT_THROW(SetIsaForTesting(static_cast<Isa>(99)), Error);
}

}  // namespace
}  // namespace hotline::engine::cpu
