// FP8 plans on the CUDA backend (encoder_quant.h through backend_cuda.cc): a tiny ONNX fixture
// built at fp8 for backend cuda runs as one quantised encoder; its activation scales are
// recorded in the plan (gemm_tuning's "hotline-quant-scales fp8" line) and a load uses them
// (a doctored record changes the answers; two loads agree); outputs stay within FP8's
// quantisation error of the
// CPU backend's FP32 (normalised error <= 0.15: E4M3 rounds each GEMM operand by up to 2^-4, see
// encoder_quant_test.cc); int8 plans on cuda are refused naming fp8. Skips loudly without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <random>

#include "base/error.h"
#include "engine/cuda/encoder_quant.h"
#include "engine/engine.h"
#include "engine/plan.h"
#include "engine/runtime.h"
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

// Worst normalised error over every output of `n` random packed batches.
double Worst(Engine& ref, Engine& got, uint64_t seed, int n, std::vector<float>* first = nullptr) {
  std::mt19937_64 rng(seed);
  auto rc = ref.CreateContext();
  auto gc = got.CreateContext();
  double worst = 0;
  for (int rep = 0; rep < n; ++rep) {
    PackedBatch b;
    b.cu_seqlens = cuda::test::RandomCu(rng, 1 + int(rng() % 8), 1 + int(rng() % 64));
    for (int t = 0; t < b.cu_seqlens.back(); ++t) {
      b.input_ids.push_back(int32_t(100 + rng() % 50));  // inside every fixture's vocabulary
      b.token_type_ids.push_back(int32_t(rng() % 2));
    }
    std::vector<Output> oref, ogot;
    rc->Run(b, &oref);
    gc->Run(b, &ogot);
    EXPECT_EQ(oref.size(), ogot.size());
    for (size_t k = 0; k < oref.size() && k < ogot.size(); ++k) {
      EXPECT_EQ(oref[k].shape, ogot[k].shape) << oref[k].name;
      worst = std::max(worst, cuda::ref::RelErr(ogot[k].data, oref[k].data));
      if (first && rep == 0) first->insert(first->end(), ogot[k].data.begin(), ogot[k].data.end());
    }
  }
  return worst;
}

TEST(CudaBackendQuant, Fp8PlanRecordsItsScalesAndStaysWithinQuantisationError) {
  if (!cuda::test::HaveGpu("fp8 plan")) GTEST_SKIP() << "no CUDA device: fp8 plans not tested";
  const std::string plan = "/tmp/hotline_cuda_backend_quant_test_" + std::to_string(::getpid()) +
                           "_fp8.plan";
  const BuildOptions o = Opts(BackendKind::kCUDA, Precision::kFP8);
  if (!cuda::QuantTypeSupported(cuda::QuantType::kFp8E4M3)) {
    EXPECT_THROW(BuildPlanFile(Fixture("tiny_op17.onnx"), o, plan), Error);
    std::printf("fp8 not supported on this GPU: refusal checked\n");
    return;
  }
  BuildPlanFile(Fixture("tiny_op17.onnx"), o, plan);
  PlanData pd = ReadPlan(plan, true);
  EXPECT_EQ(pd.info.precision, Precision::kFP8);
  ASSERT_TRUE(pd.extra.contains("gemm_tuning"));
  const std::string rec = pd.extra["gemm_tuning"].get<std::string>();
  EXPECT_NE(rec.find("hotline-quant-scales fp8 "), std::string::npos) << rec.substr(0, 200);
  ASSERT_TRUE(pd.extra.contains("graph_runner"));
  std::printf("%s\n", pd.extra["graph_runner"].get<std::string>().c_str());
  // The plan records the FP8 weight scaling it was built with: per channel, the default.
  cuda::WeightScaling sc = cuda::WeightScaling::kPerTensor;
  EXPECT_TRUE(cuda::ParseFp8WeightScalingLine(rec, &sc)) << rec.substr(0, 300);
  EXPECT_EQ(sc, cuda::WeightScaling::kPerChannel);
  EXPECT_NE(pd.extra["graph_runner"].get<std::string>().find("fp8 weights per_channel"),
            std::string::npos);

  auto cpu = Engine::BuildFromOnnx(Fixture("tiny_op17.onnx"),
                                   Opts(BackendKind::kCPU, Precision::kFP32));
  auto a = Engine::Load(plan);
  auto b = Engine::Load(plan);
  std::vector<float> out_a, out_b;
  const double ea = Worst(*cpu, *a, cuda::test::Seed() + 51, 4, &out_a);
  const double eb = Worst(*cpu, *b, cuda::test::Seed() + 51, 1, &out_b);
  std::printf("fp8 plan vs cpu fp32: normalised error %.4f\n", ea);
  EXPECT_LE(ea, 0.15);
  EXPECT_LE(eb, 0.15);
  // Same scales: the loads differ at most by GEMM algorithms tuned anew (FP16 rounding).
  EXPECT_LE(cuda::ref::RelErr(out_b, out_a), 1e-2);

  // The load takes the plan's scales: divided by 1000, nearly every activation saturates.
  const int layers = 2;  // tiny_op17
  std::vector<float> scales;
  ASSERT_TRUE(cuda::ParseQuantScalesLine(rec, cuda::EncoderQuant::kFp8,
                                         layers * cuda::kQuantGemmsPerLayer, &scales));
  const std::string line = cuda::QuantScalesLine(cuda::EncoderQuant::kFp8, scales);
  for (auto& v : scales) v /= 1000.f;
  std::string doctored = rec;
  doctored.replace(doctored.find(line), line.size(),
                   cuda::QuantScalesLine(cuda::EncoderQuant::kFp8, scales));
  pd.extra["gemm_tuning"] = doctored;
  WritePlan(pd, plan);
  auto c = Engine::Load(plan);
  const double ec = Worst(*cpu, *c, cuda::test::Seed() + 51, 1);
  std::printf("fp8 plan with scales / 1000: normalised error %.4f\n", ec);
  EXPECT_GT(ec, 0.3);
  std::remove(plan.c_str());
}

TEST(CudaBackendQuant, Int8PlansOnCudaAreRefusedNamingFp8) {
  if (!cuda::test::HaveGpu("fp8 plan")) GTEST_SKIP() << "no CUDA device: fp8 plans not tested";
  try {
    Engine::BuildFromOnnx(Fixture("tiny_op17.onnx"), Opts(BackendKind::kCUDA, Precision::kINT8));
    FAIL() << "expected a throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fp8"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hotline::engine
