// Whole-graph runners' CPU-side parts: FusedOpAttrs validation, the BERT encoder matcher on real
// fused plans, plan fingerprints (a doctored plan from other hardware is refused naming both),
// the device list rules and the CUDA backend never falling back to the CPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>

#include "base/error.h"
#include "engine/encoder_graph.h"
#include "engine/engine.h"
#include "engine/fused_attrs.h"
#include "engine/plan.h"
#include "engine/runtime.h"
#include "engine/test_util.h"

namespace hotline::engine {
namespace {

BuildOptions CpuOpts() {
  BuildOptions o;
  o.profile = Profile::Parse("1x1:2x8:4x16");
  o.tune = false;
  return o;
}

std::string ErrorOf(const std::function<void()>& f, Code* code = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  return "";
}

Node Make(const std::string& op, std::vector<std::string> in) {
  Node n;
  n.name = "n";
  n.op = op;
  n.inputs = std::move(in);
  n.outputs = {"y"};
  return n;
}

TEST(FusedOpAttrsTest, ReadsValidAttributes) {
  Node a = Make("Attention", {"qkv"});
  a.attrs["heads"] = Attr{int64_t(12)};
  a.attrs["head_dim"] = Attr{int64_t(64)};
  a.attrs["scale"] = Attr{0.125f};
  const FusedOpAttrs fa = FusedOpAttrs::From(a);
  EXPECT_EQ(fa.heads, 12);
  EXPECT_EQ(fa.head_dim, 64);
  EXPECT_EQ(fa.hidden(), 768);
  EXPECT_FLOAT_EQ(fa.scale, 0.125f);

  Node d = Make("Dense", {"x", "w", ""});
  d.attrs["epilogue"] = Attr{std::string("gelu")};
  d.attrs["tactic"] = Attr{int64_t(2)};
  const FusedOpAttrs fd = FusedOpAttrs::From(d);
  EXPECT_EQ(fd.epilogue, FusedEpilogue::kGelu);
  EXPECT_EQ(fd.tactic, 2);
  EXPECT_FALSE(fd.has_bias);

  Node l = Make("DenseLayerNorm", {"x", "w", "b", "r", "g", "be"});
  l.attrs["epsilon"] = Attr{1e-5f};
  const FusedOpAttrs fl = FusedOpAttrs::From(l);
  EXPECT_TRUE(fl.has_bias);
  EXPECT_TRUE(fl.has_residual);
  EXPECT_FLOAT_EQ(fl.eps, 1e-5f);

  Node e = Make("EmbedLayerNorm", {"ids", "", "word", "pos", "", "g", "b"});
  EXPECT_FALSE(FusedOpAttrs::From(e).has_types);
  EXPECT_FLOAT_EQ(FusedOpAttrs::From(e).eps, 1e-12f);  // the default when absent
}

TEST(FusedOpAttrsTest, RefusesMalformedNodesNamingWhatIsWrong) {
  struct Case {
    Node node;
    std::string want;
  };
  std::vector<Case> cases;
  {
    Node n = Make("Attention", {"qkv"});
    n.attrs["head_dim"] = Attr{int64_t(64)};
    cases.push_back({n, "'heads' is missing"});
    n.attrs["heads"] = Attr{int64_t(0)};
    cases.push_back({n, "'heads' must be in [1, 1024], got 0"});
    n.attrs["heads"] = Attr{int64_t(4)};
    n.attrs["scale"] = Attr{-1.f};
    cases.push_back({n, "'scale' must be finite and positive"});
    n.attrs["scale"] = Attr{std::string("big")};
    cases.push_back({n, "'scale' is not a float"});
  }
  {
    Node n = Make("Dense", {"x", "w", "b"});
    n.attrs["epilogue"] = Attr{std::string("relu")};
    cases.push_back({n, "'epilogue' must be none, gelu or tanh, got 'relu'"});
  }
  {
    Node n = Make("LayerNorm", {"x", "g", "b"});
    n.attrs["epsilon"] = Attr{0.f};
    cases.push_back({n, "'epsilon' must be in (0, 1)"});
  }
  cases.push_back({Make("DenseLayerNorm", {"x", "w", "b"}), "expected 6 inputs, got 3"});
  cases.push_back({Make("EmbedLayerNorm", {"ids", "t", "word", "pos", "", "g", "b"}),
                   "must come together"});
  cases.push_back({Make("LayerNorm", {"x", "", "b"}), "input #1 is missing"});
  cases.push_back({Make("Softmax", {"x"}), "is not a fused op"});
  for (const auto& c : cases) {
    Code code = Code::kOk;
    const std::string msg = ErrorOf([&] { FusedOpAttrs::From(c.node); }, &code);
    EXPECT_NE(msg.find(c.want), std::string::npos) << "got: " << msg;
    EXPECT_NE(msg.find(c.node.op + " node 'n'"), std::string::npos) << msg;
    EXPECT_EQ(code, Code::kInvalidArgument);
  }
}

// The tiny BertJoint fixtures (make_fixtures.py: 2 layers, hidden 64, 4 heads, ffn 128, pooler)
// fuse into exactly the encoder sequence.
class MatchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MatchTest, TinyBertJointIsTheEncoderSequence) {
  PlanData p = BuildPlanData(FixturePath(GetParam()), CpuOpts());
  ASSERT_EQ(p.mode, "packed");
  BertEncoderGraph m;
  const std::string why = MatchBertEncoder(p.graph, p.info, &m);
  ASSERT_EQ(why, "");
  // Independent facts from the fused graph's constants and the fixture's ONNX outputs.
  int attention = 0;
  for (const auto& n : p.graph.nodes) attention += n.op == "Attention";
  EXPECT_EQ(m.layers, attention);
  EXPECT_GE(m.layers, 1);
  EXPECT_EQ(m.hidden, m.word->shape[1]);
  EXPECT_EQ(m.hidden % m.heads, 0);
  EXPECT_NEAR(m.scale, 1.0 / std::sqrt(double(m.hidden / m.heads)), 1e-6);
  EXPECT_TRUE(m.pooler);
  ASSERT_EQ(p.info.outputs.size(), 2u);
  EXPECT_EQ(p.info.outputs[m.intent_output].name, "intent_logits");
  EXPECT_EQ(p.info.outputs[m.slot_output].name, "slot_logits");
  EXPECT_EQ(m.n_intents, p.info.outputs[m.intent_output].inner_shape[0]);
  EXPECT_EQ(m.n_slots, p.info.outputs[m.slot_output].inner_shape[0]);
  EXPECT_EQ(int64_t(m.layer.size()), m.layers);
  EXPECT_EQ(m.layer[0].qkv_w->shape, (std::vector<int64_t>{m.hidden, 3 * m.hidden}));
  EXPECT_EQ(m.layer[0].ff1_w->shape, (std::vector<int64_t>{m.hidden, m.intermediate}));
}

TEST_P(MatchTest, DoctoredGraphsAreNotClaimed) {
  const PlanData p = BuildPlanData(FixturePath(GetParam()), CpuOpts());
  BertEncoderGraph m;
  {  // an extra op after the slot head
    Graph g = p.graph;
    Node n;
    n.name = "extra";
    n.op = "Tanh";
    n.inputs = {g.outputs[1].name};
    n.outputs = {"extra_out"};
    g.nodes.push_back(n);
    EXPECT_NE(MatchBertEncoder(g, p.info, &m).find("head output is read further"),
              std::string::npos);
  }
  {  // a layer's FFN without its GELU
    Graph g = p.graph;
    for (auto& n : g.nodes) {
      if (n.op == "Dense" && n.s("epilogue", "none") == "gelu") {
        n.attrs.erase("epilogue");
        break;
      }
    }
    EXPECT_NE(MatchBertEncoder(g, p.info, &m).find("has no gelu epilogue"), std::string::npos);
  }
  {  // attention heads that do not tile the hidden size
    Graph g = p.graph;
    for (auto& n : g.nodes) {
      if (n.op == "Attention") n.attrs["heads"] = Attr{n.i("heads", 0) + 1};
    }
    EXPECT_NE(MatchBertEncoder(g, p.info, &m).find("!= hidden"), std::string::npos);
  }
  {  // a malformed fused node is an error, not a silent "no match"
    Graph g = p.graph;
    for (auto& n : g.nodes) {
      if (n.op == "Attention") n.attrs.erase("head_dim");
    }
    EXPECT_NE(ErrorOf([&] { MatchBertEncoder(g, p.info, &m); }).find("'head_dim' is missing"),
              std::string::npos);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MatchTest,
                         ::testing::Values("tiny_op14.onnx", "tiny_op17.onnx"));

TEST(FingerprintTest, ForeignGpuIsRefusedNamingBoth) {
  const std::map<std::string, std::string> h100 = {
      {"backend", "cuda"}, {"gpu", "NVIDIA H100 80GB HBM3"}, {"sm", "90"}, {"cuda", "13000"},
      {"cublaslt", "130000"}};
  std::map<std::string, std::string> h200 = h100;
  h200["gpu"] = "NVIDIA H200";
  EXPECT_NO_THROW(CheckFingerprint(h200, h200));
  Code code = Code::kOk;
  const std::string msg = ErrorOf([&] { CheckFingerprint(h100, h200); }, &code);
  EXPECT_EQ(code, Code::kFailedPrecondition);
  EXPECT_NE(msg.find("built for gpu NVIDIA H100 80GB HBM3 but this machine has gpu NVIDIA H200"),
            std::string::npos) << msg;
  EXPECT_NE(msg.find("plan: {backend=cuda, cublaslt=130000, cuda=13000, gpu=NVIDIA H100 80GB HBM3"),
            std::string::npos) << msg;
  EXPECT_NE(msg.find("here: {backend=cuda, cublaslt=130000, cuda=13000, gpu=NVIDIA H200"),
            std::string::npos) << msg;
  std::map<std::string, std::string> old_lt = h200;
  old_lt["cublaslt"] = "120900";
  EXPECT_NE(ErrorOf([&] { CheckFingerprint(old_lt, h200); }).find("cublaslt 120900"),
            std::string::npos);
  std::map<std::string, std::string> none = h200;
  none.erase("sm");
  EXPECT_NE(ErrorOf([&] { CheckFingerprint(none, h200); }).find("built for sm (none)"),
            std::string::npos);
}

class PlanFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "graph_runner_test_" + std::to_string(::getpid()) + ".plan";
    BuildPlanFile(FixturePath("tiny_op17.onnx"), CpuOpts(), path_);
  }
  void TearDown() override { std::remove(path_.c_str()); }
  std::string path_;
};

TEST_F(PlanFileTest, DoctoredFingerprintIsRefusedNamingBoth) {
  PlanData p = ReadPlan(path_, true);
  const std::string real = p.info.fingerprint.at("cpu_isa");
  p.info.fingerprint["cpu_isa"] = "imaginary-isa";
  WritePlan(p, path_);
  Code code = Code::kOk;
  const std::string msg = ErrorOf([&] { Engine::Load(path_); }, &code);
  EXPECT_EQ(code, Code::kFailedPrecondition);
  EXPECT_NE(msg.find("built for cpu_isa imaginary-isa but this machine has cpu_isa " + real),
            std::string::npos) << msg;
  // inspect still reads it (no hardware check).
  EXPECT_EQ(InspectPlan(path_).fingerprint.at("cpu_isa"), "imaginary-isa");
}

TEST_F(PlanFileTest, CudaPlanWithoutAGpuIsAnErrorNotACpuFallback) {
  PlanData p = ReadPlan(path_, true);
  p.info.backend = BackendKind::kCUDA;
  p.info.precision = Precision::kFP16;
  p.info.fingerprint = {{"backend", "cuda"}, {"gpu", "NVIDIA H200"}, {"sm", "90"}};
  WritePlan(p, path_);
  Code code = Code::kOk;
  const std::string msg = ErrorOf([&] { Engine::Load(path_); }, &code);
  // This test runs where no GPU is usable (CI): built without CUDA, or with it and no device.
  EXPECT_NE(msg.find("cuda"), std::string::npos) << msg;
  EXPECT_EQ(code, Code::kFailedPrecondition) << msg;
  EXPECT_EQ(msg.find("falling back"), std::string::npos);
}

TEST_F(PlanFileTest, DevicesApplyToCudaOnly) {
  EXPECT_NO_THROW(Engine::Load(path_, {0}));
  EXPECT_NE(ErrorOf([&] { Engine::Load(path_, {0, 1}); }).find("cuda backend only"),
            std::string::npos);
  BuildOptions o = CpuOpts();
  o.devices = {1};
  EXPECT_NE(ErrorOf([&] { Engine::BuildFromOnnx(FixturePath("tiny_op17.onnx"), o); })
                .find("cuda backend only"),
            std::string::npos);
}

}  // namespace
}  // namespace hotline::engine
