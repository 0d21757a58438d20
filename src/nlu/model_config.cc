// model.yaml and labels.json: reading and checking a model folder.
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/error.h"
#include "nlu/pipeline.h"

namespace hotline::nlu {
namespace fs = std::filesystem;

namespace {

std::string Join(const std::string& dir, const std::string& file) {
  return fs::path(file).is_absolute() ? file : (fs::path(dir) / file).string();
}

}  // namespace

ModelConfig ModelConfig::Load(const std::string& dir) {
  const std::string path = (fs::path(dir) / "model.yaml").string();
  if (!fs::is_directory(dir))
    throw Error("model folder '" + dir + "' does not exist", Code::kNotFound);
  YAML::Node y;
  try {
    y = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw Error("model folder '" + dir + "' has no model.yaml", Code::kNotFound);
  } catch (const YAML::Exception& e) {
    throw Error(path + " is not valid YAML: " + e.what());
  }
  if (!y.IsMap()) throw Error(path + ": expected a mapping of fields");
  ModelConfig c;
  c.dir = dir;
  try {
    if (!y["name"]) throw Error(path + ": missing field 'name'");
    c.name = y["name"].as<std::string>();
    c.version = y["version"] ? y["version"].as<std::string>() : "";
    if (y["max_length"]) c.max_length = y["max_length"].as<int>();
    if (y["precision"]) c.precision = y["precision"].as<std::string>();
    std::string vocab = "vocab.txt", onnx = "model.onnx", labels = "labels.json",
                taxonomy = "taxonomy.yaml";
    if (auto t = y["tokenizer"]) {
      if (t["vocab"]) vocab = t["vocab"].as<std::string>();
      if (t["lowercase"]) c.lowercase = t["lowercase"].as<bool>();
      if (t["normalize_width"]) c.normalize_width = t["normalize_width"].as<bool>();
    }
    if (auto f = y["files"]) {
      if (f["onnx"]) onnx = f["onnx"].as<std::string>();
      if (f["labels"]) labels = f["labels"].as<std::string>();
      if (f["taxonomy"]) taxonomy = f["taxonomy"].as<std::string>();
    }
    if (y["kind"]) c.kind = y["kind"].as<std::string>();
    if (c.kind != "joint" && c.kind != "classifier")
      throw Error(path + ": kind must be joint or classifier, got '" + c.kind + "'");
    const bool classifier = c.kind == "classifier";
    if (y["long_text"]) {
      const std::string lt = y["long_text"].as<std::string>();
      if (lt == "head_tail") {
        c.long_text = LongText::kHeadTail;
      } else if (lt != "truncate") {
        throw Error(path + ": long_text must be truncate or head_tail, got '" + lt + "'");
      }
      if (!classifier && c.long_text == LongText::kHeadTail)
        throw Error(path + ": long_text head_tail is for classifier models (slot offsets of a "
                           "joint model need contiguous text)");
    }
    if (auto o = y["outputs"]) {
      if (!o.IsMap()) throw Error(path + ": outputs must be a mapping of head: output name");
      if (classifier) {
        for (const auto& kv : o) {
          ClassifierHead h;
          h.name = kv.first.as<std::string>();
          h.output = kv.second.as<std::string>();
          if (h.name.empty() || h.output.empty())
            throw Error(path + ": outputs: head and output names must not be empty");
          for (const auto& other : c.heads)
            if (other.output == h.output)
              throw Error(path + ": outputs: heads '" + other.name + "' and '" + h.name +
                          "' both read output '" + h.output + "'");
          c.heads.push_back(h);
        }
      } else {
        if (o["intent"]) c.intent_output = o["intent"].as<std::string>();
        if (o["slots"]) c.slot_output = o["slots"].as<std::string>();
      }
    }
    if (classifier && c.heads.empty())
      throw Error(path + ": a classifier needs outputs: {head: output name, ...}");
    if (y["top_k"]) {
      c.top_k = y["top_k"].as<int>();
      if (c.top_k < 1) throw Error(path + ": top_k must be at least 1");
    }
    if (auto cal = y["calibration"]) {
      if (!cal.IsMap()) throw Error(path + ": calibration must be a mapping");
      for (const auto& kv : cal) {
        const std::string key = kv.first.as<std::string>();
        if (key != "temperature" && key != "handoff_threshold")
          throw Error(path + ": unknown key 'calibration." + key +
                      "' (known: temperature, handoff_threshold)");
      }
      if (auto t = cal["temperature"]) {
        if (!t.IsMap())
          throw Error(path + ": calibration.temperature must map a head to its temperature");
        for (const auto& kv : t) {
          const std::string head = kv.first.as<std::string>();
          const float T = kv.second.as<float>();
          if (!(T > 0) || !std::isfinite(T))
            throw Error(path + ": calibration.temperature." + head + " must be a positive number");
          bool known = false;
          if (!classifier && head == "intent") {
            c.intent_temperature = T;
            known = true;
          }
          for (auto& h : c.heads) {
            if (h.name == head) {
              h.temperature = T;
              known = true;
            }
          }
          if (!known)
            throw Error(path + ": calibration.temperature." + head + " names no head of this " +
                        c.kind + " model" + (classifier ? "" : " (joint: intent)"));
        }
      }
      if (auto h = cal["handoff_threshold"]) {
        if (classifier)
          throw Error(path + ": calibration.handoff_threshold is for joint models (the dialog's)");
        const float v = h.as<float>();
        if (!(v > 0 && v < 1))
          throw Error(path + ": calibration.handoff_threshold must be in (0, 1)");
        c.handoff_threshold = v;
      }
    }
    if (y["profile"]) c.profile = y["profile"].as<std::string>();
    c.vocab_file = Join(dir, vocab);
    c.onnx_file = Join(dir, onnx);
    c.labels_file = Join(dir, labels);
    c.taxonomy_file = Join(dir, taxonomy);
  } catch (const YAML::Exception& e) {
    throw Error(path + ": a field has the wrong type: " + e.what());
  }
  if (c.max_length < 2 || c.max_length > 4096)
    throw Error(path + ": max_length must be in [2, 4096], got " + std::to_string(c.max_length));
  engine::ParsePrecision(c.precision);  // throws on an unknown name
  if (!c.profile.empty()) engine::Profile::Parse(c.profile);
  return c;
}

Labels Labels::Load(const std::string& path, const Taxonomy& taxonomy) {
  std::ifstream in(path);
  if (!in) throw Error("cannot open labels file '" + path + "'", Code::kNotFound);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error("labels file '" + path + "' is not valid JSON: " + e.what());
  }
  Labels l;
  try {
    l.intents = j.at("intents").get<std::vector<std::string>>();
    l.slot_tags = j.at("slot_tags").get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    throw Error("labels file '" + path +
                "' needs \"intents\" and \"slot_tags\" lists of strings: " + e.what());
  }
  if (l.intents.empty()) throw Error("labels file '" + path + "' lists no intents");
  std::set<std::string> seen;
  for (const auto& i : l.intents) {
    if (!taxonomy.FindIntent(i))
      throw Error("labels file '" + path + "': intent '" + i + "' is not in the taxonomy");
    if (!seen.insert(i).second)
      throw Error("labels file '" + path + "': intent '" + i + "' is listed twice");
  }
  if (l.slot_tags.empty() || l.slot_tags[0] != "O")
    throw Error("labels file '" + path + "': slot_tags must start with \"O\"");
  seen.clear();
  for (const auto& t : l.slot_tags) {
    if (!seen.insert(t).second)
      throw Error("labels file '" + path + "': slot tag '" + t + "' is listed twice");
    if (t == "O") continue;
    if (t.size() < 3 || (t[0] != 'B' && t[0] != 'I') || t[1] != '-')
      throw Error("labels file '" + path + "': slot tag '" + t + "' is not B-<slot> or I-<slot>");
    if (!taxonomy.HasSlot(t.substr(2)))
      throw Error("labels file '" + path + "': slot tag '" + t +
                  "' names a slot type that is not in the taxonomy");
  }
  return l;
}

ClassifierLabels ClassifierLabels::Load(const std::string& path, const ModelConfig& config) {
  std::ifstream in(path);
  if (!in) throw Error("cannot open labels file '" + path + "'", Code::kNotFound);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error("labels file '" + path + "' is not valid JSON: " + e.what());
  }
  if (!j.is_object())
    throw Error("labels file '" + path + "' must be an object of head: [labels]");
  ClassifierLabels l;
  for (const auto& h : config.heads) {
    if (!j.contains(h.name))
      throw Error("labels file '" + path + "' has no list for head '" + h.name + "'");
    std::vector<std::string> labels;
    try {
      labels = j.at(h.name).get<std::vector<std::string>>();
    } catch (const nlohmann::json::exception&) {
      throw Error("labels file '" + path + "': '" + h.name + "' must be a list of strings");
    }
    if (labels.empty()) throw Error("labels file '" + path + "': '" + h.name + "' is empty");
    std::set<std::string> seen;
    for (const auto& s : labels) {
      if (s.empty()) throw Error("labels file '" + path + "': '" + h.name + "' has an empty label");
      if (!seen.insert(s).second)
        throw Error("labels file '" + path + "': '" + h.name + "' lists '" + s + "' twice");
    }
    l.heads.push_back(std::move(labels));
  }
  for (const auto& [key, value] : j.items()) {
    bool known = false;
    for (const auto& h : config.heads) known = known || h.name == key;
    if (!known)
      throw Error("labels file '" + path + "' has a list '" + key +
                  "' for a head that model.yaml's outputs do not name");
  }
  return l;
}

std::vector<int> KeptTokens(int num_tokens, int max_length, LongText mode) {
  if (max_length < 3)
    throw Error("a model must take at least 3 tokens, got max_length " +
                std::to_string(max_length));
  std::vector<int> keep;
  if (num_tokens <= max_length) {
    for (int i = 0; i < num_tokens; ++i) keep.push_back(i);
    return keep;
  }
  const int content = num_tokens - 2, budget = max_length - 2;
  const int tail = mode == LongText::kHeadTail ? budget / 2 : 0;
  const int head = budget - tail;
  keep.push_back(0);
  for (int i = 1; i <= head; ++i) keep.push_back(i);
  for (int i = content - tail + 1; i <= content; ++i) keep.push_back(i);
  keep.push_back(num_tokens - 1);
  return keep;
}

std::string PlanCachePath(const ModelConfig& config, const engine::BuildOptions& options) {
  // FNV-1a over what the plan is built from; the hardware is checked by Engine::Load.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const char* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(p[i])) * 1099511628211ull;
  };
  std::ifstream in(config.onnx_file, std::ios::binary);
  if (!in) throw Error("cannot open ONNX file '" + config.onnx_file + "'", Code::kNotFound);
  char buf[1 << 16];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) mix(buf, size_t(in.gcount()));
  const std::string profile = options.profile.ToString();
  mix(profile.data(), profile.size());
  // An INT8 CPU plan also depends on the folder's calibration (int8_folder.h).
  if (options.precision == engine::Precision::kINT8 &&
      options.backend == engine::BackendKind::kCPU) {
    std::ifstream cal(fs::path(config.dir) / "int8_calibration.json", std::ios::binary);
    while (cal && (cal.read(buf, sizeof(buf)) || cal.gcount() > 0)) mix(buf, size_t(cal.gcount()));
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return (fs::path(config.dir) / "cache" /
          (config.name + "-" + std::string(engine::PrecisionName(options.precision)) + "-" +
           std::string(engine::BackendName(options.backend)) + "-" + hex + ".plan"))
      .string();
}

}  // namespace hotline::nlu
