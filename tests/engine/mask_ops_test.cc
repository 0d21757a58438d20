// The mask and position-id ops of current exporters (ref_ops_mask.cc) against values worked out
// by hand from the ONNX operator definitions, and the shape rewiring that lets fusions through.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "base/error.h"
#include "engine/passes.h"
#include "engine/ref_ops.h"

namespace hotline::engine {
namespace {

using I = std::vector<int64_t>;

HTensor RunOp(const std::string& op, std::vector<HTensor> in,
              std::map<std::string, Attr> attrs = {}, int outputs = 1, int64_t opset = 17) {
  Node n;
  n.name = op + "_test";
  n.op = op;
  for (size_t k = 0; k < in.size(); ++k) n.inputs.push_back("in" + std::to_string(k));
  for (int k = 0; k < outputs; ++k) n.outputs.push_back("out" + std::to_string(k));
  n.attrs = std::move(attrs);
  std::vector<const HTensor*> ptrs;
  for (auto& t : in) ptrs.push_back(&t);
  std::vector<HTensor> out;
  RunRefOp(n, opset, ptrs, &out);
  return out.at(0);
}

TEST(MaskOpsTest, IsNaNIsInfSign) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = INFINITY;
  const HTensor x = HTensor::Float({4}, {1.f, nan, inf, -inf});
  EXPECT_EQ(RunOp("IsNaN", {x}).i, (I{0, 1, 0, 0}));
  EXPECT_EQ(RunOp("IsInf", {x}).i, (I{0, 0, 1, 1}));
  EXPECT_EQ(RunOp("IsInf", {x}, {{"detect_negative", Attr{int64_t(0)}}}).i, (I{0, 0, 1, 0}));
  EXPECT_EQ(RunOp("Sign", {HTensor::Int({3}, {-4, 0, 9})}).i, (I{-1, 0, 1}));
}

TEST(MaskOpsTest, TriluKeepsTheNamedTriangle) {
  const HTensor ones = HTensor::Int({3, 3}, I(9, 1));
  EXPECT_EQ(RunOp("Trilu", {ones}).i, (I{1, 1, 1, 0, 1, 1, 0, 0, 1}));  // upper, k = 0
  EXPECT_EQ(RunOp("Trilu", {ones, HTensor::Int({}, {1})}, {{"upper", Attr{int64_t(0)}}}).i,
            (I{1, 1, 0, 1, 1, 1, 1, 1, 1}));  // lower, one above the diagonal kept
}

TEST(MaskOpsTest, CumSumForwardExclusiveReverse) {
  const HTensor x = HTensor::Int({2, 3}, {1, 1, 0, 1, 0, 1});
  const HTensor axis = HTensor::Int({}, {1});
  EXPECT_EQ(RunOp("CumSum", {x, axis}).i, (I{1, 2, 2, 1, 1, 2}));
  EXPECT_EQ(RunOp("CumSum", {x, axis}, {{"exclusive", Attr{int64_t(1)}}}).i, (I{0, 1, 2, 0, 1, 1}));
  EXPECT_EQ(RunOp("CumSum", {x, axis}, {{"reverse", Attr{int64_t(1)}}}).i, (I{2, 1, 0, 2, 1, 1}));
}

TEST(MaskOpsTest, GatherNDAndScatterND) {
  // ONNX's examples: data [[0,1],[2,3]], indices [[0,0],[1,1]] -> [0,3]; [[1],[0]] -> rows swapped.
  const HTensor data = HTensor::Int({2, 2}, {0, 1, 2, 3});
  EXPECT_EQ(RunOp("GatherND", {data, HTensor::Int({2, 2}, {0, 0, 1, 1})}).i, (I{0, 3}));
  const HTensor rows = RunOp("GatherND", {data, HTensor::Int({2, 1}, {1, 0})});
  EXPECT_EQ(rows.shape, (I{2, 2}));
  EXPECT_EQ(rows.i, (I{2, 3, 0, 1}));
  // batch_dims = 1: data [2,2,2], indices [[1],[0]] -> [[2,3],[4,5]].
  const HTensor d3 = HTensor::Int({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  EXPECT_EQ(
      RunOp("GatherND", {d3, HTensor::Int({2, 1}, {1, 0})}, {{"batch_dims", Attr{int64_t(1)}}}).i,
      (I{2, 3, 4, 5}));
  const HTensor s = RunOp("ScatterND", {HTensor::Int({4}, {1, 2, 3, 4}),
                                        HTensor::Int({2, 1}, {3, 0}), HTensor::Int({2}, {9, 7})});
  EXPECT_EQ(s.i, (I{7, 2, 3, 9}));
  const HTensor a =
      RunOp("ScatterND",
            {HTensor::Int({4}, {1, 2, 3, 4}), HTensor::Int({1, 1}, {1}), HTensor::Int({1}, {5})},
            {{"reduction", Attr{std::string("add")}}});
  EXPECT_EQ(a.i, (I{1, 7, 3, 4}));
  EXPECT_THROW(RunOp("GatherND", {data, HTensor::Int({1, 2}, {2, 0})}), Error);  // out of range
}

TEST(MaskOpsTest, GatherElementsTileSplit) {
  const HTensor data = HTensor::Int({2, 2}, {1, 2, 3, 4});
  EXPECT_EQ(RunOp("GatherElements", {data, HTensor::Int({2, 2}, {0, 0, 1, 0})},
                  {{"axis", Attr{int64_t(1)}}})
                .i,
            (I{1, 1, 4, 3}));
  const HTensor t = RunOp("Tile", {HTensor::Int({1, 2}, {5, 6}), HTensor::Int({2}, {2, 2})});
  EXPECT_EQ(t.shape, (I{2, 4}));
  EXPECT_EQ(t.i, (I{5, 6, 5, 6, 5, 6, 5, 6}));
  const HTensor first =
      RunOp("Split", {HTensor::Int({2, 3}, {1, 2, 3, 4, 5, 6}), HTensor::Int({2}, {1, 2})},
            {{"axis", Attr{int64_t(1)}}}, 2);
  EXPECT_EQ(first.shape, (I{2, 1}));
  EXPECT_EQ(first.i, (I{1, 4}));
  EXPECT_THROW(RunOp("Split", {HTensor::Int({3}, {1, 2, 3}), HTensor::Int({2}, {1, 1})}, {}, 2),
               Error);  // sizes do not add up
}

// ids [batch, seq] → Gather(table) → x; Reshape(x, Concat(Shape(x)[0:2], [2, 2])): the Shape
// node reads x, so x has two readers until RewireShapes points it at the input's shape.
TEST(MaskOpsTest, RewireShapesTakesShapeNodesOffIntermediateValues) {
  Graph g;
  g.opset = 17;
  g.inputs.push_back({"input_ids", HTensor::DType::kI64, {"batch", "seq"}});
  g.initializers["table"] = HTensor::Float({10, 4}, std::vector<float>(40, 0.5f));
  g.initializers["start"] = HTensor::Int({1}, {0});
  g.initializers["end"] = HTensor::Int({1}, {2});
  g.initializers["tail"] = HTensor::Int({2}, {2, 2});
  g.initializers["last"] = HTensor::Int({}, {2});
  auto node = [](std::string op, std::vector<std::string> in, std::string out) {
    Node n;
    n.name = out;
    n.op = std::move(op);
    n.inputs = std::move(in);
    n.outputs = {std::move(out)};
    return n;
  };
  g.nodes.push_back(node("Gather", {"table", "input_ids"}, "x"));
  g.nodes.push_back(node("Shape", {"x"}, "sx"));
  g.nodes.push_back(node("Slice", {"sx", "start", "end"}, "lead"));
  g.nodes.push_back(node("Gather", {"sx", "last"}, "hidden"));  // static: becomes a constant
  Node cat = node("Concat", {"lead", "tail"}, "target");
  cat.attrs["axis"] = Attr{int64_t(0)};
  g.nodes.push_back(cat);
  g.nodes.push_back(node("Reshape", {"x", "target"}, "y"));
  g.nodes.push_back(node("Cast", {"hidden"}, "h"));
  g.nodes.back().attrs["to"] = Attr{int64_t(1)};
  g.nodes.push_back(node("Mul", {"y", "h"}, "out"));
  g.outputs.push_back({"out", HTensor::DType::kF32, {}});
  const ShapeInfo s = InferShapes(g);
  const auto before = RunReference(g, MakeProbeFeeds(g, 2, 5, {5, 3})).at("out");
  EXPECT_GT(RewireShapes(&g, s), 0);
  FoldConstants(&g);
  EliminateDeadNodes(&g);
  g.Validate();
  for (const auto& n : g.nodes) {
    if (n.op == "Shape") {
      EXPECT_EQ(n.inputs[0], "input_ids") << n.Describe();
    }
  }
  EXPECT_EQ(g.Consumers().at("x").size(), 1u);  // only the Reshape reads it now
  ASSERT_TRUE(g.IsConst("h"));                  // Shape(x)[2] = 4, folded through the Cast
  EXPECT_EQ(g.Const("h")->f, (std::vector<float>{4.f}));
  const auto after = RunReference(g, MakeProbeFeeds(g, 2, 5, {5, 3})).at("out");
  EXPECT_EQ(after.shape, before.shape);
  EXPECT_EQ(after.f, before.f);
}

}  // namespace
}  // namespace hotline::engine
