// hotline eval --model DIR --data FILE.jsonl [--json] [--precision P] [--backend B]
// Scores the model on labelled utterances (config/taxonomy/README.md's JSON Lines format: text,
// intent, slots [{type, start, end, value}], optionally reference_time). Intent accuracy; slot
// precision, recall and F1 on exact (type, start, end); per-intent table (n, correct, accuracy =
// recall, precision, f1); the most frequent confusion pairs. --json prints one object:
//   {"n", "intent_accuracy", "slot_precision", "slot_recall", "slot_f1", "slot_tp",
//    "slot_predicted", "slot_gold", "per_intent": {id: {...}}, "per_slot": {type: {...}},
//    "confusions": [{"gold", "predicted", "count"}], "seconds"}
// --predictions FILE writes the predicted intent of every utterance, one per line.
//
// A classifier folder (model.yaml kind: classifier) is scored on JSON Lines with text, label (the
// department) and optionally category (or cat1..cat4): department top-1 and top-3 accuracy, category accuracy
// (over the lines with one), per-department table and confusions. --json prints
//   {"n", "department_accuracy", "department_top3_accuracy", "category_n", "category_accuracy",
//    "category_level1_accuracy", "per_department": {label: {n, correct, predicted, accuracy, precision}},
//    "confusions": [{"gold", "predicted", "count"}], "seconds"}
// and --predictions FILE writes `hotline predict`'s JSON line for every order.
//
// hotline eval --model DIR --data FILE.jsonl --compare-precisions [--calib CALIB.jsonl]
//              [--precisions fp32,bf16,int8] [--backend B] [--json]
// Builds one plan per precision (the model's ONNX, the pipeline's profile; INT8 calibrated on
// --calib when given, else the folder's int8_calibration.json (`hotline calibrate`), or the
// model's own Q/DQ scales for a QDQ model) and scores each in a child process
// of its own (`hotline eval` on a plan-only copy of the folder), so that each row's peak memory
// is that of a process which loads only that plan and runs the data set. Prints per precision:
// intent agreement with FP32, intent accuracy, slot F1, plan size, peak RSS. Precisions the
// backend cannot run here are listed with the reason. --json prints {"rows": [...]}.
#ifdef HOTLINE_HAVE_NLU
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "base/error.h"
#include "base/temp_dir.h"
#include "cli/command.h"
#include "engine/backend.h"
#include "engine/qdq_build.h"
#include "nlu/classifier_eval.h"
#include "nlu/gate_eval.h"
#include "nlu/int8_folder.h"
#include "nlu/json_io.h"
#include "nlu/pipeline.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
namespace nlu = hotline::nlu;
namespace engine = hotline::engine;
using json = nlohmann::json;

struct Options {
  std::string model, data, precision, backend = "cpu", predictions;
  bool json = false, compare = false;
  std::string calib, precisions;
  int batch = 32;
};

json ScoresJson(const nlu::EvalScores& s) {
  const double p = s.slot_precision(), r = s.slot_recall();
  auto f1 = [](double a, double b) { return a + b > 0 ? 2 * a * b / (a + b) : 0.0; };
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  json j = {{"n", s.n},
            {"intent_accuracy", s.intent_accuracy()},
            {"slot_precision", p},
            {"slot_recall", r},
            {"slot_f1", s.slot_f1()},
            {"slot_tp", s.slot_tp},
            {"slot_predicted", s.slot_pred},
            {"slot_gold", s.slot_gold},
            {"seconds", s.seconds}};
  j["per_intent"] = json::object();
  for (const auto& [id, st] : s.per_intent) {
    const double ip = ratio(st.correct, st.predicted), ir = ratio(st.correct, st.n);
    j["per_intent"][id] = {{"n", st.n},          {"correct", st.correct},
                           {"predicted", st.predicted}, {"accuracy", ir},
                           {"precision", ip},    {"f1", f1(ip, ir)}};
  }
  j["per_slot"] = json::object();
  for (const auto& [type, st] : s.per_slot) {
    const double sp = ratio(st.tp, st.pred), sr = ratio(st.tp, st.gold);
    j["per_slot"][type] = {{"gold", st.gold}, {"predicted", st.pred}, {"tp", st.tp},
                           {"precision", sp}, {"recall", sr},       {"f1", f1(sp, sr)}};
  }
  std::vector<std::pair<int, std::pair<std::string, std::string>>> conf;
  for (const auto& [k, c] : s.confusions) conf.push_back({c, k});
  std::sort(conf.begin(), conf.end(), [](const auto& x, const auto& y) {
    return x.first > y.first || (x.first == y.first && x.second < y.second);
  });
  if (conf.size() > 20) conf.resize(20);
  j["confusions"] = json::array();
  for (const auto& [c, k] : conf)
    j["confusions"].push_back({{"gold", k.first}, {"predicted", k.second}, {"count", c}});
  return j;
}

void PrintScores(const json& j) {
  std::printf("n=%d  intent accuracy %.4f  slots P %.4f R %.4f F1 %.4f  (%.1f s)\n\n",
              j["n"].get<int>(), j["intent_accuracy"].get<double>(),
              j["slot_precision"].get<double>(), j["slot_recall"].get<double>(),
              j["slot_f1"].get<double>(), j["seconds"].get<double>());
  std::printf("%-28s %6s %8s %9s %6s\n", "intent", "n", "accuracy", "precision", "f1");
  for (const auto& [id, s] : j["per_intent"].items())
    if (s["n"].get<int>() > 0)
      std::printf("%-28s %6d %8.4f %9.4f %6.4f\n", id.c_str(), s["n"].get<int>(),
                  s["accuracy"].get<double>(), s["precision"].get<double>(),
                  s["f1"].get<double>());
  std::printf("\n%-16s %6s %6s %9s %6s %6s\n", "slot", "gold", "pred", "precision", "recall",
              "f1");
  for (const auto& [type, s] : j["per_slot"].items())
    std::printf("%-16s %6d %6d %9.4f %6.4f %6.4f\n", type.c_str(), s["gold"].get<int>(),
                s["predicted"].get<int>(), s["precision"].get<double>(),
                s["recall"].get<double>(), s["f1"].get<double>());
  if (!j["confusions"].empty()) {
    std::printf("\nconfusions (gold -> predicted: count)\n");
    for (const auto& c : j["confusions"])
      std::printf("  %s -> %s: %d\n", c["gold"].get<std::string>().c_str(),
                  c["predicted"].get<std::string>().c_str(), c["count"].get<int>());
  }
}

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> v;
  std::string l;
  while (std::getline(in, l)) v.push_back(l);
  return v;
}

// This process's own peak resident set size (VmHWM of /proc/self/status), in MB; -1 if unknown.
// Not getrusage's ru_maxrss: Linux carries the parent's high-water mark into a spawned child at
// exec (fork and vfork alike), so a child spawned after the parent built an INT8 plan would
// report the parent's calibration peak as its own.
double OwnPeakRssMb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // "  123 kB"
  }
  return -1;
}

// Runs this executable with `args` (stdout to `out_file`) and returns its exit status; `rss_mb`
// gets the child's peak resident set size as wait4 reports it: at least the parent's at the
// time of the spawn (see OwnPeakRssMb), so prefer the figure the child prints itself.
int RunChild(const std::vector<std::string>& args, const std::string& out_file, double* rss_mb) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw hotline::Error("cannot start a child `hotline eval`: " + std::to_string(rc));
  int status = 0;
  struct rusage ru {};
  while (wait4(pid, &status, 0, &ru) < 0) {
    if (errno != EINTR) throw hotline::Error("waiting for a child `hotline eval` failed");
  }
  *rss_mb = double(ru.ru_maxrss) / 1024.0;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int ComparePrecisions(const Options& o) {
  const nlu::ModelConfig config = nlu::ModelConfig::Load(o.model);
  nlu::ReadLabelled(o.data);  // fail early on a bad data file
  const engine::BackendKind backend = engine::ParseBackend(o.backend);
  std::vector<engine::Precision> precs;
  if (o.precisions.empty()) {
    precs = {engine::Precision::kFP32, engine::Precision::kBF16, engine::Precision::kFP16,
             engine::Precision::kINT8, engine::Precision::kFP8};
  } else {
    std::stringstream ss(o.precisions);
    std::string p;
    while (std::getline(ss, p, ',')) precs.push_back(engine::ParsePrecision(p));
  }
  if (std::find(precs.begin(), precs.end(), engine::Precision::kFP32) == precs.end())
    precs.insert(precs.begin(), engine::Precision::kFP32);  // the reference for agreement
  std::stable_partition(precs.begin(), precs.end(),
                        [](engine::Precision p) { return p == engine::Precision::kFP32; });
  const hotline::TempDir scratch("hotline-compare");
  const fs::path& work = scratch.path();
  auto be = engine::CreateBackend(backend);
  const engine::Profile profile = nlu::ModelProfile(config);
  json rows = json::array();
  std::vector<std::string> fp32_pred;
  for (engine::Precision p : precs) {
    const std::string name(engine::PrecisionName(p));
    json row = {{"precision", name}};
    try {
      be->CheckPrecision(p);
    } catch (const hotline::Error& e) {
      row["skipped"] = e.what();
      rows.push_back(row);
      continue;
    }
    engine::BuildOptions b;
    b.precision = p;
    b.backend = backend;
    b.profile = profile;
    if (p == engine::Precision::kINT8) {
      if (!o.calib.empty()) {
        b.calib_file = o.calib;
        b.calib_tokenizer = nlu::MakeCalibTokenizer(config, profile.max_seq);
      } else if (!engine::ApplyQdqScales(config.onnx_file, &b)) {
        // The folder's own calibration (`hotline calibrate`), as predict and serve use it.
        try {
          nlu::ApplyFolderInt8(config, &b);
        } catch (const hotline::Error& e) {
          row["skipped"] = e.what();
          rows.push_back(row);
          continue;
        }
      }
    }
    const std::string plan = (work / (name + ".plan")).string();
    std::fprintf(stderr, "hotline eval: building the %s plan\n", name.c_str());
    engine::BuildPlanFile(config.onnx_file, b, plan);
    const std::string folder = (work / name).string();
    nlu::MakePlanFolder(config, plan, p, backend, folder);
    const std::string out = (work / (name + ".json")).string();
    const std::string pred = (work / (name + ".pred")).string();
    double rss = 0;
    std::fprintf(stderr, "hotline eval: scoring %s in a child process\n", name.c_str());
    const int rc = RunChild({"hotline", "eval", "--model", folder, "--data", o.data, "--precision",
                             name, "--backend", o.backend, "--batch", std::to_string(o.batch),
                             "--json", "--predictions", pred},
                            out, &rss);
    if (rc != 0) {
      throw hotline::Error("scoring the " + name + " plan failed (exit status " +
                           std::to_string(rc) + ")");
    }
    json res;
    {
      std::ifstream in(out);
      res = json::parse(in);
    }
    const auto predicted = ReadLines(pred);
    if (p == engine::Precision::kFP32) fp32_pred = predicted;
    row["intent_agreement"] = nlu::IntentAgreement(fp32_pred, predicted);
    row["intent_accuracy"] = res["intent_accuracy"];
    row["slot_f1"] = res["slot_f1"];
    row["n"] = res["n"];
    row["plan_mb"] = double(fs::file_size(plan)) / 1e6;
    // The child's own VmHWM; wait4's figure is at least the parent's peak (OwnPeakRssMb).
    const double own = res.value("peak_rss_mb", -1.0);
    row["peak_rss_mb"] = own > 0 ? own : rss;
    row["seconds"] = res["seconds"];
    rows.push_back(row);
  }
  if (o.json) {
    std::printf("%s\n", json({{"model", config.name}, {"data", o.data}, {"backend", o.backend},
                              {"rows", rows}})
                            .dump(-1, ' ', false, json::error_handler_t::replace)
                            .c_str());
    return 0;
  }
  std::printf("model %s, data %s, backend %s\n", config.name.c_str(), o.data.c_str(),
              o.backend.c_str());
  std::printf("%-9s %18s %16s %8s %9s %13s\n", "precision", "agreement w/ fp32",
              "intent accuracy", "slot F1", "plan MB", "peak RSS MB");
  for (const auto& r : rows) {
    if (r.contains("skipped")) {
      std::printf("%-9s  not run: %s\n", r["precision"].get<std::string>().c_str(),
                  r["skipped"].get<std::string>().c_str());
      continue;
    }
    std::printf("%-9s %17.2f%% %16.4f %8.4f %9.2f %13.1f\n",
                r["precision"].get<std::string>().c_str(),
                100 * r["intent_agreement"].get<double>(), r["intent_accuracy"].get<double>(),
                r["slot_f1"].get<double>(), r["plan_mb"].get<double>(),
                r["peak_rss_mb"].get<double>());
  }
  return 0;
}

int EvalClassifier(const Options& o) {
  const auto data = nlu::ReadClassifierData(o.data);
  nlu::PipelineOptions popts;
  popts.backend = engine::ParseBackend(o.backend);
  popts.precision =
      nlu::ResolvePrecision(o.precision, nlu::ModelConfig::Load(o.model), popts.backend);
  popts.head_top_k = std::max(3, nlu::ModelConfig::Load(o.model).top_k);  // top-3 accuracy
  auto pipeline = nlu::Pipeline::Open(o.model, popts);
  const nlu::ClassifierScores s = nlu::ScoreClassifier(*pipeline, data, o.batch);
  if (!o.predictions.empty()) {
    std::ofstream out(o.predictions);
    for (const auto& u : s.predictions)
      out << nlu::ToJson(u).dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
    if (!out) throw hotline::Error("cannot write '" + o.predictions + "'");
  }
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  json j = {{"model", pipeline->config().name},
            {"n", s.n},
            {"department_accuracy", s.department_accuracy()},
            {"department_top3_accuracy", s.department_top3_accuracy()},
            {"category_n", s.category_n},
            {"category_accuracy", s.category_accuracy()},
            {"category_level1_accuracy", s.category_level1_accuracy()},
            {"seconds", s.seconds},
            {"peak_rss_mb", OwnPeakRssMb()}};
  j["per_department"] = json::object();
  for (const auto& [label, st] : s.per_department)
    j["per_department"][label] = {{"n", st.n},
                                  {"correct", st.correct},
                                  {"predicted", st.predicted},
                                  {"accuracy", ratio(st.correct, st.n)},
                                  {"precision", ratio(st.correct, st.predicted)}};
  std::vector<std::pair<int, std::pair<std::string, std::string>>> conf;
  for (const auto& [k, c] : s.confusions) conf.push_back({c, k});
  std::sort(conf.begin(), conf.end(), [](const auto& x, const auto& y) {
    return x.first > y.first || (x.first == y.first && x.second < y.second);
  });
  if (conf.size() > 20) conf.resize(20);
  j["confusions"] = json::array();
  for (const auto& [c, k] : conf)
    j["confusions"].push_back({{"gold", k.first}, {"predicted", k.second}, {"count", c}});
  if (o.json) {
    std::printf("%s\n", j.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("n=%d  department top-1 %.4f  top-3 %.4f  category %.4f, level 1 %.4f (n=%d)"
              "  (%.1f s)\n\n",
              s.n, s.department_accuracy(), s.department_top3_accuracy(), s.category_accuracy(),
              s.category_level1_accuracy(), s.category_n, s.seconds);
  std::printf("%6s %8s %9s  %s\n", "n", "accuracy", "precision", "department");
  for (const auto& [label, st] : j["per_department"].items())
    if (st["n"].get<int>() > 0)
      std::printf("%6d %8.4f %9.4f  %s\n", st["n"].get<int>(), st["accuracy"].get<double>(),
                  st["precision"].get<double>(), label.c_str());
  if (!j["confusions"].empty()) {
    std::printf("\nconfusions (gold -> predicted: count)\n");
    for (const auto& c : j["confusions"])
      std::printf("  %s -> %s: %d\n", c["gold"].get<std::string>().c_str(),
                  c["predicted"].get<std::string>().c_str(), c["count"].get<int>());
  }
  return 0;
}

hotline::cli::Registrar reg(
    "eval", "Score a model on labelled utterances (intent accuracy, slot F1)", [](CLI::App& app) {
      auto o = std::make_shared<Options>();
      app.add_option("--model", o->model, "model folder")->required();
      app.add_option("--data", o->data,
                     "JSON Lines with text, intent, slots (classifier: text, label, category)")
          ->required();
      app.add_flag("--json", o->json, "print one JSON object");
      app.add_option("--precision", o->precision,
                     "auto|fp32|fp16|bf16|int8|fp8 (default: model's; int8 reads the folder's "
                     "int8_calibration.json, from `hotline calibrate`)");
      app.add_option("--backend", o->backend, "cpu|cuda");
      app.add_option("--batch", o->batch, "texts per engine run")->check(CLI::Range(1, 4096));
      app.add_option("--predictions", o->predictions,
                     "write each utterance's predicted intent here, one per line");
      app.add_flag("--compare-precisions", o->compare,
                   "score FP32, BF16, FP16, INT8, FP8 plans side by side (those the backend has)");
      app.add_option("--calib", o->calib, "calibration text for the INT8 row (JSON Lines)");
      app.add_option("--precisions", o->precisions,
                     "with --compare-precisions: a comma-separated subset, e.g. fp32,int8");
      return [o]() -> int {
        if (nlu::ModelConfig::Load(o->model).kind == "classifier") {
          if (o->compare || !o->calib.empty() || !o->precisions.empty())
            throw hotline::Error("--compare-precisions, --calib and --precisions score joint "
                                 "models; '" + o->model + "' is a classifier");
          return EvalClassifier(*o);
        }
        if (o->compare) {
          if (!o->precision.empty())
            throw hotline::Error("--compare-precisions builds every precision; drop --precision");
          return ComparePrecisions(*o);
        }
        if (!o->calib.empty() || !o->precisions.empty())
          throw hotline::Error("--calib and --precisions go with --compare-precisions");
        const auto data = nlu::ReadLabelled(o->data);
        nlu::PipelineOptions popts;
        popts.backend = engine::ParseBackend(o->backend);
        popts.precision =
            nlu::ResolvePrecision(o->precision, nlu::ModelConfig::Load(o->model), popts.backend);
        auto pipeline = nlu::Pipeline::Open(o->model, popts);
        const nlu::EvalScores s = nlu::Score(*pipeline, data, o->batch);
        if (!o->predictions.empty()) {
          std::ofstream out(o->predictions);
          for (const auto& p : s.predicted) out << p << "\n";
          if (!out) throw hotline::Error("cannot write '" + o->predictions + "'");
        }
        json j = ScoresJson(s);
        j["peak_rss_mb"] = OwnPeakRssMb();
        if (o->json) {
          std::printf("%s\n", j.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
          return 0;
        }
        PrintScores(j);
        return 0;
      };
    });

}  // namespace
#endif  // HOTLINE_HAVE_NLU
