// The plan builder: import → fold → shapes → canonicalise → fuse → verify → tune → PlanData.
#include <cmath>
#include <set>

#include "base/error.h"
#include "engine/fusion.h"
#include "engine/onnx_import.h"
#include "engine/passes.h"
#include "engine/qdq_build.h"
#include "engine/quant.h"
#include "engine/quant_internal.h"
#include "engine/runtime.h"

namespace hotline::engine {
namespace {

using json = nlohmann::json;

json Histogram(const Graph& g) {
  json h = json::object();
  for (const auto& [op, n] : g.OpHistogram()) h[op] = n;
  return h;
}

// Largest |a-b| / max(1e-6, max|b|) over the outputs of a packed run vs the reference.
double CompareWithReference(const Graph& original, const std::shared_ptr<Engine>& engine) {
  const int B = 3, S = 7;
  const std::vector<int> lengths{7, 4, 2};
  auto feeds = MakeProbeFeeds(original, B, S, lengths);
  const auto ref = RunReference(original, feeds);
  PackedBatch pb;
  pb.cu_seqlens.push_back(0);
  for (int r = 0; r < B; ++r) {
    for (int s = 0; s < lengths[r]; ++s) {
      for (const auto& [name, t] : feeds) {
        if (RoleOf(name) == InputRole::kIds) pb.input_ids.push_back(int32_t(t.i[r * S + s]));
        if (RoleOf(name) == InputRole::kTypes) pb.token_type_ids.push_back(int32_t(t.i[r * S + s]));
      }
    }
    pb.cu_seqlens.push_back(int32_t(pb.input_ids.size()));
  }
  auto ctx = engine->CreateContext();
  std::vector<Output> outs;
  ctx->Run(pb, &outs);
  double worst = 0;
  for (const Output& o : outs) {
    const HTensor& r = ref.at(o.name);
    int64_t inner = 1;
    for (size_t d = 1; d < o.shape.size(); ++d) inner *= o.shape[d];
    double maxref = 1e-6, maxdiff = 0;
    for (int b = 0; b < B; ++b) {
      const int rows = o.kind == Output::Kind::kPerToken ? lengths[b] : 1;
      for (int s = 0; s < rows; ++s) {
        const int64_t po = (o.kind == Output::Kind::kPerToken ? pb.cu_seqlens[b] + s : b) * inner;
        const int64_t pr = (o.kind == Output::Kind::kPerToken ? b * S + s : b) * inner;
        for (int64_t k = 0; k < inner; ++k) {
          maxref = std::max(maxref, std::fabs(double(r.f[pr + k])));
          maxdiff = std::max(maxdiff, std::fabs(double(o.data[po + k]) - r.f[pr + k]));
        }
      }
    }
    worst = std::max(worst, maxdiff / maxref);
  }
  return worst;
}

}  // namespace

PlanData BuildPlanData(const std::string& onnx_path, const BuildOptions& build_options) {
  // A QDQ model's own scales (and the GEMMs it left unquantised) override calibration (qdq.h).
  BuildOptions options = build_options;
  ApplyQdqScales(onnx_path, &options);
  auto backend = CreateBackend(options.backend, options.device);
  backend->UseTimingCache(options.timing_cache);
  backend->CheckPrecision(options.precision);
  Graph g = ImportOnnx(onnx_path);
  PlanData plan;
  plan.extra["source"] = {{"onnx", onnx_path}, {"producer", g.producer}, {"opset", g.opset}};
  // Ties calibration caches to the model (quant.h); cheap next to import and shape inference.
  const std::string model_fp = ModelFingerprint(g);
  plan.extra["model_fingerprint"] = model_fp;
  plan.extra["ops_imported"] = Histogram(g);
  FoldConstants(&g);
  EliminateDeadNodes(&g);
  ShapeInfo shapes = InferShapes(g);
  for (const auto& in : g.inputs) {
    if (shapes.dims.at(in.name) != std::vector<std::string>{"batch", "seq"}) {
      throw Error("graph input '" + in.name + "' is not [batch, seq]");
    }
  }
  // Shape-derived subgraphs (reshape targets, position ids, masks) read the shape of the inputs
  // instead of intermediate values, so the fusions see single-use chains.
  if (const int rewired = RewireShapes(&g, shapes); rewired > 0) {
    FoldConstants(&g);
    EliminateDeadNodes(&g);
    shapes = InferShapes(g);
    plan.extra["shapes_rewired"] = rewired;
  }
  // Outputs: per-token when they keep the sequence axis, else per-sequence.
  std::vector<OutputInfo> outputs;
  for (const auto& o : g.outputs) {
    const auto& d = shapes.dims.at(o.name);
    if (d.empty() || d[0] != "batch") {
      throw Error("graph output '" + o.name + "' does not lead with the batch axis");
    }
    OutputInfo oi;
    oi.name = o.name;
    oi.kind = d.size() > 1 && d[1] == "seq" ? Output::Kind::kPerToken : Output::Kind::kPerSequence;
    for (size_t k = oi.kind == Output::Kind::kPerToken ? 2 : 1; k < d.size(); ++k) {
      if (d[k].empty() || !std::isdigit(static_cast<unsigned char>(d[k][0]))) {
        throw Error("graph output '" + o.name + "' has a dynamic inner dimension '" + d[k] + "'");
      }
      oi.inner_shape.push_back(std::stoll(d[k]));
    }
    outputs.push_back(oi);
  }
  Graph fused = g;
  FusionReport report;
  Canonicalize(&fused, shapes, &report);
  plan.extra["ops_canonical"] = Histogram(fused);
  FuseEncoder(&fused, &shapes, &report);
  std::string why = PackedIncompatibility(fused, shapes);

  plan.info.format_version = kPlanFormatVersion;
  plan.info.fingerprint = backend->Fingerprint();
  plan.info.precision = options.precision;
  plan.info.backend = options.backend;
  plan.info.profile = options.profile;
  plan.info.outputs = outputs;
  for (const auto& in : g.inputs) plan.info.input_names.push_back(in.name);
  plan.dims = shapes.dims;

  if (why.empty()) {
    // Verify the fused graph against the reference interpreter on a padded probe batch (fp32).
    PlanData check = plan;
    check.mode = "packed";
    check.graph = fused;
    check.info.precision = Precision::kFP32;
    check.info.profile = Profile{1, 1, 3, 7, 3, 7};
    try {
      const double err = CompareWithReference(g, MakeEngine(std::move(check), false));
      plan.extra["fusion_check_rel_err"] = err;
      if (!(err <= 1e-3)) why = "fused graph disagrees with the reference (rel err " +
                                std::to_string(err) + ")";
    } catch (const Error& e) {
      why = std::string("fused graph failed its check: ") + e.what();
    }
  }
  for (const auto& n : report.notes) plan.extra["fusion_notes"].push_back(n);
  // A pattern that failed is the cause; the op the packed check stumbled on is its consequence.
  if (!why.empty() && !report.notes.empty()) why = report.notes.front() + " (so: " + why + ")";
  if (!why.empty() && options.precision == Precision::kINT8) {
    throw Error("int8 needs a packed (fused) plan, and this model does not fuse: " + why,
                Code::kUnimplemented);
  }
  if (!why.empty()) {
    // Generic path: the folded ONNX graph on padded batches, reference ops, fp32.
    plan.mode = "padded";
    plan.graph = std::move(g);
    plan.extra["padded_reason"] = why;
    for (const auto& n : plan.graph.nodes) plan.info.ops.push_back({n.name, n.op, "fp32"});
    return plan;
  }
  plan.mode = "packed";
  plan.graph = std::move(fused);
  // Every position a profile allows must have a position embedding.
  for (const auto& n : plan.graph.nodes) {
    if (n.op == "EmbedLayerNorm") {
      const int64_t max_pos = plan.graph.Const(n.inputs[3])->shape[0];
      if (options.profile.max_seq > max_pos) {
        throw Error("profile " + options.profile.ToString() + " allows sequences of " +
                    std::to_string(options.profile.max_seq) + " tokens but the model has " +
                    std::to_string(max_pos) + " position embeddings");
      }
    }
  }
  // INT8: calibration (or its cache / a given table) and the rewrite to s8 weights (calib.cc).
  // On cuda the whole-encoder runner quantises the weights itself: the plan keeps the fp32 graph
  // and records the activation ranges of the encoder's quantised GEMM inputs (calib.cc).
  const bool cuda_int8 =
      options.precision == Precision::kINT8 && options.backend == BackendKind::kCUDA;
  std::set<std::string> encoder_int8;  // cuda int8: the GEMMs the encoder runs in INT8
  if (cuda_int8) {
    RecordEncoderInt8Ranges(&plan, model_fp, options);
    for (const auto& q : plan.extra["int8"]["gemms"]) {
      encoder_int8.insert(q["node"].get<std::string>());
    }
  } else if (options.precision == Precision::kINT8) {
    QuantizePlanInt8(&plan, model_fp, options);
  }
  auto gemm_precision = [&](const Node& n) {
    if (n.s("quant", "") == "int8") return Precision::kINT8;
    // cuda int8: the heads and the pooler run in the encoder's fp16.
    if (cuda_int8) return encoder_int8.count(n.name) ? Precision::kINT8 : Precision::kFP16;
    return options.precision == Precision::kINT8 ? Precision::kFP32 : options.precision;
  };
  // Tuning: per GEMM shape bucket (M at the profile's opt point, K, N), time every tactic.
  json tuning = json::array();
  std::map<std::tuple<int, int, int, int>, int> chosen;
  const int M = options.profile.opt_batch * options.profile.opt_seq;
  for (auto& n : plan.graph.nodes) {
    if (n.op != "Dense" && n.op != "DenseLayerNorm") continue;
    const Precision gp = gemm_precision(n);
    const HTensor* w = plan.graph.Const(n.inputs[1]);
    const bool s8 = n.s("quant", "") == "int8";  // rewritten: s8 blob, logical shape in attrs
    const int K = s8 ? int(n.i("K", 0)) : int(w->shape[0]);
    const int N = s8 ? int(n.i("N", 0)) : int(w->shape[1]);
    const bool per_token = plan.dims.count(n.outputs[0]) && plan.dims.at(n.outputs[0]).size() > 1 &&
                           plan.dims.at(n.outputs[0])[1] == "seq";
    const int rows = per_token ? M : options.profile.opt_batch;
    const auto key = std::make_tuple(rows, K, N, int(gp));
    if (!chosen.count(key)) {
      int best = 0;
      if (options.tune) {
        double best_ms = 1e30;
        json times = json::object();
        for (int t : backend->GemmTactics(gp)) {
          const double ms = backend->TimeGemm(t, rows, K, N, gp);
          times[backend->TacticName(t)] = ms;
          if (ms < best_ms) {
            best_ms = ms;
            best = t;
          }
        }
        tuning.push_back({{"M", rows}, {"K", K}, {"N", N}, {"precision", PrecisionName(gp)},
                          {"ms", times},
                          {"chosen", backend->TacticName(best)}});
      }
      chosen[key] = best;
    }
    n.attrs["tactic"] = Attr{int64_t(chosen[key])};
  }
  plan.extra["tuning"] = tuning;
  plan.extra["ops_fused"] = Histogram(plan.graph);
  // Op precisions as the engine will prepare them.
  for (const auto& n : plan.graph.nodes) {
    const bool gemm = n.op == "Dense" || n.op == "DenseLayerNorm";
    plan.info.ops.push_back({n.name, n.op,
                             gemm ? std::string(PrecisionName(gemm_precision(n))) : "fp32"});
  }
  return plan;
}

}  // namespace hotline::engine
