#include "serving/model.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>

#include "base/error.h"
#include "serving/utf8.h"

namespace hotline::serving {
namespace {

template <typename T>
T Get(const YAML::Node& node, const char* key, T fallback, const std::string& file) {
  const YAML::Node v = node[key];
  if (!v) return fallback;
  try {
    return v.as<T>();
  } catch (const YAML::Exception& e) {
    throw Error(file + ": key '" + key + "' has value '" + YAML::Dump(v) +
                "', which is not the expected type");
  }
}

}  // namespace

ModelSpec ModelSpec::Load(const std::string& dir) {
  const std::string file = (std::filesystem::path(dir) / "model.yaml").string();
  if (!std::filesystem::exists(file)) {
    throw Error("model folder " + dir + " has no model.yaml", Code::kNotFound);
  }
  YAML::Node root;
  try {
    root = YAML::LoadFile(file);
  } catch (const YAML::Exception& e) {
    throw Error(file + ": not valid YAML: " + e.what());
  }
  if (!root.IsMap()) throw Error(file + ": expected a mapping at the top level");
  ModelSpec spec;
  spec.dir = dir;
  spec.name = Get<std::string>(root, "name", "", file);
  if (spec.name.empty()) throw Error(file + ": 'name' is missing or empty");
  spec.version = Get<std::string>(root, "version", "1", file);
  if (root["business_lines"]) {
    spec.business_lines = Get<std::vector<std::string>>(root, "business_lines", {}, file);
  } else if (root["business_line"]) {
    spec.business_lines.push_back(Get<std::string>(root, "business_line", "", file));
  }
  if (const YAML::Node b = root["batching"]) {
    if (!b.IsMap()) throw Error(file + ": 'batching' must be a mapping");
    BatchingOptions& o = spec.batching;
    o.max_batch_size = Get<int>(b, "max_batch_size", o.max_batch_size, file);
    o.max_batch_tokens = Get<int>(b, "max_batch_tokens", o.max_batch_tokens, file);
    double delay_ms =
        Get<double>(b, "max_queue_delay_ms",
                    std::chrono::duration<double, std::milli>(o.max_queue_delay).count(), file);
    o.max_queue_delay =
        std::chrono::duration_cast<Duration>(std::chrono::duration<double, std::milli>(delay_ms));
    o.max_queue_size = Get<int>(b, "max_queue_size", o.max_queue_size, file);
    const double wait_ms =
        Get<double>(b, "max_queue_wait_ms",
                    std::chrono::duration<double, std::milli>(o.max_queue_wait).count(), file);
    if (o.max_batch_size < 1 || o.max_batch_tokens < 1 || o.max_queue_size < 1 || delay_ms < 0 ||
        !(wait_ms >= 0) || wait_ms > 3600e3) {
      throw Error(file + ": batching sizes must be >= 1, max_queue_delay_ms >= 0 and "
                         "max_queue_wait_ms 0..3600000");
    }
    o.max_queue_wait =
        std::chrono::duration_cast<Duration>(std::chrono::duration<double, std::milli>(wait_ms));
  }
  spec.instances = Get<int>(root, "instances", 1, file);
  if (spec.instances < 1 || spec.instances > 64) {
    throw Error(file + ": 'instances' must be 1..64, got " + std::to_string(spec.instances));
  }
  spec.kind = Get<std::string>(root, "kind", "joint", file);
  if (spec.kind == "classifier") {
    const YAML::Node outputs = root["outputs"];
    if (!outputs || !outputs.IsMap()) throw Error(file + ": a classifier needs 'outputs'");
    for (const auto& kv : outputs) spec.heads.push_back(kv.first.as<std::string>());
  }
  spec.warmup = Get<bool>(root, "warmup", true, file);
  spec.memory_bytes_hint = int64_t(Get<double>(root, "memory_mb", 0, file) * 1024 * 1024);
  return spec;
}

bool VersionLess(const std::string& a, const std::string& b) {
  auto numeric = [](const std::string& s) {
    return !s.empty() && s.size() < 18 &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (numeric(a) && numeric(b)) return std::stoll(a) < std::stoll(b);
  return a < b;
}

std::vector<WarmupShape> WarmupShapes(const engine::Profile& profile, int max_batch_size,
                                      int max_length) {
  std::vector<int> batches = {profile.min_batch, profile.opt_batch, profile.max_batch};
  std::vector<int> seqs = {profile.min_seq, profile.opt_seq, profile.max_seq};
  std::vector<WarmupShape> shapes;
  for (int b : batches) {
    b = std::clamp(b, 1, std::max(1, max_batch_size));
    for (int s : seqs) {
      // Two tokens are [CLS] and [SEP]: a shorter shape cannot be made from text.
      s = std::clamp(s, 2, std::max(2, max_length));
      WarmupShape shape{b, s};
      if (std::find(shapes.begin(), shapes.end(), shape) == shapes.end()) shapes.push_back(shape);
    }
  }
  return shapes;
}

void WarmUp(ServableModel& model, const std::vector<WarmupShape>& shapes) {
  const auto reference = std::chrono::system_clock::now();
  for (const WarmupShape& shape : shapes) {
    // One CJK character is one token, so seq - 2 characters make `seq` tokens.
    std::string text;
    for (int i = 0; i < shape.seq - 2; ++i) text += "\xE5\x92\xA8";  // 咨
    model.Understand(std::vector<std::string>(shape.batch, text), reference);
  }
}

int EstimateTokens(const std::string& text, int max_length) {
  const size_t n = CountCodePoints(text) + 2;
  return static_cast<int>(std::min<size_t>(n, std::max(2, max_length)));
}

}  // namespace hotline::serving
