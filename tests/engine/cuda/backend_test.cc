// The CUDA Backend under the plan executor: FP32 plans of the tiny ONNX fixtures built for
// backend cuda must give the CPU backend's outputs (normalised error 1e-5) on packed batches of
// random lengths 1..max; FP16 plans are refused with a clear error (they go through CudaEncoder).
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "base/error.h"
#include "engine/engine.h"
#include "tests/engine/cuda/reference.h"
#include "tests/engine/cuda/test_util.h"

namespace hotline::engine {
namespace {

std::string Fixture(const std::string& name) {
  const char* env = std::getenv("HOTLINE_SOURCE_DIR");  // the GPU machine's checkout
  return std::string(env ? env : HOTLINE_SOURCE_DIR) + "/tests/fixtures/engine/" + name;
}

BuildOptions Opts(BackendKind b, Precision p) {
  BuildOptions o;
  o.backend = b;
  o.precision = p;
  o.profile = Profile::Parse("1x1:4x16:8x64");
  o.threads = 2;
  return o;
}

TEST(CudaBackend, Fp32PlansMatchTheCpuBackend) {
  std::mt19937_64 rng(cuda::test::Seed() + 21);
  for (const char* name : {"tiny_op14.onnx", "tiny_op17.onnx", "tiny_hf17.onnx"}) {
    SCOPED_TRACE(name);
    auto cpu = Engine::BuildFromOnnx(Fixture(name), Opts(BackendKind::kCPU, Precision::kFP32));
    auto gpu = Engine::BuildFromOnnx(Fixture(name), Opts(BackendKind::kCUDA, Precision::kFP32));
    EXPECT_EQ(gpu->info().fingerprint.at("backend"), "cuda");
    auto cctx = cpu->CreateContext();
    auto gctx = gpu->CreateContext();
    for (int rep = 0; rep < 3; ++rep) {
      PackedBatch b;
      b.cu_seqlens = cuda::test::RandomCu(rng, 1 + int(rng() % 8), 1 + int(rng() % 64));
      for (int t = 0; t < b.cu_seqlens.back(); ++t) {
        b.input_ids.push_back(int32_t(100 + rng() % 50));  // inside every fixture's vocabulary
        b.token_type_ids.push_back(0);
      }
      std::vector<Output> oc, og;
      cctx->Run(b, &oc);
      gctx->Run(b, &og);
      ASSERT_EQ(oc.size(), og.size());
      for (size_t k = 0; k < oc.size(); ++k) {
        EXPECT_EQ(oc[k].shape, og[k].shape) << oc[k].name;
        EXPECT_LE(cuda::ref::RelErr(og[k].data, oc[k].data), 1e-5) << oc[k].name;
      }
    }
  }
}

TEST(CudaBackend, Fp16PlansAreRefusedWithAClearError) {
  try {
    Engine::BuildFromOnnx(Fixture("tiny_op17.onnx"), Opts(BackendKind::kCUDA, Precision::kFP16));
    FAIL() << "expected a throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hotline::engine
