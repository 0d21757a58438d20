// The CUDA backend under the engine, on a GPU: plans of the tiny ONNX fixtures built for backend
// cuda against the CPU backend's FP32 outputs on packed batches of random lengths 1..max:
// - FP32 through the whole-encoder runner and node by node (normalised error 1e-5);
// - FP16 / BF16 through the runner (1e-2 / 4e-2, same intent where the CPU's margin is clear);
// - plans carry the GPU fingerprint and the tuned GEMM choices; a doctored fingerprint is
//   refused naming both; a rebuild with a timing cache times nothing new;
// - empty token types (all zero) on both paths; device lists (several GPUs when present).
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "base/error.h"
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

std::string Temp(const std::string& what) {
  return "/tmp/hotline_cuda_backend_test_" + std::to_string(::getpid()) + "_" + what;
}

BuildOptions Opts(BackendKind b, Precision p) {
  BuildOptions o;
  o.backend = b;
  o.precision = p;
  o.profile = Profile::Parse("1x1:4x16:8x64");
  o.threads = 2;
  return o;
}

PackedBatch RandomBatch(std::mt19937_64& rng, bool types) {
  PackedBatch b;
  b.cu_seqlens = cuda::test::RandomCu(rng, 1 + int(rng() % 8), 1 + int(rng() % 64));
  for (int t = 0; t < b.cu_seqlens.back(); ++t) {
    b.input_ids.push_back(int32_t(100 + rng() % 50));  // inside every fixture's vocabulary
    if (types) b.token_type_ids.push_back(int32_t(rng() % 2));
  }
  return b;
}

// Runs `n` random batches through both engines; returns the worst normalised error and checks
// the intent argmax where the reference's top-2 margin exceeds `margin`.
double Compare(Engine& ref, Engine& got, uint64_t seed, int n, bool types, double margin) {
  std::mt19937_64 rng(seed);
  auto rc = ref.CreateContext();
  auto gc = got.CreateContext();
  double worst = 0;
  for (int rep = 0; rep < n; ++rep) {
    const PackedBatch b = RandomBatch(rng, types);
    std::vector<Output> oref, ogot;
    rc->Run(b, &oref);
    gc->Run(b, &ogot);
    EXPECT_EQ(oref.size(), ogot.size());
    for (size_t k = 0; k < oref.size() && k < ogot.size(); ++k) {
      EXPECT_EQ(oref[k].name, ogot[k].name);
      EXPECT_EQ(oref[k].shape, ogot[k].shape) << oref[k].name;
      worst = std::max(worst, cuda::ref::RelErr(ogot[k].data, oref[k].data));
      if (oref[k].name != "intent_logits") continue;
      const int B = int(oref[k].shape[0]), C = int(oref[k].shape[1]);
      for (int r = 0; r < B; ++r) {
        std::vector<float> row(oref[k].data.begin() + r * C, oref[k].data.begin() + (r + 1) * C);
        std::vector<float> s = row;
        std::sort(s.begin(), s.end());
        if (s[C - 1] - s[C - 2] < margin) continue;  // a near-tie: either answer is right
        EXPECT_EQ(cuda::ref::Argmax(ogot[k].data.data() + r * C, C),
                  cuda::ref::Argmax(row.data(), C)) << "sequence " << r;
      }
    }
  }
  return worst;
}

const char* kFixtures[] = {"tiny_op14.onnx", "tiny_op17.onnx", "tiny_hf17.onnx"};

TEST(CudaBackend, Fp32PlansMatchTheCpuBackend) {
  for (const char* name : kFixtures) {
    SCOPED_TRACE(name);
    auto cpu = Engine::BuildFromOnnx(Fixture(name), Opts(BackendKind::kCPU, Precision::kFP32));
    auto gpu = Engine::BuildFromOnnx(Fixture(name), Opts(BackendKind::kCUDA, Precision::kFP32));
    EXPECT_EQ(gpu->info().fingerprint.at("backend"), "cuda");
    EXPECT_LE(Compare(*cpu, *gpu, cuda::test::Seed() + 21, 3, true, 1e-3), 1e-5);
  }
}

TEST(CudaBackend, Fp32NodeByNodeMatchesTheCpuBackend) {
  for (const char* name : kFixtures) {
    SCOPED_TRACE(name);
    auto cpu = Engine::BuildFromOnnx(Fixture(name), Opts(BackendKind::kCPU, Precision::kFP32));
    EngineOptions eo;
    eo.graph_runners = false;
    auto gpu = MakeEngine(BuildPlanData(Fixture(name), Opts(BackendKind::kCUDA, Precision::kFP32)),
                          eo);
    EXPECT_LE(Compare(*cpu, *gpu, cuda::test::Seed() + 22, 3, true, 1e-3), 1e-5);
    // Bug 4 of cuda-to-engine.md: no token types means zeros, copied to the device.
    EXPECT_LE(Compare(*cpu, *gpu, cuda::test::Seed() + 23, 2, false, 1e-3), 1e-5);
  }
}

TEST(CudaBackend, Fp16AndBf16PlansRunAsOneEncoder) {
  for (const char* name : {"tiny_op14.onnx", "tiny_op17.onnx"}) {
    SCOPED_TRACE(name);
    auto cpu = Engine::BuildFromOnnx(Fixture(name), Opts(BackendKind::kCPU, Precision::kFP32));
    for (Precision p : {Precision::kFP16, Precision::kBF16}) {
      SCOPED_TRACE(std::string(PrecisionName(p)));
      auto gpu = Engine::BuildFromOnnx(Fixture(name), Opts(BackendKind::kCUDA, p));
      EXPECT_EQ(gpu->info().precision, p);
      const double tol = p == Precision::kFP16 ? 1e-2 : 4e-2;
      EXPECT_LE(Compare(*cpu, *gpu, cuda::test::Seed() + 24, 4, true, 0.05), tol);
      EXPECT_LE(Compare(*cpu, *gpu, cuda::test::Seed() + 25, 2, false, 0.05), tol);
    }
  }
}

TEST(CudaBackend, Fp16GraphThatIsNotTheEncoderIsRefusedNamingWhy) {
  PlanData p =
      BuildPlanData(Fixture("tiny_op17.onnx"), Opts(BackendKind::kCUDA, Precision::kFP16));
  for (auto& n : p.graph.nodes) {
    if (n.op == "Dense" && n.s("epilogue", "none") == "gelu") {
      n.attrs["epilogue"] = Attr{std::string("tanh")};
    }
  }
  try {
    MakeEngine(std::move(p), true);
    FAIL() << "expected a throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("only as a whole BERT encoder"), std::string::npos) << msg;
    EXPECT_NE(msg.find("has no gelu epilogue"), std::string::npos) << msg;
    EXPECT_EQ(e.code(), Code::kUnimplemented);
  }
}

TEST(CudaBackend, PlansCarryFingerprintAndTuningAndRefuseAnotherGpu) {
  const std::string plan = Temp("fp16.plan"), cache = Temp("timing.cache");
  std::remove(cache.c_str());
  BuildOptions o = Opts(BackendKind::kCUDA, Precision::kFP16);
  o.timing_cache = cache;
  BuildPlanFile(Fixture("tiny_op17.onnx"), o, plan);
  PlanData pd = ReadPlan(plan, true);
  cudaDeviceProp props{};
  ASSERT_EQ(cudaGetDeviceProperties(&props, 0), cudaSuccess);
  EXPECT_EQ(pd.info.fingerprint.at("gpu"), props.name);
  EXPECT_EQ(pd.info.fingerprint.at("sm"), std::to_string(props.major * 10 + props.minor));
  for (const char* k : {"cuda", "cublaslt"}) EXPECT_FALSE(pd.info.fingerprint.at(k).empty()) << k;
  ASSERT_TRUE(pd.extra.contains("gemm_tuning"));
  const std::string rec = pd.extra["gemm_tuning"].get<std::string>();
  EXPECT_EQ(rec.rfind("hotline-gemm-cache", 0), 0u) << rec.substr(0, 80);
  EXPECT_NE(rec.find(" fp16 "), std::string::npos);

  // The loaded plan agrees with an in-memory build (shapes outside the record are tuned anew,
  // so FP16 rounding may differ).
  auto built = Engine::BuildFromOnnx(Fixture("tiny_op17.onnx"), o);
  auto loaded = Engine::Load(plan);
  EXPECT_LE(Compare(*built, *loaded, cuda::test::Seed() + 26, 2, true, 0.05), 1e-2);

  // The timing cache holds the tuned shapes; a rebuild with it times nothing new.
  auto lines = [&] {
    std::ifstream f(cache);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  const std::string first = lines();
  EXPECT_EQ(first.rfind("hotline-gemm-cache", 0), 0u);
  EXPECT_GT(std::count(first.begin(), first.end(), '\n'), 5);
  BuildPlanFile(Fixture("tiny_op17.onnx"), o, plan);
  const std::string second = lines();
  EXPECT_EQ(std::count(second.begin(), second.end(), '\n'),
            std::count(first.begin(), first.end(), '\n'));

  // A doctored plan "from another GPU" is refused, naming both.
  pd.info.fingerprint["gpu"] = "NVIDIA A10";
  WritePlan(pd, plan);
  try {
    Engine::Load(plan);
    FAIL() << "expected a throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("built for gpu NVIDIA A10 but this machine has gpu " +
                       std::string(props.name)), std::string::npos) << msg;
    EXPECT_EQ(e.code(), Code::kFailedPrecondition);
  }
  std::remove(plan.c_str());
  std::remove(cache.c_str());
}

TEST(CudaBackend, DevicesFromConfiguration) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  const std::string plan = Temp("dev.plan");
  BuildPlanFile(Fixture("tiny_op17.onnx"), Opts(BackendKind::kCUDA, Precision::kFP16), plan);
  try {
    Engine::Load(plan, {0, count});
    FAIL() << "expected a throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("device " + std::to_string(count) + " does not exist"),
              std::string::npos) << e.what();
  }
  auto cpu = Engine::BuildFromOnnx(Fixture("tiny_op17.onnx"),
                                   Opts(BackendKind::kCPU, Precision::kFP32));
  std::vector<int> devs;
  for (int d = 0; d < std::min(count, 4); ++d) devs.push_back(d);
  auto multi = Engine::Load(plan, devs);
  // Contexts are dealt out over the devices; each must give the CPU's answer.
  for (size_t k = 0; k < devs.size() * 2; ++k) {
    EXPECT_LE(Compare(*cpu, *multi, cuda::test::Seed() + 27 + k, 1, true, 0.05), 1e-2) << k;
  }
  std::remove(plan.c_str());
}

}  // namespace
}  // namespace hotline::engine
