// QDQ import (src/engine/qdq.h): hand-built ONNX graphs with QuantizeLinear/DequantizeLinear,
// checked against values computed by hand. The whole-model check against ONNX Runtime's own
// execution of a quantize_static model is tests/engine/qdq_ort_test.py.
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "engine/onnx_import.h"
#include "engine/passes.h"

namespace hotline::engine {
namespace {

class QdqModel {
 public:
  QdqModel() {
    model_.set_ir_version(8);
    auto* os = model_.add_opset_import();
    os->set_version(17);
    graph_ = model_.mutable_graph();
    graph_->set_name("qdq");
  }
  void Input(const std::string& name, int cols) {
    auto* vi = graph_->add_input();
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_param("batch");
    tt->mutable_shape()->add_dim()->set_dim_value(cols);
  }
  void Output(const std::string& name) {
    auto* vi = graph_->add_output();
    vi->set_name(name);
    vi->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  }
  void Floats(const std::string& name, std::vector<int64_t> dims, std::vector<float> v) {
    auto* t = graph_->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (auto d : dims) t->add_dims(d);
    for (float x : v) t->add_float_data(x);
  }
  void Ints(const std::string& name, int type, std::vector<int64_t> dims, std::vector<int> v) {
    auto* t = graph_->add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    for (auto d : dims) t->add_dims(d);
    for (int x : v) t->add_int32_data(x);
  }
  onnx::NodeProto* Node(const std::string& op, std::vector<std::string> in,
                        std::vector<std::string> out) {
    auto* n = graph_->add_node();
    n->set_op_type(op);
    n->set_name(op + "_" + out[0]);
    for (auto& s : in) n->add_input(s);
    for (auto& s : out) n->add_output(s);
    return n;
  }
  std::string Write() {
    const auto dir = std::filesystem::temp_directory_path() / "hotline_qdq_test";
    std::filesystem::create_directories(dir);
    const std::string path =
        (dir / (std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) +
                ".onnx")).string();
    std::ofstream f(path, std::ios::binary);
    model_.SerializeToOstream(&f);
    return path;
  }

 private:
  onnx::ModelProto model_;
  onnx::GraphProto* graph_;
};

// x → Q/DQ(0.1, int8 0) → MatMul with DQ(int8 W, per-channel) → Q/DQ(0.05, uint8 128) → out
QdqModel LinearModel() {
  QdqModel m;
  m.Input("x", 4);
  m.Output("out");
  m.Floats("sx", {}, {0.1f});
  m.Ints("zx", onnx::TensorProto::INT8, {}, {0});
  m.Ints("wq", onnx::TensorProto::INT8, {4, 3}, {1, -2, 3, 4, -5, 6, 127, -128, 0, -1, 2, -3});
  m.Floats("sw", {3}, {0.5f, 0.25f, 0.125f});
  m.Ints("zw", onnx::TensorProto::INT8, {3}, {0, 0, 0});
  m.Floats("sy", {}, {0.05f});
  m.Ints("zy", onnx::TensorProto::UINT8, {}, {128});
  m.Node("QuantizeLinear", {"x", "sx", "zx"}, {"xq"});
  m.Node("DequantizeLinear", {"xq", "sx", "zx"}, {"xd"});
  m.Node("DequantizeLinear", {"wq", "sw", "zw"}, {"wd"});
  m.Node("MatMul", {"xd", "wd"}, {"y"});
  m.Node("QuantizeLinear", {"y", "sy", "zy"}, {"yq"});
  m.Node("DequantizeLinear", {"yq", "sy", "zy"}, {"out"});
  return m;
}

TEST(QdqImportTest, FoldsWeightsAndTurnsActivationPairsIntoRanges) {
  QdqModel m = LinearModel();
  QdqInfo info;
  Graph g = ImportOnnx(m.Write(), &info);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op, "MatMul");
  EXPECT_EQ(g.nodes[0].inputs, (std::vector<std::string>{"x", "wd"}));
  EXPECT_EQ(g.nodes[0].outputs, (std::vector<std::string>{"out"}));  // keeps the output's name
  EXPECT_EQ(info.pairs_removed, 2);
  EXPECT_EQ(info.weights_folded, 1);
  // (q - 0) * per-column scale, exactly.
  const HTensor* w = g.Const("wd");
  ASSERT_NE(w, nullptr);
  const std::vector<float> want{0.5f, -0.5f, 0.375f, 2.f,    -1.25f, 0.75f,
                                63.5f, -32.f, 0.f,    -0.5f, 0.5f,   -0.375f};
  EXPECT_EQ(w->f, want);
  EXPECT_EQ(g.Const("wq"), nullptr);  // the int8 original and the scales are gone
  EXPECT_EQ(g.Const("sx"), nullptr);
  ASSERT_TRUE(info.weights.count("wd"));
  EXPECT_EQ(info.weights["wd"].axis, 1);
  EXPECT_EQ(info.weights["wd"].scale, (std::vector<float>{0.5f, 0.25f, 0.125f}));
  EXPECT_TRUE(info.weights["wd"].symmetric);
  // Symmetric pairs: amax = 127 * scale, so scale = amax / 127 is the model's own.
  ASSERT_TRUE(info.activation_amax.count("x"));
  EXPECT_FLOAT_EQ(info.activation_amax["x"], 12.7f);
  ASSERT_TRUE(info.activation_amax.count("out"));  // uint8 with zero point 128 is symmetric
  EXPECT_FLOAT_EQ(info.activation_amax["out"], 127 * 0.05f);
  EXPECT_TRUE(info.notes.empty());
  // The stripped graph computes x · W exactly (the fp32 equivalent).
  HTensor x = HTensor::Float({1, 4}, {1.f, 2.f, -1.f, 0.5f});
  auto out = RunReference(g, {{"x", x}});
  const std::vector<float> ref{1 * 0.5f + 2 * 2.f - 63.5f - 0.25f,
                               -0.5f - 2.5f + 32.f + 0.25f,
                               0.375f + 1.5f + 0.f - 0.1875f};
  ASSERT_EQ(out.at("out").f.size(), 3u);
  for (int k = 0; k < 3; ++k) EXPECT_FLOAT_EQ(out.at("out").f[k], ref[k]);
}

TEST(QdqImportTest, PlainImportStripsTooAndAsymmetricRangesAreWidenedWithANote) {
  QdqModel m;
  m.Input("x", 2);
  m.Output("y");
  m.Floats("s", {}, {0.1f});
  m.Ints("z", onnx::TensorProto::UINT8, {}, {100});
  m.Floats("w", {2, 2}, {1, 2, 3, 4});
  m.Node("QuantizeLinear", {"x", "s", "z"}, {"xq"});
  m.Node("DequantizeLinear", {"xq", "s", "z"}, {"xd"});
  m.Node("MatMul", {"xd", "w"}, {"y"});
  const std::string path = m.Write();
  Graph plain = ImportOnnx(path);
  ASSERT_EQ(plain.nodes.size(), 1u);
  EXPECT_EQ(plain.nodes[0].inputs[0], "x");
  QdqInfo info;
  ImportOnnx(path, &info);
  // uint8 zero point 100 covers [-100 s, 155 s]: the symmetric range must hold 155 s.
  EXPECT_FLOAT_EQ(info.activation_amax.at("x"), 15.5f);
  ASSERT_EQ(info.notes.size(), 1u);
  EXPECT_NE(info.notes[0].find("asymmetric"), std::string::npos);
}

TEST(QdqImportTest, FakeQuantisedConstantRoundsHalfToEvenAndSaturates) {
  QdqModel m;
  m.Input("x", 4);
  m.Output("y");
  m.Floats("w", {4, 1}, {1.25f, 1.75f, 100.f, -0.2f});
  m.Floats("s", {}, {0.5f});
  m.Ints("z", onnx::TensorProto::INT8, {}, {0});
  m.Node("QuantizeLinear", {"w", "s", "z"}, {"wq"});
  m.Node("DequantizeLinear", {"wq", "s", "z"}, {"wd"});
  m.Node("MatMul", {"x", "wd"}, {"y"});
  QdqInfo info;
  Graph g = ImportOnnx(m.Write(), &info);
  // 2.5 → 2, 3.5 → 4 (half to even), 200 → 127 (saturated), -0.4 → -0.
  EXPECT_EQ(g.Const("wd")->f, (std::vector<float>{1.f, 2.f, 63.5f, 0.f}));
  EXPECT_EQ(info.weights.at("wd").axis, -1);
  EXPECT_EQ(info.weights.at("wd").scale, std::vector<float>{0.5f});
}

TEST(QdqImportTest, RejectsWhatIsNotAQdqPair) {
  {  // DQ of an activation with no Q before it
    QdqModel m;
    m.Input("x", 2);
    m.Output("y");
    m.Floats("s", {}, {0.1f});
    m.Node("DequantizeLinear", {"x", "s"}, {"y"});
    try {
      ImportOnnx(m.Write());
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("QDQ"), std::string::npos) << e.what();
    }
  }
  {  // Q read by something other than DQ (QOperator style)
    QdqModel m;
    m.Input("x", 2);
    m.Output("y");
    m.Floats("s", {}, {0.1f});
    m.Node("QuantizeLinear", {"x", "s"}, {"xq"});
    m.Node("Relu", {"xq"}, {"y"});
    try {
      ImportOnnx(m.Write());
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("Relu"), std::string::npos) << e.what();
    }
  }
  {  // a pair whose halves disagree
    QdqModel m;
    m.Input("x", 2);
    m.Output("y");
    m.Floats("s", {}, {0.1f});
    m.Floats("s2", {}, {0.2f});
    m.Node("QuantizeLinear", {"x", "s"}, {"xq"});
    m.Node("DequantizeLinear", {"xq", "s2"}, {"y"});
    try {
      ImportOnnx(m.Write());
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("disagree"), std::string::npos) << e.what();
    }
  }
  {  // per-channel scales that do not match the axis
    QdqModel m;
    m.Input("x", 4);
    m.Output("y");
    m.Ints("wq", onnx::TensorProto::INT8, {4, 3}, std::vector<int>(12, 1));
    m.Floats("sw", {2}, {0.5f, 0.25f});
    m.Node("DequantizeLinear", {"wq", "sw"}, {"wd"});
    m.Node("MatMul", {"x", "wd"}, {"y"});
    EXPECT_THROW(ImportOnnx(m.Write()), Error);
  }
}

}  // namespace
}  // namespace hotline::engine
