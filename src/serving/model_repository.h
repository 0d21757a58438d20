// A folder of model folders. Each subfolder with a model.yaml is one (name, version); the highest
// version of a name serves unless a load names another. Models load at start or on first use,
// unload on request or when the memory budget needs room (least recently used idle model first).
// A new version is swapped in only after it has loaded and warmed up; requests already queued on
// the old version finish there. A failed load leaves the old version serving.
//
// Thread safety: all public methods may be called concurrently. mu_ guards slots_; loading runs
// outside mu_ with the slot marked `loading`, so one load of a name runs at a time and requests
// for a name being loaded on first use wait for it (load_cv_).
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "serving/batcher.h"
#include "serving/model.h"
#include "serving/serving_metrics.h"

namespace hotline::serving {

// One loaded, warmed-up model version with its batcher. Destruction stops the batcher, which
// first answers everything queued on it.
class LoadedModel {
 public:
  LoadedModel(ModelSpec spec, std::unique_ptr<ServableModel> model, ServingMetrics* metrics);
  ~LoadedModel();
  const ModelSpec& spec() const { return spec_; }
  ServableModel& model() { return *model_; }
  Batcher& batcher() { return *batcher_; }
  int64_t memory_bytes() const { return memory_bytes_; }
  void Touch() { last_used_ns_.store(Clock::now().time_since_epoch().count()); }
  int64_t last_used_ns() const { return last_used_ns_.load(); }

 private:
  ModelSpec spec_;
  std::unique_ptr<ServableModel> model_;
  std::unique_ptr<Batcher> batcher_;  // declared after model_: destroyed (drained) first
  int64_t memory_bytes_ = 0;
  std::atomic<int64_t> last_used_ns_{0};
};

enum class ModelState { kUnloaded, kLoading, kReady, kFailed };
std::string_view ModelStateName(ModelState s);

struct ModelStatus {
  std::string name;
  std::string version;                // serving version ("" when none)
  std::vector<std::string> versions;  // on disk, ascending
  ModelState state = ModelState::kUnloaded;
  std::string message;  // last load error, if any
  int64_t memory_bytes = 0;
  std::vector<std::string> business_lines;
  std::string kind;                // model.yaml's kind ("joint" or "classifier")
  std::vector<std::string> heads;  // a classifier's heads
};

class ModelRepository {
 public:
  struct Options {
    std::string root;                 // folder of model folders
    int64_t memory_budget_bytes = 0;  // 0: unlimited
    bool load_on_demand = true;       // Acquire() loads a known but unloaded model
  };
  // `metrics` may be null.
  ModelRepository(Options options, ModelLoader loader, ServingMetrics* metrics);
  ~ModelRepository();  // StopAll()

  // Re-reads the root folder. A malformed model.yaml is skipped and returned in `errors`.
  std::vector<ModelSpec> Scan(std::vector<std::string>* errors = nullptr) const;

  // Loads `name` (its highest version, or `version`), warms it up and swaps it in. Throws
  // hotline::Error: kNotFound (no such model/version), kResourceExhausted (does not fit the
  // budget even after evicting idle models), or the loader's error. On any failure the version
  // that served before keeps serving.
  void Load(const std::string& name, const std::string& version = "");
  // Unloads; requests queued on it are answered first. Throws kNotFound when not loaded.
  void Unload(const std::string& name);
  // The serving version. Loads it first when not loaded and load_on_demand. Throws kNotFound
  // (unknown name) or kUnavailable (unloaded and not loadable now, or its load failed).
  std::shared_ptr<LoadedModel> Acquire(const std::string& name);

  std::vector<ModelStatus> List() const;
  // The name of a model that declares `business_line` ("" when none does).
  std::string ModelForBusinessLine(const std::string& business_line) const;
  int64_t memory_in_use() const;
  // True when at least one model is loaded and no load is in progress.
  bool ready() const;
  // Graceful shutdown: unloads everything, answering queued requests first.
  void StopAll();
  // Shutdown's first step: every batcher runs what it holds without waiting to fill batches.
  void FlushAll();

 private:
  struct Slot {
    std::shared_ptr<LoadedModel> current;
    ModelState state = ModelState::kUnloaded;
    bool loading = false;
    std::string message;
  };
  void SetState(const std::string& name, Slot& slot, ModelState state);  // needs mu_
  ModelSpec FindSpec(const std::string& name, const std::string& version) const;
  // Moves idle models other than `keep` out of slots_ until `needed` more bytes fit; returns
  // them so the caller can destroy them outside mu_. Needs mu_.
  std::vector<std::shared_ptr<LoadedModel>> EvictFor(int64_t needed, const std::string& keep);
  int64_t MemoryInUseLocked() const;

  const Options options_;
  const ModelLoader loader_;
  ServingMetrics* const metrics_;
  mutable std::mutex mu_;
  std::condition_variable load_cv_;
  std::map<std::string, Slot> slots_;
  bool stopped_ = false;
};

}  // namespace hotline::serving
