// `hotline build`: ONNX → optimised, tuned plan file (DESIGN.md's command-line contract).
#include <cstdio>
#include <memory>

#include "base/error.h"
#include "cli/command.h"
#include "engine/engine.h"
#include "engine/plan.h"
#ifdef HOTLINE_HAVE_NLU
#include <filesystem>
#include <fstream>

#include "nlu/gate.h"
#endif
// ---- INT8 calibration (helper int8-core) ----
#include <filesystem>

#include "engine/quant.h"
#ifdef HOTLINE_HAVE_TEXT
#include "text/tokenizer.h"
#include "text/vocab.h"
#endif
// ---- end INT8 calibration ----

namespace {

struct Options {
  std::string onnx, out, precision = "fp32", backend = "cpu", profile = "1x1:8x64:64x128";
  std::string calib;
  bool no_tune = false;
  bool require_fused = false;  // exit 3 (after writing the plan) when the encoder is left unfused
  int threads = 0;
  std::string timing_cache;  // (for cuda-int) GEMM timings reused across builds
  int device = 0;
  // ---- INT8 calibration (helper int8-core) ----
  std::string calib_method, calib_cache, vocab;  // calib_method "": the precision's default
  double percentile = 99.99;
  int calib_lines = 0;
  std::vector<std::string> keep_fp;
  // ---- accuracy gate (helper int8-gate) ----
  std::string gate, gate_report;
  double max_intent_drop = 0.5, max_slot_f1_drop = 0.5, min_intent_agreement = 0;
  int gate_max_fp = -1;
  // ---- FP8 (cuda) ----
  std::string fp8_weight_scaling;
  int fp8_fast_accum_max_k = -1;
};

#ifdef HOTLINE_HAVE_NLU
// `--gate`: build FP32 and INT8 plans of the model folder, score both through the NLU pipeline,
// move the most sensitive GEMMs back to FP32 until the drops are within the limits (nlu/gate.h).
// Writes the passing plan to --output; exit status 3 when the gate fails (no plan written).
int BuildWithGate(const Options& o, const hotline::engine::BuildOptions& opts) {
  namespace fs = std::filesystem;
  hotline::nlu::GateOptions g;
  if (fs::is_directory(o.onnx)) {
    g.model_dir = o.onnx;
  } else {
    g.model_dir = fs::absolute(o.onnx).parent_path().string();
    g.onnx = o.onnx;
  }
  if (!fs::exists(fs::path(g.model_dir) / "model.yaml")) {
    throw hotline::Error("--gate scores plans through the NLU pipeline and needs a model folder "
                         "(model.yaml, vocab, labels, taxonomy); '" + g.model_dir +
                         "' has no model.yaml");
  }
  g.data = o.gate;
  g.max_intent_drop = o.max_intent_drop;
  g.max_slot_f1_drop = o.max_slot_f1_drop;
  g.min_intent_agreement = o.min_intent_agreement;
  g.max_fallback = o.gate_max_fp;
  const hotline::nlu::GateReport r = hotline::nlu::RunGate(g, opts, o.out);
  if (!o.gate_report.empty()) {
    std::ofstream f(o.gate_report);
    f << r.ToJson().dump(2) << "\n";
    if (!f) throw hotline::Error("cannot write the gate report '" + o.gate_report + "'");
  }
  std::fprintf(stderr, "hotline build: %s\n", r.message.c_str());
  return r.passed ? 0 : 3;
}
#endif

hotline::cli::Registrar reg("build", "Build an optimised plan from an ONNX model", [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--onnx", o->onnx, "ONNX model")->required();
  app.add_option("-o,--output", o->out, "plan file to write")->required();
  app.add_option("--precision", o->precision, "fp32|fp16|bf16|int8|fp8");
  app.add_option("--backend", o->backend, "cpu|cuda");
  app.add_option("--profile", o->profile, "min:opt:max as BxS, e.g. 1x1:8x64:64x128");
  app.add_option("--calib", o->calib,
                 "calibration text, JSONL with \"text\" (int8; fp8 on cuda: amax per GEMM input)");
  app.add_flag("--no-tune", o->no_tune, "skip timing GEMM tactics");
  app.add_flag("--require-fused", o->require_fused,
               "exit with status 3 when the encoder is left unfused (the plan is still written)");
  app.add_option("--threads", o->threads, "CPU threads (0 = all)");
  app.add_option("--timing-cache", o->timing_cache,
                 "file of GEMM timings: reused and updated by tuning");
  app.add_option("--device", o->device, "CUDA device ordinal");
  // ---- INT8 calibration (helper int8-core) ----
  app.add_option("--calib-method", o->calib_method,
                 "activation ranges: kl | percentile | minmax (int8, cpu and cuda: default "
                 "percentile; fp8 on cuda: minmax, the only one it takes)");
  app.add_option("--percentile", o->percentile, "int8: percentile of |x| kept (default 99.99)");
  app.add_option("--calib-cache", o->calib_cache,
                 "int8: calibration cache; reused when it exists (refused for another model), "
                 "written after calibrating otherwise");
  app.add_option("--calib-lines", o->calib_lines, "int8: use the first N lines of --calib (0 = all)");
  app.add_option("--vocab", o->vocab,
                 "int8: vocab.txt for tokenising --calib (default: beside the ONNX / in the folder)");
  app.add_option("--keep-fp", o->keep_fp,
                 "int8 on cpu: keep these GEMMs fp32: node name, #<index>, layer:<L>, heads, "
                 "embeddings");
  // ---- accuracy gate (helper int8-gate) ----
  app.add_option("--gate", o->gate,
                 "labelled JSON Lines: score the INT8 plan against FP32 through the pipeline and "
                 "move sensitive layers back to FP32 until the drops are within the limits "
                 "(int8 on cpu)");
  app.add_option("--max-intent-drop", o->max_intent_drop,
                 "gate: largest intent-accuracy drop, percentage points (default 0.5)");
  app.add_option("--max-slot-f1-drop", o->max_slot_f1_drop,
                 "gate: largest slot-F1 drop, percentage points (default 0.5)");
  app.add_option("--min-intent-agreement", o->min_intent_agreement,
                 "gate: least intent agreement with FP32, percent (default: not checked)");
  app.add_option("--gate-max-fp", o->gate_max_fp,
                 "gate: most layers moved back to FP32 before failing (default: all)");
  app.add_option("--gate-report", o->gate_report, "gate: write the report here (JSON)");
  app.add_option("--fp8-weight-scaling", o->fp8_weight_scaling,
                 "fp8 on cuda: per_tensor (default: one scale per weight matrix, the fastest) | "
                 "per_channel (one per output column)");
  app.add_option("--fp8-fast-accum-max-k", o->fp8_fast_accum_max_k,
                 "fp8 on cuda: GEMMs with at most this input width use Hopper's fast FP8 "
                 "accumulation (default: every GEMM; 1024 keeps BERT-base's FFN2 exact; 0 = "
                 "exact everywhere)");
  return [o]() -> int {
    using namespace hotline::engine;
    BuildOptions opts;
    opts.precision = ParsePrecision(o->precision);
    opts.backend = ParseBackend(o->backend);
    opts.profile = Profile::Parse(o->profile);
    opts.tune = !o->no_tune;
    opts.threads = o->threads;
    opts.timing_cache = o->timing_cache;
    opts.device = o->device;
    if ((!o->fp8_weight_scaling.empty() || o->fp8_fast_accum_max_k != -1) &&
        (opts.precision != Precision::kFP8 || opts.backend != BackendKind::kCUDA)) {
      throw hotline::Error("--fp8-weight-scaling and --fp8-fast-accum-max-k are options of "
                           "--precision fp8 --backend cuda");
    }
    if (o->fp8_fast_accum_max_k < -1) {
      throw hotline::Error("--fp8-fast-accum-max-k must be >= 0 (0 = exact accumulation), got " +
                           std::to_string(o->fp8_fast_accum_max_k));
    }
    if (!o->fp8_weight_scaling.empty() && o->fp8_weight_scaling != "per_tensor" &&
        o->fp8_weight_scaling != "per_channel") {
      throw hotline::Error("--fp8-weight-scaling " + o->fp8_weight_scaling +
                           ": want per_tensor or per_channel");
    }
    opts.fp8_weight_scaling = o->fp8_weight_scaling;
    opts.fp8_fast_accum_max_k = o->fp8_fast_accum_max_k;
    if (!o->calib.empty() && opts.precision != Precision::kINT8 &&
        opts.precision != Precision::kFP8) {
      throw hotline::Error("--calib is only used with --precision int8 or fp8");
    }
    // ---- INT8 calibration (helper int8-core): fills opts' calib_* fields and keep_fp ----
    {
      namespace fs = std::filesystem;
      const bool folder = fs::is_directory(o->onnx);
      const fs::path dir = folder ? fs::path(o->onnx) : fs::absolute(o->onnx).parent_path();
      if (folder && o->gate.empty()) o->onnx = (dir / "model.onnx").string();
      const bool int8 = opts.precision == Precision::kINT8;
      if (!int8 && (!o->calib_cache.empty() || !o->keep_fp.empty())) {
        throw hotline::Error("--calib-cache and --keep-fp are only used with --precision int8");
      }
      // INT8 on cuda: one quantised encoder (every layer GEMM and the word embeddings in INT8,
      // ranges from the same calibration as the cpu's, --calib-method and --calib-cache
      // included); it cannot keep single GEMMs in float, which --keep-fp and the gate need.
      if (int8 && opts.backend == BackendKind::kCUDA && !o->keep_fp.empty()) {
        throw hotline::Error("--keep-fp applies to --backend cpu: int8 on cuda quantises every "
                             "encoder GEMM and the word embeddings (one quantised encoder)");
      }
      if (int8 && opts.backend == BackendKind::kCUDA && !o->gate.empty()) {
        throw hotline::Error("--gate applies to --backend cpu: it keeps GEMMs in fp32 until the "
                             "plan passes, and int8 on cuda cannot keep single GEMMs in float");
      }
      if (opts.precision == Precision::kFP8 && !o->calib_method.empty() &&
          ParseCalibMethod(o->calib_method) != CalibMethod::kMinMax) {
        // FP8 plans take amax (max |x|) per GEMM input, as TensorRT and Transformer Engine do
        // for E4M3 (whose exponent covers what a clipped INT8 range would lose): no silent swap.
        throw hotline::Error("--calib-method " + o->calib_method +
                             ": FP8 plans are calibrated by minmax (amax per GEMM input); "
                             "kl and percentile apply to --precision int8");
      }
      opts.calib_method = ParseCalibMethod(o->calib_method.empty() ? "percentile"
                                                                   : o->calib_method);
      opts.calib_percentile = o->percentile;
      opts.calib_cache = o->calib_cache;
      opts.calib_max_lines = o->calib_lines;
      opts.keep_fp = o->keep_fp;
      if ((int8 || opts.precision == Precision::kFP8) && !o->calib.empty()) {
        const std::string vocab = o->vocab.empty() ? (dir / "vocab.txt").string() : o->vocab;
        if (!fs::exists(vocab)) {
          throw hotline::Error("--calib text is tokenised with the model's vocabulary, and '" +
                               vocab + "' does not exist (pass a model folder, put vocab.txt "
                               "beside the ONNX file, or give --vocab)");
        }
#ifdef HOTLINE_HAVE_TEXT
        hotline::text::TokenizerOptions to;
        to.lowercase = true;
        to.normalize_width = true;
        to.max_length = opts.profile.max_seq;
        auto tok = std::make_shared<hotline::text::Tokenizer>(
            std::make_shared<hotline::text::Vocab>(hotline::text::Vocab::Load(vocab)), to);
        opts.calib_file = o->calib;
        opts.calib_tokenizer = [tok](std::string_view text) { return tok->Encode(text).ids; };
#else
        throw hotline::Error("--calib needs the text layer (tokenizer), which this binary lacks");
#endif
      }
    }
    // ---- end INT8 calibration ----
    if (!o->gate.empty()) {
#ifdef HOTLINE_HAVE_NLU
      if (opts.precision != Precision::kINT8)
        throw hotline::Error("--gate compares an INT8 plan with FP32: use --precision int8");
      const int rc = BuildWithGate(*o, opts);
      if (rc != 0) return rc;
#else
      throw hotline::Error("--gate needs the NLU layer, which this binary was built without");
#endif
    } else {
      BuildPlanFile(o->onnx, opts, o->out);
    }
    const PlanData p = ReadPlan(o->out, false);
    std::fprintf(stderr, "hotline build: wrote %s (%s, %s, %zu ops, profile %s, %.1f MB weights)\n",
                 o->out.c_str(), p.mode.c_str(), std::string(PrecisionName(p.info.precision)).c_str(),
                 p.info.ops.size(), p.info.profile.ToString().c_str(),
                 double(p.info.weight_bytes) / 1e6);
    if (p.mode != "packed") {
      // Unfused encoders run on the generic executor, several times slower: say so, and why.
      std::fprintf(stderr,
                   "hotline build: WARNING: the encoder was left UNFUSED (generic padded "
                   "execution, fp32): %s\n",
                   p.extra.value("padded_reason", std::string("no reason recorded")).c_str());
      if (p.extra.contains("fusion_notes")) {
        for (const auto& n : p.extra["fusion_notes"]) {
          std::fprintf(stderr, "hotline build:   %s\n", n.get<std::string>().c_str());
        }
      }
      std::fprintf(stderr, "hotline build: `hotline inspect --explain %s` lists every pattern "
                   "that did not apply\n", o->onnx.c_str());
      if (o->require_fused) return 3;
    }
    return 0;
  };
});

}  // namespace
