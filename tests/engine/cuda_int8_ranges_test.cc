// The CPU half of INT8 plans for the CUDA backend (calib.cc RecordEncoderInt8Ranges): the plan
// keeps its fp32 graph and records, per encoder layer, the calibrated range of each GEMM input
// the CUDA encoder quantises, in the encoder's slot order (qkv, attention output, FFN1, FFN2).
// Checked on tiny_op17 (2 layers, hidden 64) without a GPU:
//   - minmax ranges equal max |x| over the real tokens of the same tensors computed by the
//     reference interpreter on the ONNX graph (independent of the packed executor), slot by slot;
//   - the slots follow the data flow (layer l's FFN1 reads what its attention-output GEMM
//     writes; layer l+1's QKV reads what layer l's FFN2 writes);
//   - percentile / kl honour the method (the record names it), the calibration cache is shared;
//   - keep lists the encoder cannot honour and builds without calibration are refused;
//   - the record reads back (EncoderInt8ActAmax), a malformed one is refused, cpu int8 plans
//     have none.
// The GPU half (the runner using these ranges) is tests/engine/cuda/backend_quant_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>

#include "base/error.h"
#include "engine/engine.h"
#include "engine/onnx_import.h"
#include "engine/passes.h"
#include "engine/plan.h"
#include "engine/quant.h"
#include "engine/quant_internal.h"
#include "engine/runtime.h"
#include "engine/test_util.h"

namespace hotline::engine {
namespace {


const std::string& Onnx() {
  static const std::string p = FixturePath("tiny_op17.onnx");
  return p;
}

BuildOptions Opts(CalibMethod m) {
  BuildOptions o;
  o.precision = Precision::kINT8;
  o.backend = BackendKind::kCUDA;  // what a cuda build passes; nothing here touches a GPU
  o.profile = Profile::Parse("1x1:4x16:16x32");
  o.tune = false;
  o.calib_method = m;
  o.calib_sequences = TinyFixtureSequences(40, 5);
  return o;
}

// The fused fp32 plan a cuda int8 build starts from (BuildPlanData's graph, built on the cpu
// backend here: the graph and its value names do not depend on the backend).
PlanData Fp32Plan() {
  BuildOptions o;
  o.profile = Profile::Parse("1x1:4x16:16x32");
  o.tune = false;
  return BuildPlanData(Onnx(), o);
}

int SlotOf(const std::string& role) {
  static const std::vector<std::string> roles = {"qkv", "attn_out", "ffn_in", "ffn_out"};
  return int(std::find(roles.begin(), roles.end(), role) - roles.begin());
}

std::vector<float> ActAmax(const PlanData& p) {
  std::vector<float> v;
  for (const auto& x : p.extra["int8"]["act_amax"]) v.push_back(x.get<float>());
  return v;
}

TEST(CudaInt8Ranges, MinMaxRangesAreTheReferenceMaximaInEncoderSlotOrder) {
  const BuildOptions o = Opts(CalibMethod::kMinMax);
  PlanData plan = Fp32Plan();
  const std::string fp = plan.extra["model_fingerprint"].get<std::string>();
  const size_t nodes = plan.graph.nodes.size(), inits = plan.graph.initializers.size();
  RecordEncoderInt8Ranges(&plan, fp, o);
  // The graph stays fp32: no rewrite, nothing dropped (the CUDA runner quantises itself).
  EXPECT_EQ(plan.graph.nodes.size(), nodes);
  EXPECT_EQ(plan.graph.initializers.size(), inits);
  for (const Node& n : plan.graph.nodes) EXPECT_EQ(n.s("quant", ""), "") << n.name;
  const auto& rec = plan.extra["int8"];
  EXPECT_EQ(rec["method"], "minmax");
  EXPECT_EQ(rec["target"], "cuda_encoder");
  EXPECT_EQ(rec["samples"], 40);
  EXPECT_EQ(rec["model_fingerprint"], fp);
  const std::vector<float> amax = ActAmax(plan);
  ASSERT_EQ(amax.size(), 8u);  // 2 layers x 4 GEMMs
  ASSERT_EQ(rec["gemms"].size(), 8u);

  // The slot order follows the data flow of the fused graph.
  const auto gemms = ListQuantizableGemms(Onnx());
  std::map<std::string, std::string> out_of;  // node -> its first output
  for (const Node& n : plan.graph.nodes) out_of[n.name] = n.outputs[0];
  std::vector<std::string> input(8), node(8);
  int heads = 0;
  for (const auto& g : gemms) {
    if (g.layer < 0) {
      ++heads;
      continue;
    }
    const int s = SlotOf(g.role);
    ASSERT_LT(s, 4) << g.role;
    input[size_t(g.layer) * 4 + s] = g.input;
    node[size_t(g.layer) * 4 + s] = g.node;
  }
  EXPECT_EQ(heads, 3);  // pooler, intent and slot heads: not the encoder's
  for (int l = 0; l < 2; ++l) {
    EXPECT_EQ(input[l * 4 + 2], out_of.at(node[l * 4 + 1])) << "layer " << l;
    if (l > 0) {
      EXPECT_EQ(input[l * 4 + 0], out_of.at(node[(l - 1) * 4 + 3])) << "layer " << l;
    }
    for (int s = 0; s < 4; ++s) {
      EXPECT_EQ(rec["gemms"][l * 4 + s]["input"], input[l * 4 + s]);
      EXPECT_EQ(rec["gemms"][l * 4 + s]["layer"], l);
    }
  }

  // Independent maxima: the reference interpreter over the imported ONNX graph, every value
  // kept, the calibration sequences padded to one batch; max |x| over real tokens only.
  Graph g = ImportOnnx(Onnx());
  FoldConstants(&g);
  const auto& seqs = o.calib_sequences;
  int S = 0;
  for (const auto& s : seqs) S = std::max(S, int(s.size()));
  const int B = int(seqs.size());
  std::map<std::string, HTensor> feeds;
  for (const auto& in : g.inputs) {
    std::vector<int64_t> v(size_t(B) * S, 0);
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < int(seqs[b].size()); ++t) {
        const InputRole r = RoleOf(in.name);
        v[size_t(b) * S + t] = r == InputRole::kIds ? seqs[b][t] : r == InputRole::kMask ? 1 : 0;
      }
    }
    feeds[in.name] = HTensor::Int({B, S}, v);
  }
  const auto all = RunReference(g, feeds, /*keep_all=*/true);
  for (size_t k = 0; k < 8; ++k) {
    const HTensor& x = all.at(input[k]);
    ASSERT_EQ(x.shape.size(), 3u) << input[k];
    const int64_t H = x.shape[2];
    float want = 0;
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < int(seqs[b].size()); ++t) {
        for (int64_t h = 0; h < H; ++h) {
          want = std::max(want, std::fabs(x.f[(size_t(b) * S + t) * H + h]));
        }
      }
    }
    std::printf("slot %zu (%s): amax %.5f, reference %.5f\n", k, input[k].c_str(), amax[k], want);
    EXPECT_NEAR(amax[k], want, 1e-4 * want + 1e-6) << "slot " << k << " " << input[k];
  }
}

TEST(CudaInt8Ranges, PercentileAndKlFollowTheMethodAndTheCacheIsShared) {
  PlanData base = Fp32Plan();
  const std::string fp = base.extra["model_fingerprint"].get<std::string>();
  PlanData mm = base, pc = base, kl = base;
  RecordEncoderInt8Ranges(&mm, fp, Opts(CalibMethod::kMinMax));
  const std::string cache = std::string(HOTLINE_BINARY_DIR) + "/cuda_int8_ranges_test_calib.json";
  std::remove(cache.c_str());
  BuildOptions po = Opts(CalibMethod::kPercentile);
  po.calib_percentile = 99.0;  // clips visibly on 40 short sequences
  po.calib_cache = cache;
  RecordEncoderInt8Ranges(&pc, fp, po);
  RecordEncoderInt8Ranges(&kl, fp, Opts(CalibMethod::kKL));
  EXPECT_EQ(pc.extra["int8"]["method"], "percentile");
  EXPECT_EQ(pc.extra["int8"]["percentile"], 99.0);
  EXPECT_EQ(kl.extra["int8"]["method"], "kl");
  const auto a = ActAmax(mm), p = ActAmax(pc), k = ActAmax(kl);
  ASSERT_EQ(p.size(), 8u);
  ASSERT_EQ(k.size(), 8u);
  int clipped = 0;
  for (size_t s = 0; s < 8; ++s) {
    // A histogram bin's upper edge may pass the maximum by one bin width (range / 2048).
    EXPECT_LE(p[s], a[s] * (1 + 1.0 / 1024)) << "slot " << s;
    EXPECT_LE(k[s], a[s] * (1 + 1.0 / 1024)) << "slot " << s;
    clipped += p[s] < 0.99f * a[s];
  }
  EXPECT_GE(clipped, 1);  // 99th percentile: some slot loses its outliers
  // The cache this wrote serves the next build without calibration data (and a cpu int8 build
  // of the same model could use it: same tensors, same fingerprint).
  ASSERT_TRUE(std::filesystem::exists(cache));
  BuildOptions again = po;
  again.calib_sequences.clear();
  PlanData pc2 = base;
  RecordEncoderInt8Ranges(&pc2, fp, again);
  EXPECT_EQ(ActAmax(pc2), p);
  // ... but not for another method.
  BuildOptions other = again;
  other.calib_method = CalibMethod::kMinMax;
  PlanData pc3 = base;
  EXPECT_THROW(RecordEncoderInt8Ranges(&pc3, fp, other), Error);
  std::remove(cache.c_str());
}

TEST(CudaInt8Ranges, KeepListsTheEncoderCannotHonourAndMissingCalibrationAreRefused) {
  const PlanData base = Fp32Plan();
  const std::string fp = base.extra["model_fingerprint"].get<std::string>();
  auto refusal = [&](const BuildOptions& o) -> std::string {
    PlanData p = base;
    try {
      RecordEncoderInt8Ranges(&p, fp, o);
    } catch (const Error& e) {
      EXPECT_FALSE(p.extra.contains("int8"));
      return e.what();
    }
    return "";
  };
  BuildOptions layer = Opts(CalibMethod::kMinMax);
  layer.keep_fp = {"layer:1"};
  std::string why = refusal(layer);
  EXPECT_NE(why.find("--keep-fp"), std::string::npos) << why;
  EXPECT_NE(why.find("--backend cpu"), std::string::npos) << why;
  BuildOptions emb = Opts(CalibMethod::kMinMax);
  emb.keep_fp = {"embeddings"};
  why = refusal(emb);
  EXPECT_NE(why.find("word embeddings"), std::string::npos) << why;
  // The heads and the pooler run in fp16 on the encoder anyway: keeping them is honoured.
  BuildOptions heads = Opts(CalibMethod::kMinMax);
  heads.keep_fp = {"heads"};
  EXPECT_EQ(refusal(heads), "");
  BuildOptions none = Opts(CalibMethod::kPercentile);
  none.calib_sequences.clear();
  why = refusal(none);
  EXPECT_NE(why.find("needs calibration"), std::string::npos) << why;
  EXPECT_NE(why.find("--calib"), std::string::npos) << why;
}

TEST(CudaInt8Ranges, TheRecordReadsBackThroughAPlanFileAndABadOneIsRefused) {
  PlanData plan = Fp32Plan();
  RecordEncoderInt8Ranges(&plan, plan.extra["model_fingerprint"].get<std::string>(),
                          Opts(CalibMethod::kMinMax));
  const std::string path = std::string(HOTLINE_BINARY_DIR) + "/cuda_int8_ranges_test.plan";
  WritePlan(plan, path);
  const PlanData back = ReadPlan(path, false);
  std::remove(path.c_str());
  EXPECT_EQ(EncoderInt8ActAmax(back), ActAmax(plan));
  EXPECT_TRUE(EncoderInt8ActAmax(Fp32Plan()).empty());  // no int8 record
  // A cpu int8 plan's record holds per-GEMM ranges in its graph, no act_amax.
  BuildOptions cpu = Opts(CalibMethod::kMinMax);
  cpu.backend = BackendKind::kCPU;
  EXPECT_TRUE(EncoderInt8ActAmax(BuildPlanData(Onnx(), cpu)).empty());
  for (const nlohmann::json& bad : {nlohmann::json(1.5), nlohmann::json::array({1.0, -2.0}),
                                    nlohmann::json::array({"x"}), nlohmann::json::array({0.0})}) {
    PlanData p = plan;
    p.extra["int8"]["act_amax"] = bad;
    EXPECT_THROW(EncoderInt8ActAmax(p), Error) << bad.dump();
  }
}

}  // namespace
}  // namespace hotline::engine
