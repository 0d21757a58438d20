#include "nlu/gate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "base/error.h"
#include "base/temp_dir.h"
#include "engine/quant.h"

namespace hotline::nlu {
namespace fs = std::filesystem;
using json = nlohmann::json;

json GateReport::ToJson() const {
  json j = {{"passed", passed},
            {"fp32", {{"intent_accuracy", fp32_intent_accuracy}, {"slot_f1", fp32_slot_f1}}},
            {"keep_fp", keep_fp},
            {"message", message}};
  j["steps"] = json::array();
  for (const auto& s : steps) {
    j["steps"].push_back({{"keep_fp", s.keep_fp},
                          {"intent_accuracy", s.intent_accuracy},
                          {"slot_f1", s.slot_f1},
                          {"intent_agreement", s.intent_agreement},
                          {"intent_drop_pp", s.intent_drop},
                          {"slot_f1_drop_pp", s.slot_f1_drop},
                          {"passed", s.passed}});
  }
  j["sensitivity"] = sensitivity;
  return j;
}

namespace {

class Gate {
 public:
  Gate(const GateOptions& o, engine::BuildOptions int8)
      : o_(o), int8_(std::move(int8)), config_(ModelConfig::Load(o.model_dir)) {
    onnx_ = o_.onnx.empty() ? config_.onnx_file : o_.onnx;
    if (!fs::exists(onnx_)) throw Error("gate: ONNX model '" + onnx_ + "' not found");
    if (int8_.precision != engine::Precision::kINT8) {
      throw Error("the accuracy gate compares an INT8 plan with FP32; got --precision " +
                  std::string(engine::PrecisionName(int8_.precision)));
    }
    data_ = ReadLabelled(o_.data);
    work_ = o_.work_dir;
    if (work_.empty()) {
      scratch_ = std::make_unique<TempDir>("hotline-gate");
      work_ = scratch_->path().string();
    }
    fs::create_directories(work_);
    // The pipeline's profile unless one was given, and calibration text tokenised as the
    // pipeline tokenises (the model's settings, cut to the profile's longest sequence).
    if (int8_.profile.ToString() == engine::Profile().ToString()) {
      int8_.profile = ModelProfile(config_);
    }
    if (!int8_.calib_file.empty()) {
      int8_.calib_tokenizer = MakeCalibTokenizer(config_, int8_.profile.max_seq);
    }
    // Calibrate once: later builds read the cache this first build writes.
    if (!int8_.calib_table && int8_.calib_cache.empty()) {
      int8_.calib_cache = (fs::path(work_) / "calib.json").string();
    }
  }

  GateReport Run(const std::string& plan_out) {
    GateReport r;
    engine::BuildOptions fp32 = int8_;
    fp32.precision = engine::Precision::kFP32;
    fp32.keep_fp.clear();
    const EvalScores base = Evaluate(fp32, "fp32");
    r.fp32_intent_accuracy = base.intent_accuracy();
    r.fp32_slot_f1 = base.slot_f1();
    fp32_predicted_ = base.predicted;
    Log("gate: fp32 intent accuracy %.4f, slot F1 %.4f on %d utterances\n",
        base.intent_accuracy(), base.slot_f1(), base.n);

    const std::vector<std::string> start = int8_.keep_fp;
    int step_no = 0;
    auto try_keep = [&](const std::vector<std::string>& extra) -> bool {
      std::vector<std::string> keep = start;
      keep.insert(keep.end(), extra.begin(), extra.end());
      engine::BuildOptions b = int8_;
      b.keep_fp = keep;
      const std::string tag = "int8-" + std::to_string(step_no++);
      const EvalScores s = Evaluate(b, tag);
      GateStep st;
      st.keep_fp = keep;
      st.intent_accuracy = s.intent_accuracy();
      st.slot_f1 = s.slot_f1();
      st.intent_agreement = IntentAgreement(fp32_predicted_, s.predicted);
      st.intent_drop = 100 * (r.fp32_intent_accuracy - st.intent_accuracy);
      st.slot_f1_drop = 100 * (r.fp32_slot_f1 - st.slot_f1);
      st.passed = st.intent_drop <= o_.max_intent_drop + 1e-9 &&
                  st.slot_f1_drop <= o_.max_slot_f1_drop + 1e-9 &&
                  (o_.min_intent_agreement <= 0 ||
                   100 * st.intent_agreement >= o_.min_intent_agreement - 1e-9);
      Log("gate: int8 with %zu layer(s) in fp32: intent %.4f (drop %.2f pp), slot F1 %.4f "
          "(drop %.2f pp), agreement %.2f%% -> %s\n",
          keep.size(), st.intent_accuracy, st.intent_drop, st.slot_f1, st.slot_f1_drop,
          100 * st.intent_agreement, st.passed ? "pass" : "fail");
      r.steps.push_back(st);
      if (st.passed) {
        r.passed = true;
        r.keep_fp = keep;
        fs::copy_file(Plan(tag), plan_out, fs::copy_options::overwrite_existing);
      }
      return st.passed;
    };

    if (try_keep({})) {
      r.message = Summary(r, "passed with no layer moved back to fp32");
      return r;
    }
    // Rank the GEMMs still in INT8 by their error alone in INT8.
    const std::vector<std::string> candidates = Rank(&r);
    const int limit = o_.max_fallback < 0 ? int(candidates.size())
                                          : std::min<int>(o_.max_fallback, candidates.size());
    auto prefix = [&](int k) {
      return std::vector<std::string>(candidates.begin(), candidates.begin() + k);
    };
    // Doubling, then bisection between the last failing and the first passing prefix.
    int lo = 0, hi = -1;
    for (int k = 1; k <= limit; k = std::min(limit, k * 2)) {
      if (try_keep(prefix(k))) {
        hi = k;
        break;
      }
      lo = k;
      if (k == limit) break;
    }
    if (hi < 0) {
      r.passed = false;
      r.keep_fp = r.steps.empty() ? start : r.steps.back().keep_fp;
      std::string names;
      for (size_t i = 0; i < std::min<size_t>(5, r.sensitivity.size()); ++i) {
        const json& s = r.sensitivity[i];
        char buf[256];
        std::snprintf(buf, sizeof(buf), "%s%s (layer %d, %s, rel err %.4f)", i ? ", " : "",
                      s["node"].get<std::string>().c_str(), s["layer"].get<int>(),
                      s["role"].get<std::string>().c_str(), s["rel_err"].get<double>());
        names += buf;
      }
      r.message = Summary(r, "FAILED: even with " + std::to_string(limit) +
                                 " layer(s) moved back to fp32 the drop exceeds the limits; "
                                 "most sensitive: " + names);
      return r;
    }
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (try_keep(prefix(mid))) {
        hi = mid;
      } else {
        lo = mid;
      }
    }
    // Passing builds only ever shrink `hi`, so the last one to pass (whose plan was copied to
    // plan_out and whose list is r.keep_fp) is prefix(hi).
    std::vector<std::string> keep = prefix(hi);
    if (o_.prune) {
      // Least sensitive first; a passing trial becomes the list (and plan_out, r.keep_fp).
      for (int i = hi - 1; i >= 0 && hi > 1; --i) {
        std::vector<std::string> trial;
        for (const auto& k : keep)
          if (k != candidates[size_t(i)]) trial.push_back(k);
        if (trial.size() < keep.size() && try_keep(trial)) keep = trial;
      }
    }
    r.message = Summary(r, "passed with " + std::to_string(keep.size()) +
                               " layer(s) moved back to fp32: " + Join(keep));
    return r;
  }

 private:
  template <typename... A>
  void Log(const char* fmt, A... a) {
    if (o_.verbose) std::fprintf(stderr, fmt, a...);
  }
  static std::string Join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  }
  std::string Summary(const GateReport& r, const std::string& what) const {
    char buf[512];
    std::string agree;
    if (o_.min_intent_agreement > 0) {
      char a[64];
      std::snprintf(a, sizeof(a), ", agreement >= %.2f%%", o_.min_intent_agreement);
      agree = a;
    }
    const GateStep* last = nullptr;
    for (const auto& s : r.steps)
      if (s.passed) last = &s;
    if (!last && !r.steps.empty()) last = &r.steps.back();
    std::snprintf(buf, sizeof(buf),
                  "accuracy gate on %s (%zu utterances; limits: intent drop %.2f pp, slot F1 drop "
                  "%.2f pp%s): fp32 intent %.4f slot F1 %.4f; int8 intent %.4f slot F1 %.4f, "
                  "agreement %.2f%%; ",
                  o_.data.c_str(), data_.size(), o_.max_intent_drop, o_.max_slot_f1_drop,
                  agree.c_str(),
                  r.fp32_intent_accuracy, r.fp32_slot_f1, last ? last->intent_accuracy : 0.0,
                  last ? last->slot_f1 : 0.0, last ? 100 * last->intent_agreement : 0.0);
    return buf + what;
  }

  std::string Plan(const std::string& tag) const {
    return (fs::path(work_) / (tag + ".plan")).string();
  }

  EvalScores Evaluate(const engine::BuildOptions& b, const std::string& tag) {
    engine::BuildOptions opts = b;
    if (opts.profile.ToString() == engine::Profile().ToString()) {
      opts.profile = ModelProfile(config_);
    }
    engine::BuildPlanFile(onnx_, opts, Plan(tag));
    const std::string folder = (fs::path(work_) / tag).string();
    MakePlanFolder(config_, Plan(tag), opts.precision, opts.backend, folder);
    PipelineOptions po;
    po.precision = opts.precision;
    po.backend = opts.backend;
    auto p = Pipeline::Open(folder, po);
    return Score(*p, data_, o_.batch);
  }

  // Candidates in falling sensitivity, then the embedding table.
  std::vector<std::string> Rank(GateReport* r) {
    const auto tok = MakeCalibTokenizer(config_, ModelProfile(config_).max_seq);
    std::vector<std::vector<int32_t>> probe;
    for (size_t i = 0; i < data_.size() && int(probe.size()) < o_.probe_utterances; ++i) {
      auto ids = tok(data_[i].text);
      if (ids.size() > 2) probe.push_back(std::move(ids));
    }
    engine::BuildOptions b = int8_;
    if (b.profile.ToString() == engine::Profile().ToString()) b.profile = ModelProfile(config_);
    Log("gate: measuring the sensitivity of each GEMM on %zu utterances\n", probe.size());
    auto sens = engine::MeasureSensitivity(onnx_, b, probe);
    std::stable_sort(sens.begin(), sens.end(), [](const auto& a, const auto& c) {
      return a.rel_err > c.rel_err ||
             (a.rel_err == c.rel_err && a.intent_agree < c.intent_agree);
    });
    bool keep_emb = false;
    std::vector<bool> kept;
    {
      std::vector<engine::QuantGemm> gemms;
      for (const auto& s : sens) gemms.push_back(s.gemm);
      std::sort(gemms.begin(), gemms.end(),
                [](const auto& a, const auto& c) { return a.index < c.index; });
      kept = engine::ResolveKeepFp(gemms, int8_.keep_fp, &keep_emb);
    }
    std::vector<std::string> out;
    for (const auto& s : sens) {
      r->sensitivity.push_back({{"node", s.gemm.node},
                                {"index", s.gemm.index},
                                {"layer", s.gemm.layer},
                                {"role", s.gemm.role},
                                {"rel_err", s.rel_err},
                                {"intent_agree", s.intent_agree},
                                {"token_agree", s.token_agree}});
      if (s.gemm.index >= 0 && size_t(s.gemm.index) < kept.size() && kept[s.gemm.index]) continue;
      out.push_back(s.gemm.node);
    }
    if (!keep_emb) out.push_back("embeddings");
    return out;
  }

  GateOptions o_;
  engine::BuildOptions int8_;
  ModelConfig config_;
  std::string onnx_, work_;
  std::unique_ptr<TempDir> scratch_;  // the folder made here, when work_dir was not given
  std::vector<LabelledExample> data_;
  std::vector<std::string> fp32_predicted_;
};

}  // namespace

GateReport RunGate(const GateOptions& options, engine::BuildOptions int8,
                   const std::string& plan_out) {
  Gate gate(options, std::move(int8));
  return gate.Run(plan_out);
}

}  // namespace hotline::nlu
