// model.yaml and labels.json: reading and checking a model folder.
#include <yaml-cpp/yaml.h>

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
    if (auto o = y["outputs"]) {
      if (o["intent"]) c.intent_output = o["intent"].as<std::string>();
      if (o["slots"]) c.slot_output = o["slots"].as<std::string>();
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
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return (fs::path(config.dir) / "cache" /
          (config.name + "-" + std::string(engine::PrecisionName(options.precision)) + "-" +
           std::string(engine::BackendName(options.backend)) + "-" + hex + ".plan"))
      .string();
}

}  // namespace hotline::nlu
