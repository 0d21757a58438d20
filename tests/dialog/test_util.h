// Shared helpers of the dialog tests: hand-built NLU results, the shipped configs, temp paths and
// a private redis-server started through scripts/redis.sh.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "dialog/dialog.h"
#include "nlu/pipeline.h"
#include "nlu/taxonomy.h"

namespace hotline::dialog::testing {

inline std::string SourcePath(const std::string& rel) {
  return std::string(HOTLINE_SOURCE_DIR) + "/" + rel;
}

// A fresh folder under the build tree, unique per process and name.
inline std::string TempDir(const std::string& name) {
  const auto dir = std::filesystem::path(HOTLINE_BINARY_DIR) / "dialog-test" /
                   (name + "-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

inline const nlu::Taxonomy& TheTaxonomy() {
  static const nlu::Taxonomy t = nlu::Taxonomy::Load(SourcePath("config/taxonomy/hotline.yaml"));
  return t;
}

// config/dialog.yaml with the answers from the source tree and a fresh work-order file.
inline DialogConfig TestConfig(const std::string& name) {
  DialogConfig c = DialogConfig::Load(SourcePath("config/dialog.yaml"));
  c.answers_dir = SourcePath("config/answers");
  c.work_order_db = TempDir(name) + "/orders.sqlite";
  return c;
}

struct S {
  std::string type, value, normalized = "";
  bool valid = true;
};

// An NLU result as the pipeline would give it; offsets are not used by the dialog.
inline nlu::Understanding U(const std::string& intent, float confidence,
                            std::vector<S> slots = {}) {
  nlu::Understanding u;
  u.intent = intent;
  u.confidence = confidence;
  u.top_k = {{intent, confidence}};
  if (const auto* info = TheTaxonomy().FindIntent(intent)) {
    u.department = info->dept;
    u.business_line = info->line;
  }
  for (const auto& s : slots) {
    nlu::Slot slot;
    slot.type = s.type;
    slot.value = s.value;
    slot.normalized = s.normalized;
    slot.valid = s.valid;
    u.slots.push_back(slot);
  }
  return u;
}

inline std::chrono::system_clock::time_point Time(int64_t unix_seconds) {
  return std::chrono::system_clock::time_point(std::chrono::seconds(unix_seconds));
}
// 2026-12-01T02:00:00Z = 10:00 in Asia/Shanghai.
inline std::chrono::system_clock::time_point Dec1() { return Time(1796090400); }

// A redis-server on a private port for the life of the object (scripts/redis.sh).
class RedisServer {
 public:
  RedisServer() {
    port_ = 21000 + static_cast<int>(getpid() % 20000);
    dir_ = TempDir("redis");
    const std::string cmd = "bash " + SourcePath("scripts/redis.sh") + " start " +
                            std::to_string(port_) + " " + dir_ + " >/dev/null";
    ok_ = std::system(cmd.c_str()) == 0;
  }
  ~RedisServer() {
    const std::string cmd = "bash " + SourcePath("scripts/redis.sh") + " stop " +
                            std::to_string(port_) + " " + dir_ + " >/dev/null";
    (void)std::system(cmd.c_str());
  }
  bool ok() const { return ok_; }
  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_) + "/0"; }
  // Runs redis-cli against the server; returns its stdout without the trailing newline.
  std::string Cli(const std::string& args) const {
    const std::string cmd = "redis-cli -p " + std::to_string(port_) + " " + args;
    std::string out;
    if (FILE* p = popen(cmd.c_str(), "r")) {
      char buf[4096];
      size_t n;
      while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
      pclose(p);
    }
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    return out;
  }

 private:
  int port_ = 0;
  std::string dir_;
  bool ok_ = false;
};

}  // namespace hotline::dialog::testing
