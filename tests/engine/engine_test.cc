// Whole-model parity with PyTorch, packed vs padded, plans, profiles and bad input.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "base/error.h"
#include "engine/cpu/kernels.h"
#include "engine/engine.h"
#include "engine/onnx_import.h"
#include "engine/passes.h"
#include "engine/test_util.h"

namespace hotline::engine {
namespace {

using json = nlohmann::json;

json LoadRef(const std::string& name) {
  std::ifstream f(FixturePath(name + ".ref.json"));
  return json::parse(f);
}

Tensor IntTensor(const json& rows) {
  Tensor t;
  t.dtype = Tensor::DType::kI64;
  t.shape = {int64_t(rows.size()), int64_t(rows[0].size())};
  for (const auto& r : rows) {
    for (const auto& v : r) t.i64.push_back(v.get<int64_t>());
  }
  return t;
}

void Flatten(const json& j, std::vector<float>* out) {
  if (j.is_array()) {
    for (const auto& e : j) Flatten(e, out);
  } else {
    out->push_back(j.get<float>());
  }
}

BuildOptions Opts(Precision p = Precision::kFP32) {
  BuildOptions o;
  o.precision = p;
  o.profile = Profile::Parse("1x1:4x16:8x32");
  o.tune = false;
  return o;
}

// Relative error max|a-b|/max|b| over real (unpadded) positions, and argmax agreement.
struct Cmp {
  double rel = 0;
  bool argmax_ok = true;
};

Cmp CompareCase(Context& ctx, const json& c) {
  auto out = ctx.RunPadded({{"input_ids", IntTensor(c["input_ids"])},
                            {"attention_mask", IntTensor(c["attention_mask"])},
                            {"token_type_ids", IntTensor(c["token_type_ids"])}});
  Cmp r;
  for (const char* name : {"intent_logits", "slot_logits"}) {
    std::vector<float> want;
    Flatten(c[name], &want);
    const Tensor& got = out.at(name);
    EXPECT_EQ(size_t(got.numel()), want.size()) << name;
    const int64_t inner = got.shape.back();
    const auto& mask = c["attention_mask"];
    const int64_t S = int64_t(mask[0].size());
    double maxref = 1e-9, maxdiff = 0;
    for (int64_t row = 0; row * inner < int64_t(want.size()); ++row) {
      if (std::string(name) == "slot_logits" && mask[row / S][row % S] == 0) continue;
      int64_t aw = 0, ag = 0;
      for (int64_t k = 0; k < inner; ++k) {
        const float w = want[row * inner + k], g = got.f32[row * inner + k];
        maxref = std::max(maxref, double(std::fabs(w)));
        maxdiff = std::max(maxdiff, double(std::fabs(w - g)));
        if (w > want[row * inner + aw]) aw = k;
        if (g > got.f32[row * inner + ag]) ag = k;
      }
      if (aw != ag) r.argmax_ok = false;
    }
    r.rel = std::max(r.rel, maxdiff / maxref);
  }
  return r;
}

class ParityTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ParityTest, Fp32MatchesPyTorch) {
  auto engine = Engine::BuildFromOnnx(FixturePath(std::string(GetParam()) + ".onnx"), Opts());
  int fused_attention = 0;
  for (const auto& op : engine->info().ops) fused_attention += op.type == "Attention";
  EXPECT_EQ(fused_attention, 2);
  auto ctx = engine->CreateContext();
  const json ref = LoadRef(GetParam());  // keep alive: the loop reads into it
  ASSERT_EQ(ref.at("cases").size(), 3u);
  for (const auto& c : ref.at("cases")) {
    const Cmp r = CompareCase(*ctx, c);
    std::printf("[parity] %s fp32 rel err %.3g argmax %s\n", GetParam(), r.rel,
                r.argmax_ok ? "same" : "DIFFERENT");
    EXPECT_LE(r.rel, 1e-4) << GetParam();
    EXPECT_TRUE(r.argmax_ok) << GetParam();
  }
}

TEST_P(ParityTest, Bf16MatchesPyTorchLoosely) {
  // Runs on every CPU: native AVX512-BF16 where present, bf16 weights widened to fp32 elsewhere.
  auto engine = Engine::BuildFromOnnx(FixturePath(std::string(GetParam()) + ".onnx"),
                                      Opts(Precision::kBF16));
  auto ctx = engine->CreateContext();
  const json ref = LoadRef(GetParam());  // keep alive: the loop reads into it
  ASSERT_EQ(ref.at("cases").size(), 3u);
  for (const auto& c : ref.at("cases")) {
    const Cmp r = CompareCase(*ctx, c);
    std::printf("[parity] %s bf16 rel err %.3g argmax %s\n", GetParam(), r.rel,
                r.argmax_ok ? "same" : "DIFFERENT");
    EXPECT_LE(r.rel, 2e-2) << GetParam();
    EXPECT_TRUE(r.argmax_ok) << GetParam();
  }
}

// Packed runs and padded runs give the same per-sequence results; the fused packed engine agrees
// with the unfused imported graph run by the reference interpreter on padded input.
TEST_P(ParityTest, PackedEqualsPaddedAndFusedEqualsUnfused) {
  const std::string onnx = FixturePath(std::string(GetParam()) + ".onnx");
  auto engine = Engine::BuildFromOnnx(onnx, Opts());
  auto ctx = engine->CreateContext();
  const Graph g = ImportOnnx(onnx);
  const int B = 3, S = 9;
  const std::vector<int> lengths{9, 4, 1};
  auto feeds = MakeProbeFeeds(g, B, S, lengths);
  const auto unfused = RunReference(g, feeds);
  std::map<std::string, Tensor> padded;
  PackedBatch pb;
  pb.cu_seqlens = {0};
  for (const auto& [name, t] : feeds) padded[name] = Tensor{Tensor::DType::kI64, t.shape, {}, t.i};
  for (int r = 0; r < B; ++r) {
    for (int s = 0; s < lengths[r]; ++s) {
      pb.input_ids.push_back(int32_t(feeds["input_ids"].i[r * S + s]));
      pb.token_type_ids.push_back(int32_t(feeds["token_type_ids"].i[r * S + s]));
    }
    pb.cu_seqlens.push_back(int32_t(pb.input_ids.size()));
  }
  std::vector<Output> packed;
  ctx->Run(pb, &packed);
  const auto pad_out = ctx->RunPadded(padded);
  ASSERT_EQ(packed.size(), 2u);
  EXPECT_EQ(packed[0].kind, Output::Kind::kPerSequence);
  EXPECT_EQ(packed[1].kind, Output::Kind::kPerToken);
  EXPECT_EQ(packed[1].shape, (std::vector<int64_t>{14, 7}));
  for (const Output& o : packed) {
    const Tensor& p = pad_out.at(o.name);
    const HTensor& u = unfused.at(o.name);
    const int64_t inner = o.shape.back();
    double maxu = 0, diff_u = 0;
    for (int r = 0; r < B; ++r) {
      const int rows = o.kind == Output::Kind::kPerToken ? lengths[r] : 1;
      for (int s = 0; s < rows; ++s) {
        const int64_t po = (o.kind == Output::Kind::kPerToken ? pb.cu_seqlens[r] + s : r) * inner;
        const int64_t pp = (o.kind == Output::Kind::kPerToken ? r * S + s : r) * inner;
        for (int64_t k = 0; k < inner; ++k) {
          EXPECT_EQ(o.data[po + k], p.f32[pp + k]) << o.name << " row " << r << "/" << s;
          maxu = std::max(maxu, double(std::fabs(u.f[pp + k])));
          diff_u = std::max(diff_u, double(std::fabs(u.f[pp + k] - o.data[po + k])));
        }
      }
    }
    EXPECT_LE(diff_u / maxu, 1e-5) << o.name << ": fused vs unfused";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ParityTest,
                         ::testing::Values("tiny_op14", "tiny_op17", "tiny_hf17"));

// A graph whose attention does not match (softmax over the query axis) still runs, padded,
// through the generic ops, and agrees with the reference interpreter.
TEST(UnfusedTest, UnmatchedGraphRunsThroughGenericOps) {
  onnx::ModelProto m;
  std::ifstream f(FixturePath("tiny_op14.onnx"), std::ios::binary);
  ASSERT_TRUE(m.ParseFromIstream(&f));
  int changed = 0;
  for (auto& n : *m.mutable_graph()->mutable_node()) {
    if (n.op_type() == "Softmax" && !changed++) n.mutable_attribute(0)->set_i(2);
  }
  ASSERT_EQ(changed, 2);
  const std::string path = ::testing::TempDir() + "/softmax_axis2.onnx";
  {
    std::ofstream w(path, std::ios::binary);
    ASSERT_TRUE(m.SerializeToOstream(&w));
  }
  auto engine = Engine::BuildFromOnnx(path, Opts());
  bool has_softmax = false;
  for (const auto& op : engine->info().ops) has_softmax |= op.type == "Softmax";
  EXPECT_TRUE(has_softmax);
  const Graph g = ImportOnnx(path);
  const std::vector<int> lengths{6, 3};
  auto feeds = MakeProbeFeeds(g, 2, 6, lengths);
  const auto ref = RunReference(g, feeds);
  std::map<std::string, Tensor> padded;
  for (const auto& [name, t] : feeds) padded[name] = Tensor{Tensor::DType::kI64, t.shape, {}, t.i};
  const auto out = engine->CreateContext()->RunPadded(padded);
  const Tensor& intent = out.at("intent_logits");
  ASSERT_EQ(intent.shape, (std::vector<int64_t>{2, 10}));
  for (size_t k = 0; k < intent.f32.size(); ++k) {
    EXPECT_NEAR(intent.f32[k], ref.at("intent_logits").f[k], 1e-5);
  }
  const Tensor& slots = out.at("slot_logits");
  ASSERT_EQ(slots.shape, (std::vector<int64_t>{2, 6, 7}));
  for (int64_t k = 0; k < 3 * 7; ++k) {  // row 1's real tokens
    EXPECT_NEAR(slots.f32[6 * 7 + k], ref.at("slot_logits").f[6 * 7 + k], 1e-5);
  }
}

}  // namespace
}  // namespace hotline::engine
