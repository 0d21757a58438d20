#include "serving/model_repository.h"

#include <algorithm>
#include <filesystem>

#include "base/echo.h"

namespace hotline::serving {

LoadedModel::LoadedModel(ModelSpec spec, std::unique_ptr<ServableModel> model,
                         ServingMetrics* metrics)
    : spec_(std::move(spec)), model_(std::move(model)) {
  memory_bytes_ = std::max<int64_t>(model_->memory_bytes(), spec_.memory_bytes_hint);
  // A batch never exceeds what the model's plan takes.
  spec_.batching.max_batch_size =
      std::max(1, std::min(spec_.batching.max_batch_size, model_->profile().max_batch));
  batcher_ =
      std::make_unique<Batcher>(spec_.name, model_.get(), spec_.batching, spec_.instances, metrics);
  Touch();
}

LoadedModel::~LoadedModel() { batcher_->Stop(); }

std::string_view ModelStateName(ModelState s) {
  switch (s) {
    case ModelState::kUnloaded:
      return "unloaded";
    case ModelState::kLoading:
      return "loading";
    case ModelState::kReady:
      return "ready";
    case ModelState::kFailed:
      return "failed";
  }
  return "unknown";
}

ModelRepository::ModelRepository(Options options, ModelLoader loader, ServingMetrics* metrics)
    : options_(std::move(options)), loader_(std::move(loader)), metrics_(metrics) {}

ModelRepository::~ModelRepository() { StopAll(); }

std::vector<ModelSpec> ModelRepository::Scan(std::vector<std::string>* errors) const {
  namespace fs = std::filesystem;
  std::vector<ModelSpec> specs;
  std::error_code ec;
  if (!fs::is_directory(options_.root, ec)) {
    throw Error("model repository " + options_.root + " is not a folder", Code::kNotFound);
  }
  std::vector<fs::path> dirs;
  for (const auto& entry : fs::directory_iterator(options_.root, ec)) {
    if (entry.is_directory() && fs::exists(entry.path() / "model.yaml")) dirs.push_back(entry);
  }
  std::sort(dirs.begin(), dirs.end());
  for (const auto& dir : dirs) {
    try {
      specs.push_back(ModelSpec::Load(dir.string()));
    } catch (const Error& e) {
      if (errors) errors->push_back(e.what());
    }
  }
  return specs;
}

ModelSpec ModelRepository::FindSpec(const std::string& name, const std::string& version) const {
  std::vector<ModelSpec> found;
  for (ModelSpec& s : Scan()) {
    if (s.name == name && (version.empty() || s.version == version)) found.push_back(s);
  }
  if (found.empty()) {
    throw Error(version.empty()
                    ? "no model named '" + EchoInput(name) + "' in " + options_.root
                    : "model '" + EchoInput(name) + "' has no version '" + EchoInput(version) +
                          "' in " + options_.root,
                Code::kNotFound);
  }
  return *std::max_element(found.begin(), found.end(), [](const ModelSpec& a, const ModelSpec& b) {
    return VersionLess(a.version, b.version);
  });
}

void ModelRepository::SetState(const std::string& name, Slot& slot, ModelState state) {
  slot.state = state;
  if (!metrics_) return;
  for (ModelState s :
       {ModelState::kUnloaded, ModelState::kLoading, ModelState::kReady, ModelState::kFailed}) {
    metrics_->model_state.WithLabels({name, std::string(ModelStateName(s))})
        .Set(s == state ? 1 : 0);
  }
  metrics_->model_memory.WithLabels({name}).Set(slot.current ? double(slot.current->memory_bytes())
                                                             : 0);
}

int64_t ModelRepository::MemoryInUseLocked() const {
  int64_t total = 0;
  for (const auto& [name, slot] : slots_) {
    if (slot.current) total += slot.current->memory_bytes();
  }
  return total;
}

int64_t ModelRepository::memory_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return MemoryInUseLocked();
}

std::vector<std::shared_ptr<LoadedModel>> ModelRepository::EvictFor(int64_t needed,
                                                                    const std::string& keep) {
  std::vector<std::shared_ptr<LoadedModel>> victims;
  if (options_.memory_budget_bytes <= 0 || needed <= 0) return victims;
  while (MemoryInUseLocked() + needed > options_.memory_budget_bytes) {
    Slot* lru = nullptr;
    std::string lru_name;
    for (auto& [name, slot] : slots_) {
      if (name == keep || !slot.current || slot.loading || !slot.current->batcher().idle()) {
        continue;
      }
      if (!lru || slot.current->last_used_ns() < lru->current->last_used_ns()) {
        lru = &slot;
        lru_name = name;
      }
    }
    if (!lru) break;  // nothing idle left to evict
    victims.push_back(std::move(lru->current));
    SetState(lru_name, *lru, ModelState::kUnloaded);
    if (metrics_) metrics_->model_evictions.WithLabels({lru_name}).Inc();
  }
  return victims;
}

void ModelRepository::Load(const std::string& name, const std::string& version) {
  const ModelSpec spec = FindSpec(name, version);
  std::vector<std::shared_ptr<LoadedModel>> victims;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (stopped_) throw Error("the server is shutting down", Code::kUnavailable);
    load_cv_.wait(lock, [&] { return !slots_[name].loading; });
    Slot& slot = slots_[name];
    slot.loading = true;
    if (!slot.current) SetState(name, slot, ModelState::kLoading);
    victims = EvictFor(spec.memory_bytes_hint, name);
  }
  victims.clear();  // drains and frees evicted models outside mu_

  auto fail = [&](const std::string& message) {
    std::lock_guard<std::mutex> lock(mu_);
    Slot& slot = slots_[name];
    slot.loading = false;
    slot.message = message;
    SetState(name, slot, slot.current ? ModelState::kReady : ModelState::kFailed);
    if (metrics_) metrics_->model_loads.WithLabels({name, "failed"}).Inc();
    load_cv_.notify_all();
  };

  std::shared_ptr<LoadedModel> loaded;
  try {
    std::unique_ptr<ServableModel> model = loader_(spec);
    if (!model) throw Error("loader returned no model for " + spec.dir, Code::kInternal);
    if (spec.warmup) {
      WarmUp(*model,
             WarmupShapes(model->profile(), spec.batching.max_batch_size, model->max_length()));
    }
    loaded = std::make_shared<LoadedModel>(spec, std::move(model), metrics_);
  } catch (const Error& e) {
    fail(e.what());
    throw Error("loading model '" + name + "' version " + spec.version + " from " + spec.dir +
                    " failed: " + e.what(),
                e.code() == Code::kInvalidArgument ? Code::kFailedPrecondition : e.code());
  } catch (const std::exception& e) {
    fail(e.what());
    throw Error("loading model '" + name + "' from " + spec.dir + " failed: " + e.what(),
                Code::kInternal);
  }

  std::shared_ptr<LoadedModel> old;
  {
    std::unique_lock<std::mutex> lock(mu_);
    Slot& slot = slots_[name];
    const int64_t old_bytes = slot.current ? slot.current->memory_bytes() : 0;
    victims = EvictFor(loaded->memory_bytes() - old_bytes, name);
    const int64_t after = MemoryInUseLocked() - old_bytes + loaded->memory_bytes();
    if (options_.memory_budget_bytes > 0 && after > options_.memory_budget_bytes) {
      lock.unlock();
      const std::string msg =
          "model '" + name + "' needs " + std::to_string(loaded->memory_bytes()) +
          " bytes; the memory budget is " + std::to_string(options_.memory_budget_bytes) +
          " bytes and busy models hold the rest";
      loaded.reset();
      fail(msg);
      throw Error(msg, Code::kResourceExhausted);
    }
    old = std::move(slot.current);
    slot.current = loaded;
    slot.loading = false;
    slot.message.clear();
    SetState(name, slot, ModelState::kReady);
    if (metrics_) metrics_->model_loads.WithLabels({name, "ok"}).Inc();
    load_cv_.notify_all();
  }
  // `old` and `victims` drain and free here, outside mu_; requests that still hold `old` keep it
  // alive until they have enqueued, and its batcher answers them before it stops.
}

void ModelRepository::Unload(const std::string& name) {
  std::shared_ptr<LoadedModel> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = slots_.find(name);
    if (it == slots_.end() || !it->second.current) {
      throw Error("model '" + EchoInput(name) + "' is not loaded", Code::kNotFound);
    }
    old = std::move(it->second.current);
    SetState(name, it->second, ModelState::kUnloaded);
  }
}

std::shared_ptr<LoadedModel> ModelRepository::Acquire(const std::string& name) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (stopped_) throw Error("the server is shutting down", Code::kUnavailable);
    auto it = slots_.find(name);
    if (it != slots_.end()) {
      load_cv_.wait(lock, [&] { return !it->second.loading; });
      Slot& slot = it->second;
      if (slot.current) {
        slot.current->Touch();
        return slot.current;
      }
      if (slot.state == ModelState::kFailed) {
        throw Error(
            "model '" + name + "' failed to load (" + slot.message + "); fix it and call LoadModel",
            Code::kUnavailable);
      }
    }
    if (!options_.load_on_demand) {
      // Distinguish unknown names from known but unloaded ones.
      FindSpec(name, "");
      throw Error("model '" + name + "' is not loaded; load it with LoadModel", Code::kUnavailable);
    }
  }
  Load(name);
  std::lock_guard<std::mutex> lock(mu_);
  Slot& slot = slots_[name];
  if (!slot.current) throw Error("model '" + name + "' was unloaded", Code::kUnavailable);
  slot.current->Touch();
  return slot.current;
}

std::vector<ModelStatus> ModelRepository::List() const {
  std::vector<std::string> errors;
  std::vector<ModelSpec> specs = Scan(&errors);
  std::map<std::string, ModelStatus> out;
  for (const ModelSpec& s : specs) {
    ModelStatus& st = out[s.name];
    st.name = s.name;
    st.versions.push_back(s.version);
    if (st.business_lines.empty()) st.business_lines = s.business_lines;
    if (st.kind.empty()) {
      st.kind = s.kind;
      st.heads = s.heads;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, slot] : slots_) {
    ModelStatus& st = out[name];
    st.name = name;
    st.state = slot.loading && !slot.current ? ModelState::kLoading : slot.state;
    st.message = slot.message;
    if (slot.current) {
      st.version = slot.current->spec().version;
      st.memory_bytes = slot.current->memory_bytes();
      st.business_lines = slot.current->spec().business_lines;
      st.kind = slot.current->spec().kind;
      st.heads = slot.current->spec().heads;
    }
  }
  std::vector<ModelStatus> list;
  for (auto& [name, st] : out) {
    std::sort(st.versions.begin(), st.versions.end(), VersionLess);
    list.push_back(std::move(st));
  }
  return list;
}

std::string ModelRepository::ModelForBusinessLine(const std::string& business_line) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, slot] : slots_) {
      if (!slot.current) continue;
      const auto& bl = slot.current->spec().business_lines;
      if (std::find(bl.begin(), bl.end(), business_line) != bl.end()) return name;
    }
  }
  for (const ModelSpec& s : Scan()) {
    if (std::find(s.business_lines.begin(), s.business_lines.end(), business_line) !=
        s.business_lines.end()) {
      return s.name;
    }
  }
  return "";
}

bool ModelRepository::ready() const {
  std::lock_guard<std::mutex> lock(mu_);
  bool any = false;
  for (const auto& [name, slot] : slots_) {
    if (slot.loading) return false;
    any = any || slot.current != nullptr;
  }
  return any;
}

void ModelRepository::StopAll() {
  std::vector<std::shared_ptr<LoadedModel>> all;
  {
    std::unique_lock<std::mutex> lock(mu_);
    stopped_ = true;
    load_cv_.wait(lock, [&] {
      for (const auto& [n, s] : slots_) {
        if (s.loading) return false;
      }
      return true;
    });
    for (auto& [name, slot] : slots_) {
      if (slot.current) {
        all.push_back(std::move(slot.current));
        SetState(name, slot, ModelState::kUnloaded);
      }
    }
  }
}

void ModelRepository::FlushAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [name, slot] : slots_) {
    if (slot.current) slot.current->batcher().Flush();
  }
}

}  // namespace hotline::serving
