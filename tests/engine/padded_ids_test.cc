// RunPadded (the path of `hotline infer`) checks 64-bit token ids before narrowing them to int32:
// 2^32 + 5 used to run as token 5 (issue 23).
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>

#include "base/error.h"
#include "engine/engine.h"
#include "engine/test_util.h"

namespace hotline::engine {
namespace {

std::map<std::string, Tensor> Ids(std::vector<int64_t> ids) {
  Tensor t;
  t.dtype = Tensor::DType::kI64;
  t.shape = {1, int64_t(ids.size())};
  t.i64 = std::move(ids);
  return {{"input_ids", t}};
}

TEST(PaddedIds, IdsPastInt32AreRefusedNotTruncated) {
  BuildOptions o;
  o.profile = Profile::Parse("1x1:2x8:4x16");
  o.tune = false;
  auto e = Engine::BuildFromOnnx(FixturePath("tiny_op17.onnx"), o);
  auto ctx = e->CreateContext();
  const auto good = ctx->RunPadded(Ids({1, 5, 2}));  // token 5 itself is valid
  EXPECT_FALSE(good.empty());
  for (int64_t bad : {(int64_t(1) << 32) + 5, -(int64_t(1) << 32) + 5, int64_t(300)}) {
    try {
      ctx->RunPadded(Ids({1, bad, 2}));
      ADD_FAILURE() << "token id " << bad << " was accepted";
    } catch (const Error& err) {
      const std::string m = err.what();
      EXPECT_NE(m.find("input_ids[0][1] = " + std::to_string(bad)), std::string::npos) << m;
      EXPECT_NE(m.find("outside the vocabulary [0, 300)"), std::string::npos) << m;
    }
  }
}

}  // namespace
}  // namespace hotline::engine
