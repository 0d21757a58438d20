// INT8 calibrators, calibration tables and keep-fp resolution (engine/quant.h) against
// hand-computed histograms and thresholds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/quant.h"

namespace hotline::engine {
namespace {

AbsHistogram Hist(std::vector<double> counts, float range, float max_abs) {
  AbsHistogram h(int(counts.size()));
  h.counts = std::move(counts);
  h.range = range;
  h.max_abs = max_abs;
  return h;
}

TEST(AbsHistogramTest, BinsAbsoluteValuesAndDoublesItsRange) {
  AbsHistogram h(4);
  const std::vector<float> a = {0.5f, -1.5f, 3.9f, -4.0f};  // first batch fixes range 4 (width 1)
  h.Add(a.data(), int64_t(a.size()));
  EXPECT_FLOAT_EQ(h.range, 4.f);
  EXPECT_EQ(h.counts, (std::vector<double>{1, 1, 0, 2}));  // 4.0 == range lands in the last bin
  const std::vector<float> b = {-7.f, 0.1f};  // 7 > 4: range 8, bins (0,1)(2,3) merge
  h.Add(b.data(), int64_t(b.size()));
  EXPECT_FLOAT_EQ(h.range, 8.f);
  // old |x|: 0.5, 1.5 -> bin 0 (width 2); 3.9 -> 1; 4.0 -> merged old bin 3 -> 1; new: 7 -> 3, 0.1 -> 0
  EXPECT_EQ(h.counts, (std::vector<double>{3, 2, 0, 1}));
  EXPECT_FLOAT_EQ(h.max_abs, 7.f);
  EXPECT_DOUBLE_EQ(h.Total(), 6.0);
  const float nan = std::nanf("");
  EXPECT_THROW(h.Add(&nan, 1), Error);
}

TEST(CalibratorTest, MinMaxIsTheLargestMagnitude) {
  AbsHistogram h(16);
  const std::vector<float> v = {0.25f, -3.5f, 1.f, 2.75f};
  h.Add(v.data(), int64_t(v.size()));
  EXPECT_FLOAT_EQ(AmaxMinMax(h), 3.5f);
  EXPECT_FLOAT_EQ(ComputeAmax(h, CalibMethod::kMinMax, 0), 3.5f);
}

TEST(CalibratorTest, PercentileIsTheUpperEdgeOfTheBinReachingTheShare) {
  // 10 bins of width 1, 100 values. Cumulative: 50 70 80 90 95 98 99 99 99 100.
  const auto h = Hist({50, 20, 10, 10, 5, 3, 1, 0, 0, 1}, 10.f, 9.5f);
  EXPECT_FLOAT_EQ(AmaxPercentile(h, 50), 1.f);
  EXPECT_FLOAT_EQ(AmaxPercentile(h, 90), 4.f);   // reaches 90 at bin 3
  EXPECT_FLOAT_EQ(AmaxPercentile(h, 99), 7.f);   // reaches 99 at bin 6
  EXPECT_FLOAT_EQ(AmaxPercentile(h, 99.5), 10.f);  // only the last value completes 99.5
  EXPECT_FLOAT_EQ(AmaxPercentile(h, 100), 9.5f);   // 100: max |x|
  EXPECT_FLOAT_EQ(ComputeAmax(h, CalibMethod::kPercentile, 90), 4.f);
  EXPECT_THROW(AmaxPercentile(h, 0), Error);
  EXPECT_THROW(AmaxPercentile(h, 101), Error);
}

TEST(CalibratorTest, KLPicksTheThresholdOfLeastDivergenceOnAHandMadeHistogram) {
  // counts [8 4 0 1], width 1, 2 levels. By hand (natural log):
  //  i=2: P=[8, 4+0+1] Q=[8, 4]                 KL = 8/13 ln((8/13)/(8/12)) + 5/13 ln((5/13)/(4/12))
  //                                                = -0.049257 + 0.055039 = 0.005782
  //  i=3: P=[8,4,1]    Q=[8, 2, 2] (4 over 2)   KL = -0.049257 + 0.188647 - 0.059476 = 0.079914
  //  i=4: P=[8,4,0,1]  Q=[6,6,0,1] (12 over 2)  KL ~ 0.177035 - 0.124758 + 0 = 0.052277
  // (smoothing moves 1e-4 onto the empty bin of P and Q alike: no visible change).
  // Least: i = 2 -> amax = 2 * width.
  const auto h = Hist({8, 4, 0, 1}, 4.f, 3.2f);
  EXPECT_FLOAT_EQ(AmaxKL(h, 2), 2.f);
  // Moving the outlier's mass into bin 2 makes i = 3 exact (Q = P) while i = 2 clips it.
  const auto h2 = Hist({8, 4, 4, 0}, 4.f, 2.9f);
  //  i=2: P=[8,8] Q=[8,4] -> KL = 0.5 ln(0.5/(2/3)) + 0.5 ln(0.5/(1/3)) = 0.058892
  //  i=3: P=[8,4,4] Q=[8,4,4] -> 0
  EXPECT_FLOAT_EQ(AmaxKL(h2, 2), 3.f);
  EXPECT_THROW(AmaxKL(h, 1), Error);
  EXPECT_THROW(AmaxKL(h, 5), Error);
}

TEST(CalibratorTest, KLClipsARareOutlierThatMinMaxKeeps) {
  // 100k values spread over [0, 1), one at 100: minmax keeps 100, KL and percentile do not.
  // (KL never keeps fewer than 128 of the 2048 bins: its floor here is 128 * 100/2048 = 6.25;
  // between 128 and 256 bins the divergences differ by ~1e-4 only, so the exact pick is not
  // asserted, only that the bulk [0, 1) is kept and the outlier clipped.)
  AbsHistogram h(2048);
  std::vector<float> v;
  for (int k = 0; k < 100000; ++k) v.push_back(float(k % 1000) / 1000.f * ((k & 1) ? 1 : -1));
  v.push_back(100.f);
  h.Add(v.data(), int64_t(v.size()));
  EXPECT_FLOAT_EQ(AmaxMinMax(h), 100.f);
  const float kl = AmaxKL(h), pct = AmaxPercentile(h, 99.99);
  EXPECT_GE(kl, 128 * h.BinWidth());
  EXPECT_LE(kl, 20.f);
  EXPECT_GE(pct, 0.99f);
  EXPECT_LE(pct, 1.2f);
}

TEST(CalibMethodTest, ParsesNamesAndRefusesOthers) {
  EXPECT_EQ(ParseCalibMethod("kl"), CalibMethod::kKL);
  EXPECT_EQ(ParseCalibMethod("percentile"), CalibMethod::kPercentile);
  EXPECT_EQ(ParseCalibMethod("minmax"), CalibMethod::kMinMax);
  EXPECT_EQ(CalibMethodName(CalibMethod::kKL), "kl");
  EXPECT_THROW(ParseCalibMethod("mse"), Error);
}

std::string TempPath(const std::string& name) {
  return std::string(HOTLINE_BINARY_DIR) + "/int8_calib_test_" + name;
}

TEST(CalibrationTableTest, SavesLoadsAndRefusesForeignOrStaleCaches) {
  CalibrationTable t;
  t.method = "percentile";
  t.percentile = 99.99;
  t.model_fingerprint = "00000000000000aa";
  t.samples = 12;
  t.amax = {{"x", 1.5f}, {"y", 0.25f}};
  const std::string path = TempPath("table.json");
  t.Save(path);
  const auto back = CalibrationTable::Load(path, "00000000000000aa", CalibMethod::kPercentile,
                                           99.99);
  EXPECT_EQ(back.amax, t.amax);
  EXPECT_EQ(back.samples, 12);
  try {
    CalibrationTable::Load(path, "00000000000000bb", CalibMethod::kPercentile, 99.99);
    FAIL() << "a cache for another model was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("00000000000000aa"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("00000000000000bb"), std::string::npos);
  }
  EXPECT_THROW(CalibrationTable::Load(path, "00000000000000aa", CalibMethod::kKL, 0), Error);
  EXPECT_THROW(CalibrationTable::Load(path, "00000000000000aa", CalibMethod::kPercentile, 99.9),
               Error);
  {
    std::ofstream f(path, std::ios::trunc);
    f << "{\"format\": \"hotline-calibration-1\", \"method\": \"kl\", \"amax\": {\"x\": -1}}";
  }
  EXPECT_THROW(CalibrationTable::Load(path, "", CalibMethod::kKL, 0), Error);
  {
    std::ofstream f(path, std::ios::trunc);
    f << "{not json";
  }
  EXPECT_THROW(CalibrationTable::Load(path, "", CalibMethod::kKL, 0), Error);
  std::remove(path.c_str());
  EXPECT_THROW(CalibrationTable::Load(path, "", CalibMethod::kKL, 0), Error);
}

TEST(CalibrationJsonlTest, ReadsTextLinesAndNamesTheBadLine) {
  const std::string path = TempPath("calib.jsonl");
  {
    std::ofstream f(path, std::ios::trunc);
    f << "{\"text\": \"ab\", \"id\": 1}\n\n{\"text\": \"abc\"}\n{\"text\": \"a\"}\n";
  }
  // A stand-in tokenizer: [CLS]=1, one id per byte, [SEP]=2.
  CalibTokenizer tok = [](std::string_view s) {
    std::vector<int32_t> ids{1};
    for (char c : s) ids.push_back(int32_t(c));
    ids.push_back(2);
    return ids;
  };
  auto seqs = ReadCalibrationJsonl(path, tok);
  ASSERT_EQ(seqs.size(), 3u);
  EXPECT_EQ(seqs[1], (std::vector<int32_t>{1, 'a', 'b', 'c', 2}));
  EXPECT_EQ(ReadCalibrationJsonl(path, tok, 2).size(), 2u);
  {
    std::ofstream f(path, std::ios::app);
    f << "{\"txt\": \"x\"}\n";
  }
  try {
    ReadCalibrationJsonl(path, tok);
    FAIL() << "a line without text was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 5"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ReadCalibrationJsonl(path, nullptr), Error);
  std::remove(path.c_str());
}

TEST(KeepFpTest, ResolvesNamesIndicesLayersHeadsAndEmbeddings) {
  std::vector<QuantGemm> g(6);
  const char* roles[] = {"qkv", "attn_out", "qkv", "attn_out", "pooler", "head"};
  const int layers[] = {0, 0, 1, 1, -1, -1};
  for (int k = 0; k < 6; ++k) {
    g[k].index = k;
    g[k].node = "n" + std::to_string(k);
    g[k].role = roles[k];
    g[k].layer = layers[k];
  }
  bool emb = true;
  EXPECT_EQ(ResolveKeepFp(g, {}, &emb), std::vector<bool>(6, false));
  EXPECT_FALSE(emb);
  EXPECT_EQ(ResolveKeepFp(g, {"layer:1", "n0"}, &emb),
            (std::vector<bool>{true, false, true, true, false, false}));
  EXPECT_EQ(ResolveKeepFp(g, {"#1", "heads", "embeddings"}, &emb),
            (std::vector<bool>{false, true, false, false, true, true}));
  EXPECT_TRUE(emb);
  EXPECT_THROW(ResolveKeepFp(g, {"layer:7"}, &emb), Error);
  EXPECT_THROW(ResolveKeepFp(g, {"#6"}, &emb), Error);
  EXPECT_THROW(ResolveKeepFp(g, {"nope"}, &emb), Error);
}

TEST(S8BlobTest, PacksBytesIntoFloatStorageAndChecksSize) {
  std::vector<int8_t> v = {-127, -1, 0, 1, 127, 5, 6, 7};
  const HTensor t = PackS8(v, 2);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 1}));
  const int8_t* p = S8Data(t, 8);
  EXPECT_EQ(std::vector<int8_t>(p, p + 8), v);
  HTensor copy = t;  // copies keep the bytes
  EXPECT_EQ(std::vector<int8_t>(S8Data(copy, 8), S8Data(copy, 8) + 8), v);
  EXPECT_THROW(S8Data(t, 9), Error);
  EXPECT_THROW(PackS8(std::vector<int8_t>(6), 2), Error);
  EXPECT_EQ(PackS8(std::vector<int8_t>(5)).shape, (std::vector<int64_t>{2}));
}

}  // namespace
}  // namespace hotline::engine
