#include "nlu/gate_eval.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "nlu/json_io.h"
#include "text/tokenizer.h"

namespace hotline::nlu {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

double Ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

}  // namespace

std::vector<LabelledExample> ReadLabelled(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot open data file '" + path + "'", Code::kNotFound);
  std::vector<LabelledExample> out;
  std::string line;
  int no = 0;
  const auto now = std::chrono::system_clock::now();
  while (std::getline(in, line)) {
    ++no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      auto j = json::parse(line);
      LabelledExample e;
      e.text = j.at("text").get<std::string>();
      e.intent = j.at("intent").get<std::string>();
      e.reference_time = now;
      if (j.contains("reference_time")) {
        auto t = ParseIsoTime(j["reference_time"].get<std::string>());
        if (!t) throw Error("reference_time is not ISO-8601");
        e.reference_time = *t;
      }
      if (j.contains("slots"))
        for (const auto& s : j["slots"])
          e.slots.insert({s.at("type").get<std::string>(), s.at("start").get<int>(),
                          s.at("end").get<int>()});
      out.push_back(std::move(e));
    } catch (const std::exception& ex) {
      throw Error(path + ":" + std::to_string(no) +
                  ": expected {\"text\", \"intent\", \"slots\": [{type, start, end}]}: " +
                  ex.what());
    }
  }
  if (out.empty()) throw Error("data file '" + path + "' holds no labelled utterances");
  return out;
}

double EvalScores::intent_accuracy() const { return Ratio(correct, n); }
double EvalScores::slot_precision() const { return Ratio(slot_tp, slot_pred); }
double EvalScores::slot_recall() const { return Ratio(slot_tp, slot_gold); }
double EvalScores::slot_f1() const {
  const double p = slot_precision(), r = slot_recall();
  return p + r > 0 ? 2 * p * r / (p + r) : 0.0;
}

EvalScores Score(Pipeline& pipeline, const std::vector<LabelledExample>& data, int batch) {
  EvalScores s;
  batch = std::max(1, batch);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t a = 0; a < data.size(); a += size_t(batch)) {
    const size_t b = std::min(data.size(), a + size_t(batch));
    std::vector<std::string> texts;
    for (size_t i = a; i < b; ++i) texts.push_back(data[i].text);
    // One reference time per batch, as `hotline eval` always did (relative-time slots).
    const auto results = pipeline.Understand(texts, data[a].reference_time);
    for (size_t i = a; i < b; ++i) {
      const LabelledExample& e = data[i];
      const Understanding& u = results[i - a];
      ++s.n;
      s.predicted.push_back(u.intent);
      s.per_intent[e.intent].n++;
      s.per_intent[u.intent].predicted++;
      if (u.intent == e.intent) {
        ++s.correct;
        s.per_intent[e.intent].correct++;
      } else {
        s.confusions[{e.intent, u.intent}]++;
      }
      for (const auto& sl : e.slots) s.per_slot[std::get<0>(sl)].gold++;
      s.slot_gold += int(e.slots.size());
      for (const Slot& sl : u.slots) {
        ++s.slot_pred;
        s.per_slot[sl.type].pred++;
        if (e.slots.count({sl.type, sl.start, sl.end})) {
          ++s.slot_tp;
          s.per_slot[sl.type].tp++;
        }
      }
    }
  }
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

double IntentAgreement(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  if (a.size() != b.size()) {
    throw Error("intent agreement needs two runs over the same utterances (" +
                std::to_string(a.size()) + " vs " + std::to_string(b.size()) + ")");
  }
  if (a.empty()) return 1.0;
  size_t same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
  return double(same) / double(a.size());
}

engine::CalibTokenizer MakeCalibTokenizer(const ModelConfig& config, int max_seq) {
  text::TokenizerOptions t;
  t.lowercase = config.lowercase;
  t.normalize_width = config.normalize_width;
  t.max_length = std::max(2, std::min(config.max_length, max_seq));
  auto tok = std::make_shared<const text::Tokenizer>(
      std::make_shared<const text::Vocab>(text::Vocab::Load(config.vocab_file)), t);
  return [tok](std::string_view s) { return tok->Encode(s).ids; };
}

engine::Profile ModelProfile(const ModelConfig& config) {
  engine::Profile p;
  if (!config.profile.empty()) p = engine::Profile::Parse(config.profile);
  p.max_seq = std::min(p.max_seq, config.max_length);
  p.opt_seq = std::min(p.opt_seq, p.max_seq);
  p.min_seq = std::min(p.min_seq, p.opt_seq);
  return p;
}

void MakePlanFolder(const ModelConfig& config, const std::string& plan_file,
                    engine::Precision precision, engine::BackendKind backend,
                    const std::string& folder) {
  fs::create_directories(fs::path(folder) / "cache");
  YAML::Emitter y;
  y << YAML::BeginMap;
  y << YAML::Key << "name" << YAML::Value << config.name;
  y << YAML::Key << "version" << YAML::Value << config.version;
  y << YAML::Key << "max_length" << YAML::Value << config.max_length;
  y << YAML::Key << "precision" << YAML::Value << std::string(engine::PrecisionName(precision));
  y << YAML::Key << "tokenizer" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "vocab" << YAML::Value << fs::absolute(config.vocab_file).string();
  y << YAML::Key << "lowercase" << YAML::Value << config.lowercase;
  y << YAML::Key << "normalize_width" << YAML::Value << config.normalize_width;
  y << YAML::EndMap;
  y << YAML::Key << "files" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "onnx" << YAML::Value << "no-onnx-here.onnx";  // plan-only folder
  y << YAML::Key << "labels" << YAML::Value << fs::absolute(config.labels_file).string();
  y << YAML::Key << "taxonomy" << YAML::Value << fs::absolute(config.taxonomy_file).string();
  y << YAML::EndMap;
  y << YAML::Key << "outputs" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "intent" << YAML::Value << config.intent_output;
  y << YAML::Key << "slots" << YAML::Value << config.slot_output;
  y << YAML::EndMap;
  y << YAML::EndMap;
  std::ofstream(fs::path(folder) / "model.yaml") << y.c_str() << "\n";
  const fs::path link = fs::path(folder) / "cache" /
                        (config.name + "-" + std::string(engine::PrecisionName(precision)) + "-" +
                         std::string(engine::BackendName(backend)) + "-gate.plan");
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(folder) / "cache")) fs::remove(e.path(), ec);
  fs::create_symlink(fs::absolute(plan_file), link);
}

}  // namespace hotline::nlu
