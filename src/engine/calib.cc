// INT8 builds: calibration passes over the packed fp32 plan, the INT8 rewrite of a plan, the list
// of quantisable GEMMs and per-GEMM sensitivity (quant.h, quant_internal.h).
//
// Calibration runs the fp32 plan with every GEMM input added as an extra plan output, so the
// executor itself produces the activations (no second interpreter) and per-token values arrive
// padding-free: the histograms see real tokens only.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <set>

#include "base/error.h"
#include "engine/cpu/kernels.h"
#include "engine/quant_internal.h"
#include "engine/runtime.h"

namespace hotline::engine {
namespace {
void RequirePackedPlan(const PlanData& plan) {
  if (plan.mode != "packed") {
    throw Error("int8 needs a packed (fused) plan; this model runs on the padded path (" +
                    plan.extra.value("padded_reason", std::string("?")) + ")",
                Code::kUnimplemented);
  }
}


using json = nlohmann::json;

bool IsGemm(const Node& n) { return n.op == "Dense" || n.op == "DenseLayerNorm"; }

bool TokenRows(const PlanData& p, const std::string& v) {
  auto it = p.dims.find(v);
  return it != p.dims.end() && it->second.size() > 1 && it->second[1] == "seq";
}

// Batches of at most `batch` sequences, packed.
std::vector<PackedBatch> Pack(const std::vector<std::vector<int32_t>>& seqs, int batch) {
  std::vector<PackedBatch> out;
  for (size_t s = 0; s < seqs.size(); s += size_t(batch)) {
    PackedBatch pb;
    pb.cu_seqlens.push_back(0);
    for (size_t k = s; k < std::min(seqs.size(), s + size_t(batch)); ++k) {
      if (seqs[k].empty()) throw Error("calibration/probe sequence " + std::to_string(k) +
                                       " is empty");
      pb.input_ids.insert(pb.input_ids.end(), seqs[k].begin(), seqs[k].end());
      pb.cu_seqlens.push_back(int32_t(pb.input_ids.size()));
    }
    out.push_back(std::move(pb));
  }
  return out;
}

constexpr int kRunBatch = 16;

// Sets a profile that admits every batch of `seqs` in kRunBatch-sized chunks.
void FitProfile(PlanData* p, const std::vector<std::vector<int32_t>>& seqs) {
  int longest = 1;
  for (const auto& s : seqs) longest = std::max(longest, int(s.size()));
  for (const Node& n : p->graph.nodes) {
    if (n.op != "EmbedLayerNorm") continue;
    const int64_t max_pos = p->graph.Const(n.inputs[3])->shape[0];
    if (longest > max_pos) {
      throw Error("a calibration/probe sequence has " + std::to_string(longest) +
                  " tokens, the model has " + std::to_string(max_pos) + " positions");
    }
  }
  const int b = std::max(1, std::min(kRunBatch, int(seqs.size())));
  p->info.profile = Profile{1, 1, b, longest, b, longest};
}

// Outputs of a plan over all sequences, concatenated per output (in plan output order).
std::vector<Output> RunAll(PlanData plan, const std::vector<std::vector<int32_t>>& seqs) {
  FitProfile(&plan, seqs);
  auto engine = MakeEngine(std::move(plan), false);
  auto ctx = engine->CreateContext();
  std::vector<Output> all, outs;
  for (const PackedBatch& pb : Pack(seqs, kRunBatch)) {
    ctx->Run(pb, &outs);
    if (all.empty()) {
      all = outs;
      continue;
    }
    for (size_t k = 0; k < outs.size(); ++k) {
      all[k].data.insert(all[k].data.end(), outs[k].data.begin(), outs[k].data.end());
      all[k].shape[0] += outs[k].shape[0];
    }
  }
  return all;
}

}  // namespace

std::vector<QuantGemm> GemmsOfPlan(const PlanData& plan) {
  const Graph& g = plan.graph;
  const auto producers = g.Producers();
  const auto consumers = g.Consumers();
  auto producer_op = [&](const std::string& v) -> std::string {
    auto it = producers.find(v);
    return it == producers.end() ? "" : g.nodes[it->second].op;
  };
  std::vector<QuantGemm> out;
  int layer = -1;
  for (const Node& n : g.nodes) {
    if (!IsGemm(n)) continue;
    QuantGemm q;
    q.index = int(out.size());
    q.node = n.name;
    q.input = n.inputs[0];
    q.weight = n.inputs[1];
    const HTensor* w = g.Const(n.inputs[1]);
    if (!w || w->shape.size() != 2) throw Error(n.Describe() + ": weights are not a [K, N] constant");
    q.K = int(w->shape[0]);
    q.N = int(w->shape[1]);
    bool feeds_attention = false;
    auto it = consumers.find(n.outputs[0]);
    if (it != consumers.end()) {
      for (int c : it->second) feeds_attention |= c >= 0 && g.nodes[c].op == "Attention";
    }
    const std::string epi = n.s("epilogue", "none");
    const std::string from = producer_op(n.inputs[0]);
    if (feeds_attention) {
      q.role = "qkv";
      q.layer = ++layer;
    } else if (from == "Attention") {
      q.role = "attn_out";
      q.layer = layer;
    } else if (epi == "gelu") {
      q.role = "ffn_in";
      q.layer = layer;
    } else if (n.op == "DenseLayerNorm" && from == "Dense") {
      q.role = "ffn_out";
      q.layer = layer;
    } else if (epi == "tanh") {
      q.role = "pooler";
    } else {
      q.role = "head";
    }
    out.push_back(q);
  }
  return out;
}

CalibrationTable CalibratePlan(const PlanData& fp32_plan,
                               const std::vector<std::vector<int32_t>>& sequences,
                               CalibMethod method, double percentile) {
  RequirePackedPlan(fp32_plan);
  if (sequences.empty()) throw Error("calibration needs at least one sequence");
  PlanData p = fp32_plan;
  p.info.precision = Precision::kFP32;
  for (Node& n : p.graph.nodes) n.attrs.erase("tactic");
  std::set<std::string> names;
  for (const auto& q : GemmsOfPlan(p)) names.insert(q.input);
  std::set<std::string> present;
  for (const auto& o : p.graph.outputs) present.insert(o.name);
  for (const auto& v : names) {
    if (present.count(v)) continue;
    const auto& d = p.dims.at(v);
    ValueInfo vi;
    vi.name = v;
    vi.dims = d;
    p.graph.outputs.push_back(vi);
    OutputInfo oi;
    oi.name = v;
    oi.kind = TokenRows(p, v) ? Output::Kind::kPerToken : Output::Kind::kPerSequence;
    for (size_t k = oi.kind == Output::Kind::kPerToken ? 2 : 1; k < d.size(); ++k) {
      oi.inner_shape.push_back(std::stoll(d[k]));
    }
    p.info.outputs.push_back(oi);
  }
  FitProfile(&p, sequences);
  auto engine = MakeEngine(std::move(p), false);
  auto ctx = engine->CreateContext();
  std::map<std::string, AbsHistogram> hist;
  std::vector<Output> outs;
  for (const PackedBatch& pb : Pack(sequences, kRunBatch)) {
    ctx->Run(pb, &outs);
    for (const Output& o : outs) {
      if (names.count(o.name)) hist[o.name].Add(o.data.data(), int64_t(o.data.size()));
    }
  }
  CalibrationTable t;
  t.method = std::string(CalibMethodName(method));
  t.percentile = method == CalibMethod::kPercentile ? percentile : 0;
  t.samples = int64_t(sequences.size());
  for (const auto& [name, h] : hist) {
    float a = ComputeAmax(h, method, percentile);
    if (!(a > 0)) a = 1e-6f;  // an all-zero tensor: any scale quantises it exactly
    t.amax[name] = a;
  }
  return t;
}

CalibrationTable ObtainCalibration(const PlanData& fp32_plan, const std::string& model_fingerprint,
                                   const BuildOptions& o) {
  if (o.calib_table) return *o.calib_table;
  if (!o.calib_cache.empty() && std::filesystem::exists(o.calib_cache)) {
    return CalibrationTable::Load(o.calib_cache, model_fingerprint, o.calib_method,
                                  o.calib_percentile);
  }
  std::vector<std::vector<int32_t>> seqs = o.calib_sequences;
  std::string source = seqs.empty() ? "" : std::to_string(seqs.size()) + " given sequences";
  if (!o.calib_file.empty()) {
    auto more = ReadCalibrationJsonl(o.calib_file, o.calib_tokenizer, o.calib_max_lines);
    source += (source.empty() ? "" : " + ") + o.calib_file + " (" +
              std::to_string(more.size()) + " lines)";
    seqs.insert(seqs.end(), more.begin(), more.end());
  }
  if (seqs.empty()) {
    throw Error("precision int8 needs calibration: pass --calib FILE.jsonl (call text), an "
                "existing --calib-cache, or a calibration table");
  }
  CalibrationTable t = CalibratePlan(fp32_plan, seqs, o.calib_method, o.calib_percentile);
  t.model_fingerprint = model_fingerprint;
  t.calib_source = source;
  if (!o.calib_cache.empty()) t.Save(o.calib_cache);
  return t;
}

// Dims of an s8 value stored in the runtime's float-sized buffers: the last (inner) dim counted
// in 4-byte words, so a context allocates inner bytes per row for it, not 4 * inner.
std::vector<std::string> S8Dims(std::vector<std::string> d) {
  if (!d.empty() && !d.back().empty() && std::isdigit(static_cast<unsigned char>(d.back()[0]))) {
    d.back() = std::to_string((std::stoll(d.back()) + 3) / 4);
  }
  return d;
}

namespace {
// The plan's int8 record: where its ranges came from (ApplyInt8, RecordEncoderInt8Ranges).
json CalibrationRecord(const CalibrationTable& table) {
  json rec;
  rec["method"] = table.method;
  rec["percentile"] = table.percentile;
  rec["samples"] = table.samples;
  rec["calib_source"] = table.calib_source;
  rec["model_fingerprint"] = table.model_fingerprint;
  return rec;
}

// The calibrated range of `tensor` (the input of `who`), which the table must hold.
float RangeOf(const CalibrationTable& table, const std::string& tensor, const std::string& who) {
  auto it = table.amax.find(tensor);
  if (it == table.amax.end()) {
    throw Error("calibration table has no range for tensor '" + tensor + "' (input of " + who +
                "); it was made for another graph or is incomplete");
  }
  return it->second;
}

// One GEMM's entry in the int8 record.
json GemmRecord(const QuantGemm& q) {
  return {{"index", q.index}, {"node", q.node}, {"role", q.role}, {"layer", q.layer},
          {"K", q.K}, {"N", q.N}, {"input", q.input}};
}

}  // namespace

void ApplyInt8(PlanData* plan, const CalibrationTable& table, const std::vector<bool>& keep,
               bool keep_embeddings, int qmax) {
  Graph& g = plan->graph;
  const auto gemms = GemmsOfPlan(*plan);
  if (keep.size() != gemms.size()) throw Error("ApplyInt8: keep list does not match the GEMMs");
  std::map<std::string, int> index_of;
  for (size_t k = 0; k < g.nodes.size(); ++k) index_of[g.nodes[k].name] = int(k);
  json rec = CalibrationRecord(table);
  rec["weight_qmax"] = qmax;
  rec["gemms"] = json::array();
  // 1. Weights: per-output-channel symmetric codes.
  std::set<int> quantised;
  for (const QuantGemm& q : gemms) {
    Node& n = g.nodes[index_of.at(q.node)];
    json r = GemmRecord(q);
    if (keep[q.index]) {
      r["precision"] = "fp32";
      rec["gemms"].push_back(r);
      continue;
    }
    const float amax = RangeOf(table, q.input, n.Describe());
    const HTensor& w = *g.Const(n.inputs[1]);
    std::vector<float> scale(q.N, 0.f);
    for (int k = 0; k < q.K; ++k) {
      for (int c = 0; c < q.N; ++c) {
        scale[c] = std::max(scale[c], std::fabs(w.f[size_t(k) * q.N + c]));
      }
    }
    for (float& s : scale) s = s > 0 ? s / float(qmax) : 0.f;
    std::vector<int8_t> codes(size_t(q.K) * q.N);
    for (int k = 0; k < q.K; ++k) {
      for (int c = 0; c < q.N; ++c) {
        const float v = scale[c] > 0 ? w.f[size_t(k) * q.N + c] / scale[c] : 0.f;
        codes[size_t(k) * q.N + c] =
            int8_t(std::max(-qmax, std::min(qmax, int(std::nearbyint(v)))));
      }
    }
    const std::string wq = n.name + "/w_s8", ws = n.name + "/w_scale";
    g.initializers[wq] = PackS8(codes);
    g.initializers[ws] = HTensor::Float({q.N}, scale);
    n.inputs[1] = wq;
    n.attrs["quant"] = Attr{std::string("int8")};
    n.attrs["K"] = Attr{int64_t(q.K)};
    n.attrs["N"] = Attr{int64_t(q.N)};
    n.attrs["w_scale"] = Attr{ws};
    n.attrs["w_qmax"] = Attr{int64_t(qmax)};
    n.attrs["in_amax"] = Attr{amax};
    quantised.insert(index_of.at(q.node));
    r["precision"] = "int8";
    r["in_amax"] = amax;
    rec["gemms"].push_back(r);
  }
  // 2. Inputs: the producer writes the s8 copy where it can (fused quantisation); otherwise the
  // GEMM quantises its fp32 input with the static scale.
  const auto producers = g.Producers();
  const auto consumers = g.Consumers();
  std::set<std::string> done;
  for (int qi : quantised) {
    const std::string x = g.nodes[qi].inputs[0];
    if (!done.insert(x).second) continue;
    auto pit = producers.find(x);
    if (pit == producers.end()) continue;
    Node& p = g.nodes[pit->second];
    const float amax = RangeOf(table, x, g.nodes[qi].Describe());
    std::vector<int> readers;  // quantised GEMMs reading x as their activation
    bool others = false;
    for (int c : consumers.at(x)) {
      if (c >= 0 && quantised.count(c) && g.nodes[c].inputs[0] == x &&
          std::count(g.nodes[c].inputs.begin(), g.nodes[c].inputs.end(), x) == 1) {
        readers.push_back(c);
      } else {
        others = true;
      }
    }
    const bool s8_dense = p.op == "Dense" && quantised.count(pit->second) && !others &&
                          (p.inputs.size() < 4 || p.inputs[3].empty()) &&
                          p.outputs.size() == 1;
    const bool ln_family = p.op == "EmbedLayerNorm" || p.op == "DenseLayerNorm" ||
                           p.op == "LayerNorm";
    if (s8_dense) {
      p.attrs["out_amax"] = Attr{amax};  // p's output holds s8 codes from now on
      plan->dims[x] = S8Dims(plan->dims.at(x));
      for (int c : readers) g.nodes[c].attrs["in_s8"] = Attr{int64_t(1)};
    } else if (ln_family && p.outputs.size() == 1) {
      const std::string xq = x + "/s8";
      p.outputs.push_back(xq);
      p.attrs["q_amax"] = Attr{amax};
      plan->dims[xq] = S8Dims(plan->dims.at(x));
      for (int c : readers) {
        g.nodes[c].inputs[0] = xq;
        g.nodes[c].attrs["in_s8"] = Attr{int64_t(1)};
      }
    }
  }
  // 3. Word embeddings: s8 rows with per-row scales.
  json emb = json::array();
  for (Node& n : g.nodes) {
    if (n.op != "EmbedLayerNorm" || keep_embeddings) continue;
    const HTensor* w = g.Const(n.inputs[2]);
    if (!w || !w->is_float() || w->shape.size() != 2 || w->shape[1] % 4 != 0) continue;
    const int64_t V = w->shape[0], H = w->shape[1];
    std::vector<float> scale(V);
    std::vector<int8_t> codes(size_t(V * H));
    for (int64_t r = 0; r < V; ++r) {
      float m = 0;
      for (int64_t h = 0; h < H; ++h) m = std::max(m, std::fabs(w->f[r * H + h]));
      scale[r] = m > 0 ? m / 127.f : 0.f;
      for (int64_t h = 0; h < H; ++h) {
        const float v = scale[r] > 0 ? w->f[r * H + h] / scale[r] : 0.f;
        codes[r * H + h] = int8_t(std::max(-127, std::min(127, int(std::nearbyint(v)))));
      }
    }
    const std::string wq = n.name + "/word_s8", ws = n.name + "/word_scale";
    g.initializers[wq] = PackS8(codes, V);
    g.initializers[ws] = HTensor::Float({V}, scale);
    n.inputs[2] = wq;
    n.attrs["word_scale"] = Attr{ws};
    n.attrs["hidden"] = Attr{H};
    emb.push_back({{"node", n.name}, {"vocab", V}, {"hidden", H}});
  }
  rec["embeddings"] = emb;
  // 4. Drop initializers nothing reads any more (the fp32 weights replaced above).
  std::set<std::string> used;
  for (const Node& n : g.nodes) {
    for (const auto& v : n.inputs) used.insert(v);
    for (const auto& [k, a] : n.attrs) {
      if (const auto* s = std::get_if<std::string>(&a.v)) used.insert(*s);
    }
  }
  for (auto it = g.initializers.begin(); it != g.initializers.end();) {
    it = used.count(it->first) ? std::next(it) : g.initializers.erase(it);
  }
  plan->extra["int8"] = rec;
}

namespace {
// The weight range of a CPU INT8 build: BuildOptions::int8_weight_qmax, else this CPU's.
int Int8WeightQmax(const BuildOptions& o) {
  if (o.backend != BackendKind::kCPU) return 127;
  if (o.int8_weight_qmax == 0) return cpu::S8WeightQmax();
  if (o.int8_weight_qmax != 63 && o.int8_weight_qmax != 127)
    throw Error("int8 weight range must be 63 (AVX2) or 127 (VNNI, AMX), got " +
                std::to_string(o.int8_weight_qmax));
  return o.int8_weight_qmax;
}
}  // namespace

void QuantizePlanInt8(PlanData* plan, const std::string& model_fingerprint,
                      const BuildOptions& options) {
  RequirePackedPlan(*plan);
  bool keep_embeddings = false;
  const auto keep = ResolveKeepFp(GemmsOfPlan(*plan), options.keep_fp, &keep_embeddings);
  const CalibrationTable table = ObtainCalibration(*plan, model_fingerprint, options);
  const int qmax = Int8WeightQmax(options);
  ApplyInt8(plan, table, keep, keep_embeddings, qmax);
  plan->extra["int8"]["keep_fp"] = options.keep_fp;
}

void RecordEncoderInt8Ranges(PlanData* plan, const std::string& model_fingerprint,
                             const BuildOptions& options) {
  RequirePackedPlan(*plan);
  const auto gemms = GemmsOfPlan(*plan);
  // The encoder quantises every layer GEMM and the word embeddings, never the heads or the
  // pooler: a keep list may only name those (a QDQ model leaving its heads in float does).
  bool keep_embeddings = false;
  const auto keep = ResolveKeepFp(gemms, options.keep_fp, &keep_embeddings);
  std::string kept;
  for (const QuantGemm& q : gemms) {
    if (keep[q.index] && q.layer >= 0) kept += (kept.empty() ? "" : ", ") + q.node;
  }
  if (keep_embeddings) kept += std::string(kept.empty() ? "" : ", ") + "the word embeddings";
  if (!kept.empty()) {
    throw Error("backend cuda int8 quantises every encoder GEMM and the word embeddings, but " +
                    std::string(options.calib_table ? "this QDQ model leaves" : "--keep-fp keeps") +
                    " in float: " + kept + " (build it with --backend cpu, which can keep GEMMs "
                    "in fp32)",
                Code::kUnimplemented);
  }
  static const char* const kRoles[] = {"qkv", "attn_out", "ffn_in", "ffn_out"};
  int layers = 0;
  for (const QuantGemm& q : gemms) layers = std::max(layers, q.layer + 1);
  std::vector<const QuantGemm*> slot(size_t(layers) * 4, nullptr);
  for (const QuantGemm& q : gemms) {
    if (q.layer < 0) continue;
    const auto* r = std::find(std::begin(kRoles), std::end(kRoles), q.role);
    const QuantGemm** at =
        r == std::end(kRoles) ? nullptr : &slot[size_t(q.layer) * 4 + size_t(r - kRoles)];
    if (!at || *at) {
      throw Error("int8 on cuda: GEMM '" + q.node + "' (" + q.role + ") of layer " +
                      std::to_string(q.layer) + " does not fit a BERT layer's four GEMMs (qkv, "
                      "attn_out, ffn_in, ffn_out)", Code::kUnimplemented);
    }
    *at = &q;
  }
  for (size_t k = 0; k < slot.size(); ++k) {
    if (!slot[k]) {
      throw Error("int8 on cuda: layer " + std::to_string(k / 4) + " has no " +
                      kRoles[k % 4] + " GEMM", Code::kUnimplemented);
    }
  }
  // Calibrate the fp32 plan on the CPU backend (its outputs include every GEMM input), whatever
  // the build's backend: the CUDA encoder runner would not expose those tensors.
  PlanData fp = *plan;
  fp.info.backend = BackendKind::kCPU;
  const CalibrationTable table = ObtainCalibration(fp, model_fingerprint, options);
  json rec = CalibrationRecord(table);
  rec["target"] = "cuda_encoder";
  rec["slots"] = {"qkv_in", "out_in", "ff1_in", "ff2_in"};
  rec["act_amax"] = json::array();
  rec["gemms"] = json::array();
  for (const QuantGemm* q : slot) {
    const float amax = RangeOf(table, q->input, q->node);
    if (!(amax > 0) || !std::isfinite(amax)) {  // the encoder's scale is amax / 127
      throw Error("calibration table's range for tensor '" + q->input + "' is " +
                  std::to_string(amax) + ", not a positive number");
    }
    rec["act_amax"].push_back(amax);
    json r = GemmRecord(*q);
    r["precision"] = "int8";
    r["in_amax"] = amax;
    rec["gemms"].push_back(r);
  }
  rec["keep_fp"] = options.keep_fp;
  plan->extra["int8"] = rec;
}

std::vector<float> EncoderInt8ActAmax(const PlanData& plan) {
  std::vector<float> out;
  if (!plan.extra.contains("int8") || !plan.extra["int8"].is_object() ||
      !plan.extra["int8"].contains("act_amax")) {
    return out;
  }
  const json& a = plan.extra["int8"]["act_amax"];
  if (!a.is_array()) throw Error("plan's int8 record: act_amax is not an array");
  for (const json& v : a) {
    const float f = v.is_number() ? v.get<float>() : -1.f;
    if (!(f > 0) || !std::isfinite(f)) {
      throw Error("plan's int8 record: act_amax holds " + v.dump() +
                  ", not a positive number");
    }
    out.push_back(f);
  }
  return out;
}

// ---- public entry points (quant.h) ----

namespace {

PlanData Fp32Plan(const std::string& onnx_path, const BuildOptions& options) {
  BuildOptions fo = options;
  fo.precision = Precision::kFP32;
  fo.tune = false;
  PlanData p = BuildPlanData(onnx_path, fo);
  if (p.mode != "packed") {
    throw Error("int8 needs a packed (fused) plan; '" + onnx_path +
                    "' runs on the padded path (" +
                    p.extra.value("padded_reason", std::string("?")) + ")",
                Code::kUnimplemented);
  }
  return p;
}

}  // namespace

std::vector<QuantGemm> ListQuantizableGemms(const std::string& onnx_path) {
  BuildOptions o;
  o.profile = Profile{1, 1, 1, 1, 1, 1};  // any model has one position
  return GemmsOfPlan(Fp32Plan(onnx_path, o));
}

CalibrationTable Calibrate(const std::string& onnx_path, const BuildOptions& options,
                           const std::vector<std::vector<int32_t>>& sequences) {
  const PlanData p = Fp32Plan(onnx_path, options);
  CalibrationTable t =
      CalibratePlan(p, sequences, options.calib_method, options.calib_percentile);
  t.model_fingerprint = p.extra.value("model_fingerprint", std::string());
  return t;
}

std::vector<GemmSensitivity> MeasureSensitivity(const std::string& onnx_path,
                                                const BuildOptions& options,
                                                const std::vector<std::vector<int32_t>>& probe) {
  if (probe.empty()) throw Error("MeasureSensitivity needs probe sequences");
  const PlanData fp = Fp32Plan(onnx_path, options);
  const CalibrationTable table =
      ObtainCalibration(fp, fp.extra.value("model_fingerprint", std::string()), options);
  const auto gemms = GemmsOfPlan(fp);
  const int qmax = Int8WeightQmax(options);
  const std::vector<Output> ref = RunAll(fp, probe);
  std::vector<GemmSensitivity> out;
  for (const QuantGemm& q : gemms) {
    PlanData p = fp;
    std::vector<bool> keep(gemms.size(), true);
    keep[q.index] = false;
    ApplyInt8(&p, table, keep, true, qmax);
    p.info.precision = Precision::kINT8;
    const std::vector<Output> got = RunAll(std::move(p), probe);
    GemmSensitivity s;
    s.gemm = q;
    double err_sum = 0;
    int64_t seq_n = 0, seq_ok = 0, tok_n = 0, tok_ok = 0;
    for (size_t k = 0; k < ref.size(); ++k) {
      const auto& a = ref[k].data;
      const auto& b = got[k].data;
      double num = 0, den = 0;
      for (size_t e = 0; e < a.size(); ++e) {
        num += (double(b[e]) - a[e]) * (double(b[e]) - a[e]);
        den += double(a[e]) * a[e];
      }
      err_sum += std::sqrt(num / std::max(den, 1e-30));
      const int64_t rows = ref[k].shape[0];
      const int64_t inner = rows > 0 ? int64_t(a.size()) / rows : 0;
      for (int64_t r = 0; r < rows && inner > 0; ++r) {
        const auto* pa = a.data() + r * inner;
        const auto* pb = b.data() + r * inner;
        const bool same = std::max_element(pa, pa + inner) - pa ==
                          std::max_element(pb, pb + inner) - pb;
        if (ref[k].kind == Output::Kind::kPerSequence) {
          ++seq_n;
          seq_ok += same;
        } else {
          ++tok_n;
          tok_ok += same;
        }
      }
    }
    s.rel_err = ref.empty() ? 0 : err_sum / double(ref.size());
    s.intent_agree = seq_n ? double(seq_ok) / double(seq_n) : 1.0;
    s.token_agree = tok_n ? double(tok_ok) / double(tok_n) : 1.0;
    out.push_back(s);
  }
  return out;
}

}  // namespace hotline::engine
