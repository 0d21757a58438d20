// BF16 plans store their GEMM weights and word table as bf16 (plan.h, format version 2): about
// half the bytes of the FP32 plan, every stored value the round-to-nearest-even bf16 of the FP32
// plan's value, and the loaded plan computes what the in-memory BF16 build computes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "engine/engine.h"
#include "engine/plan.h"
#include "engine/test_util.h"

namespace hotline::engine {
namespace {

namespace fs = std::filesystem;

BuildOptions Opts(Precision p) {
  BuildOptions o;
  o.profile = Profile::Parse("1x1:2x8:4x16");
  o.tune = false;
  o.precision = p;
  return o;
}

// bf16 round-to-nearest-even by value (not by bit tricks): the two bf16 neighbours of x are x
// with its mantissa cut to 7 bits, and that plus one unit in the 8th bit; take the nearer, the
// even one on a tie.
float RoundBf16ByValue(float x) {
  if (x == 0.f || !std::isfinite(x)) return x;
  int e;
  const double m = std::frexp(double(x), &e);           // |m| in [0.5, 1)
  const double scaled = std::ldexp(m, 8);                // 8 significant bits
  const double lo = std::trunc(scaled), hi = lo + (scaled > 0 ? 1 : -1);
  const double dlo = std::fabs(scaled - lo), dhi = std::fabs(hi - scaled);
  double pick = dlo < dhi ? lo : dhi < dlo ? hi : (std::fmod(std::fabs(lo), 2.0) == 0 ? lo : hi);
  return float(std::ldexp(pick, e - 8));
}

TEST(PlanBf16Test, StoresGemmWeightsAndWordTableAsBf16) {
  const fs::path dir =
      fs::temp_directory_path() / ("hotline_bf16_plan_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string onnx = FixturePath("tiny_op17.onnx");
  const std::string f32 = (dir / "f32.plan").string(), b16 = (dir / "b16.plan").string();
  BuildPlanFile(onnx, Opts(Precision::kFP32), f32);
  BuildPlanFile(onnx, Opts(Precision::kBF16), b16);
  const PlanData pf = ReadPlan(f32, true), pb = ReadPlan(b16, true);
  EXPECT_EQ(pb.info.format_version, 2u);
  // Every float initializer that is not a LayerNorm/bias vector is a GEMM weight or a table.
  EXPECT_LT(double(pb.info.weight_bytes), 0.6 * double(pf.info.weight_bytes));
  EXPECT_LT(double(fs::file_size(b16)), 0.65 * double(fs::file_size(f32)));
  int rounded = 0, exact = 0;
  for (const Node& n : pb.graph.nodes) {
    int k = -1;
    if (n.op == "Dense" || n.op == "DenseLayerNorm") k = 1;
    if (n.op == "EmbedLayerNorm") k = 2;
    if (k < 0) continue;
    const HTensor& b = pb.graph.initializers.at(n.inputs[k]);
    const HTensor& f = pf.graph.initializers.at(n.inputs[k]);
    ASSERT_EQ(b.f.size(), f.f.size()) << n.inputs[k];
    for (size_t e = 0; e < b.f.size(); ++e) {
      ASSERT_EQ(b.f[e], RoundBf16ByValue(f.f[e])) << n.inputs[k] << "[" << e << "] " << f.f[e];
      rounded += b.f[e] != f.f[e];
    }
  }
  EXPECT_GT(rounded, 0);  // random fp32 weights are rarely bf16 already
  // Biases and LayerNorm parameters keep float32.
  for (const Node& n : pb.graph.nodes) {
    if (n.op != "DenseLayerNorm" && n.op != "LayerNorm") continue;
    const std::string& gamma = n.inputs[n.op == "LayerNorm" ? 1 : 4];
    EXPECT_EQ(pb.graph.initializers.at(gamma).f, pf.graph.initializers.at(gamma).f);
    ++exact;
  }
  EXPECT_GT(exact, 0);

  // The loaded BF16 plan runs close to FP32 (bf16 weights: ~2^-9 relative each).
  auto eb = Engine::Load(b16), ef = Engine::Load(f32);
  PackedBatch batch{{1, 5, 6, 2, 1, 7, 2, 9, 3}, {}, {0, 4, 9}};
  std::vector<Output> ob, of;
  eb->CreateContext()->Run(batch, &ob);
  ef->CreateContext()->Run(batch, &of);
  ASSERT_EQ(ob.size(), of.size());
  for (size_t o = 0; o < ob.size(); ++o) {
    double maxref = 1e-6, maxdiff = 0;
    for (size_t e = 0; e < of[o].data.size(); ++e) {
      maxref = std::max(maxref, std::fabs(double(of[o].data[e])));
      maxdiff = std::max(maxdiff, std::fabs(double(ob[o].data[e]) - of[o].data[e]));
    }
    EXPECT_LT(maxdiff / maxref, 3e-2) << of[o].name;
    EXPECT_GT(maxdiff, 0.0) << of[o].name;  // bf16 changed something: not silently fp32
  }
  // Rewriting a loaded BF16 plan is stable (its values are bf16 already).
  WritePlan(ReadPlan(b16, true), (dir / "again.plan").string());
  EXPECT_EQ(fs::file_size(dir / "again.plan"), fs::file_size(b16));
  // An unknown storage tag is refused with a clear error.
  std::string bytes;
  {
    std::ifstream in(b16, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string tag = "\"storage\":\"bf16\"";
  const size_t at = bytes.find(tag);
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, tag.size(), "\"storage\":\"fp8x\"");
  {
    std::ofstream out((dir / "bad.plan").string(), std::ios::binary);
    out << bytes;
  }
  try {
    Engine::Load((dir / "bad.plan").string());
    ADD_FAILURE() << "a plan with storage fp8x loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown storage 'fp8x'"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hotline::engine
