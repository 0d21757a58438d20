// Each generic (reference) op against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>

#include "base/error.h"
#include "engine/ref_ops.h"

namespace hotline::engine {
namespace {

using F = std::vector<float>;
using I = std::vector<int64_t>;

struct OpCase {
  Node node;
  std::vector<HTensor> in;
  int64_t opset = 14;

  OpCase(const std::string& op, std::vector<HTensor> inputs) : in(std::move(inputs)) {
    node.name = op + "_test";
    node.op = op;
    for (size_t k = 0; k < in.size(); ++k) node.inputs.push_back("in" + std::to_string(k));
    node.outputs = {"out"};
  }
  OpCase& Attr(const std::string& name, engine::Attr a) {
    node.attrs[name] = std::move(a);
    return *this;
  }
  HTensor Run() {
    std::vector<const HTensor*> ptrs;
    for (auto& t : in) ptrs.push_back(&t);
    std::vector<HTensor> out;
    RunRefOp(node, opset, ptrs, &out);
    return out.at(0);
  }
};

HTensor Fl(I shape, F v) { return HTensor::Float(std::move(shape), std::move(v)); }
HTensor In(I shape, I v) { return HTensor::Int(std::move(shape), std::move(v)); }

void ExpectF(const HTensor& t, const I& shape, const F& want, float tol = 1e-6f) {
  ASSERT_EQ(t.dtype, HTensor::DType::kF32);
  ASSERT_EQ(t.shape, shape);
  ASSERT_EQ(t.f.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(t.f[k], want[k], tol) << "index " << k;
}

void ExpectI(const HTensor& t, const I& shape, const I& want) {
  ASSERT_EQ(t.shape, shape);
  EXPECT_EQ(t.i, want);
}

TEST(RefOpsTest, ElementwiseBroadcast) {
  ExpectF(OpCase("Add", {Fl({2, 3}, {1, 2, 3, 4, 5, 6}), Fl({3}, {10, 20, 30})}).Run(), {2, 3},
          {11, 22, 33, 14, 25, 36});
  ExpectF(OpCase("Sub", {Fl({2, 1}, {1, 2}), Fl({1, 2}, {10, 20})}).Run(), {2, 2},
          {-9, -19, -8, -18});
  ExpectF(OpCase("Mul", {Fl({2}, {3, 4}), Fl({}, {0.5f})}).Run(), {2}, {1.5f, 2});
  ExpectF(OpCase("Div", {Fl({2}, {3, 4}), Fl({}, {2})}).Run(), {2}, {1.5f, 2});
  ExpectF(OpCase("Pow", {Fl({2}, {3, -2}), Fl({}, {2})}).Run(), {2}, {9, 4});
  ExpectI(OpCase("Mul", {In({2}, {3, 4}), In({}, {-2})}).Run(), {2}, {-6, -8});
  ExpectI(OpCase("Div", {In({2}, {7, -7}), In({}, {2})}).Run(), {2}, {3, -3});
}

TEST(RefOpsTest, Unary) {
  ExpectF(OpCase("Sqrt", {Fl({2}, {4, 2})}).Run(), {2}, {2, std::sqrt(2.f)});
  ExpectF(OpCase("Erf", {Fl({2}, {0.5f, -1})}).Run(), {2}, {0.5204999f, -0.8427008f});
  ExpectF(OpCase("Tanh", {Fl({1}, {0.5f})}).Run(), {1}, {0.4621172f});
  ExpectF(OpCase("Gelu", {Fl({2}, {1, -1})}).Run(), {2}, {0.8413447f, -0.1586553f});
  ExpectI(OpCase("Not", {HTensor::Bool({2}, {1, 0})}).Run(), {2}, {0, 1});
}

TEST(RefOpsTest, ComparisonsAndLogic) {
  ExpectI(OpCase("Equal", {In({3}, {1, 2, 3}), In({}, {2})}).Run(), {3}, {0, 1, 0});
  ExpectI(OpCase("Less", {Fl({3}, {1, 2, 3}), Fl({}, {2})}).Run(), {3}, {1, 0, 0});
  ExpectI(OpCase("GreaterOrEqual", {In({3}, {1, 2, 3}), In({}, {2})}).Run(), {3}, {0, 1, 1});
  const HTensor r = OpCase("And", {HTensor::Bool({2}, {1, 1}), HTensor::Bool({2}, {0, 1})}).Run();
  EXPECT_EQ(r.dtype, HTensor::DType::kBool);
  ExpectI(r, {2}, {0, 1});
  ExpectF(OpCase("Where", {HTensor::Bool({2, 1}, {1, 0}), Fl({}, {0}), Fl({2}, {-5, -6})}).Run(),
          {2, 2}, {0, 0, -5, -6});
}

TEST(RefOpsTest, CastTruncatesAndConvertsToBool) {
  ExpectI(OpCase("Cast", {Fl({3}, {1.7f, -1.7f, 0})}).Attr("to", {int64_t(7)}).Run(), {3},
          {1, -1, 0});
  const HTensor b = OpCase("Cast", {In({3}, {2, 0, -1})}).Attr("to", {int64_t(9)}).Run();
  EXPECT_EQ(b.dtype, HTensor::DType::kBool);
  ExpectI(b, {3}, {1, 0, 1});
  ExpectF(OpCase("Cast", {In({2}, {3, -4})}).Attr("to", {int64_t(1)}).Run(), {2}, {3, -4});
}

TEST(RefOpsTest, ReductionsSoftmaxLayerNorm) {
  ExpectF(OpCase("ReduceMean", {Fl({2, 2}, {1, 3, 5, 7})}).Attr("axes", {I{-1}}).Run(), {2, 1},
          {2, 6});
  OpCase sum("ReduceSum", {Fl({2, 2}, {1, 3, 5, 7}), In({1}, {0})});
  sum.Attr("keepdims", {int64_t(0)});
  ExpectF(sum.Run(), {2}, {6, 10});
  const float e1 = std::exp(1.f), e2 = std::exp(2.f), s = 1 + e1 + e2;
  ExpectF(OpCase("Softmax", {Fl({1, 3}, {0, 1, 2})}).Run(), {1, 3}, {1 / s, e1 / s, e2 / s});
  // LayerNorm of [1, 2, 3]: mean 2, var 2/3 → (x-2)/sqrt(2/3) * gamma + beta.
  const float inv = 1.f / std::sqrt(2.f / 3.f + 1e-5f);
  ExpectF(OpCase("LayerNormalization", {Fl({1, 3}, {1, 2, 3}), Fl({3}, {1, 2, 1}),
                                        Fl({3}, {0, 0, 1})}).Run(),
          {1, 3}, {-inv, 0, inv + 1}, 1e-5f);
}

TEST(RefOpsTest, MatMulAndGemm) {
  ExpectF(OpCase("MatMul", {Fl({2, 2}, {1, 2, 3, 4}), Fl({2, 1}, {5, 6})}).Run(), {2, 1},
          {17, 39});
  // Batched with broadcast: [2,1,2] · [2,1] → [2,1,1].
  ExpectF(OpCase("MatMul", {Fl({2, 1, 2}, {1, 2, 3, 4}), Fl({2, 1}, {1, 1})}).Run(), {2, 1, 1},
          {3, 7});
  OpCase gemm("Gemm", {Fl({1, 2}, {1, 2}), Fl({2, 2}, {1, 0, 1, 1}), Fl({2}, {10, 20})});
  gemm.Attr("transB", {int64_t(1)});
  ExpectF(gemm.Run(), {1, 2}, {11, 23});  // B^T = [[1,1],[0,1]]
}

TEST(RefOpsTest, ShapeOps) {
  const HTensor x = Fl({2, 3}, {0, 1, 2, 3, 4, 5});
  ExpectF(OpCase("Reshape", {x, In({2}, {0, -1})}).Run(), {2, 3}, x.f);
  ExpectF(OpCase("Reshape", {x, In({3}, {3, 1, -1})}).Run(), {3, 1, 2}, x.f);
  ExpectF(OpCase("Transpose", {x}).Attr("perm", {I{1, 0}}).Run(), {3, 2}, {0, 3, 1, 4, 2, 5});
  ExpectF(OpCase("Unsqueeze", {x, In({1}, {1})}).Run(), {2, 1, 3}, x.f);
  ExpectF(OpCase("Squeeze", {Fl({1, 2, 1}, {7, 8}), In({1}, {0})}).Run(), {2, 1}, {7, 8});
  ExpectI(OpCase("Shape", {x}).Run(), {2}, {2, 3});
  ExpectF(OpCase("Concat", {x, Fl({2, 1}, {9, 9})}).Attr("axis", {int64_t(1)}).Run(), {2, 4},
          {0, 1, 2, 9, 3, 4, 5, 9});
  // x[:, -2:] and x[:, ::-2]
  ExpectF(OpCase("Slice", {x, In({1}, {-2}), In({1}, {100}), In({1}, {1})}).Run(), {2, 2},
          {1, 2, 4, 5});
  ExpectF(OpCase("Slice", {x, In({1}, {-1}), In({1}, {-100}), In({1}, {1}), In({1}, {-2})}).Run(),
          {2, 2}, {2, 0, 5, 3});
  ExpectF(OpCase("Flatten", {Fl({2, 1, 2}, {1, 2, 3, 4})}).Attr("axis", {int64_t(2)}).Run(),
          {2, 2}, {1, 2, 3, 4});
  ExpectF(OpCase("Expand", {Fl({2, 1}, {1, 2}), In({3}, {1, 2, 2})}).Run(), {1, 2, 2},
          {1, 1, 2, 2});
  ExpectF(OpCase("ConstantOfShape", {In({2}, {1, 2})}).Attr("value", {Fl({1}, {0.5f})}).Run(),
          {1, 2}, {0.5f, 0.5f});
  ExpectI(OpCase("Range", {In({}, {1}), In({}, {7}), In({}, {2})}).Run(), {3}, {1, 3, 5});
}

TEST(RefOpsTest, Gather) {
  const HTensor table = Fl({3, 2}, {0, 1, 10, 11, 20, 21});
  ExpectF(OpCase("Gather", {table, In({2}, {2, -3})}).Run(), {2, 2}, {20, 21, 0, 1});
  ExpectF(OpCase("Gather", {table, In({}, {1})}).Attr("axis", {int64_t(1)}).Run(), {3},
          {1, 11, 21});
  try {
    OpCase("Gather", {table, In({1}, {3})}).Run();
    FAIL() << "out-of-range index accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 3 is out of range"), std::string::npos) << e.what();
  }
}

TEST(RefOpsTest, FusedDenseWithGeluAndResidual) {
  // x·W + b = [1*1+2*3 + 1, 1*2+2*4 - 1] = [8, 9]; gelu; + residual [1, 2].
  OpCase d("Dense", {Fl({1, 2}, {1, 2}), Fl({2, 2}, {1, 2, 3, 4}), Fl({2}, {1, -1}),
                     Fl({1, 2}, {1, 2})});
  d.Attr("epilogue", {std::string("gelu")});
  ExpectF(d.Run(), {1, 2}, {8 + 1, 9 + 2}, 1e-5f);  // gelu(8) ≈ 8, gelu(9) ≈ 9
}

TEST(RefOpsTest, ShapeErrorsNameTheNode) {
  try {
    OpCase("Add", {Fl({2}, {1, 2}), Fl({3}, {1, 2, 3})}).Run();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Add node 'Add_test'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hotline::engine
