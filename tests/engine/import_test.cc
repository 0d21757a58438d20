// ONNX import and graph passes on the tiny fixtures.
#include <gtest/gtest.h>

#include "base/error.h"
#include "engine/fusion.h"
#include "engine/onnx_import.h"
#include "engine/passes.h"
#include "engine/test_util.h"  // tests/engine/test_util.h

namespace hotline::engine {
namespace {

TEST(ImportTest, ImportsEveryFixture) {
  for (const char* name : {"tiny_op14", "tiny_op17", "tiny_hf17"}) {
    Graph g = ImportOnnx(FixturePath(std::string(name) + ".onnx"));
    EXPECT_GT(g.nodes.size(), 50u) << name;
    ASSERT_EQ(g.inputs.size(), 3u) << name;
    EXPECT_EQ(g.inputs[0].name, "input_ids");
    EXPECT_EQ(g.inputs[0].dims, (std::vector<std::string>{"batch", "seq"}));
    ASSERT_EQ(g.outputs.size(), 2u);
    EXPECT_EQ(g.outputs[1].name, "slot_logits");
  }
}

TEST(ImportTest, FusesTheEncoderOfEveryFixture) {
  for (const char* name : {"tiny_op14", "tiny_op17", "tiny_hf17"}) {
    Graph g = ImportOnnx(FixturePath(std::string(name) + ".onnx"));
    FoldConstants(&g);
    EliminateDeadNodes(&g);
    ShapeInfo s = InferShapes(g);
    FusionReport rep;
    Canonicalize(&g, s, &rep);
    FuseEncoder(&g, &s, &rep);
    auto h = g.OpHistogram();
    std::string hist;
    for (auto& [op, c] : h) hist += op + ":" + std::to_string(c) + " ";
    for (auto& n : rep.notes) hist += "\n  " + n;
    EXPECT_EQ(h["Attention"], 2) << name << " " << hist;
    EXPECT_EQ(h["EmbedLayerNorm"], 1) << name << " " << hist;
    EXPECT_EQ(h["DenseLayerNorm"], 4) << name << " " << hist;
    EXPECT_EQ(h["Dense"], 2 * 2 + 3) << name << " " << hist;  // qkv, ffn1 per layer; 3 heads
    EXPECT_EQ(h["FirstToken"], 1) << name << " " << hist;
    EXPECT_EQ(g.nodes.size(), 1u + 2 * 5 + 1 + 3) << name << " " << hist;
    EXPECT_EQ(PackedIncompatibility(g, s), "") << name;
  }
}

}  // namespace
}  // namespace hotline::engine
