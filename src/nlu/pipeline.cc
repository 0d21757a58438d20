#include "nlu/pipeline.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <limits>
#include <mutex>
#include <thread>

#include <unistd.h>

#include "base/error.h"
#include "nlu/bio.h"
#include "nlu/int8_folder.h"
#include "nlu/normalize/normalize.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace hotline::nlu {
namespace fs = std::filesystem;

namespace {

// Runs fn(i) for i in [0, n): serially for small n, else in up to 4 contiguous chunks on
// short-lived threads (a batch of 128 utterances spends milliseconds in tokenising and decoding;
// the engine call between them is what the other instances overlap). If calls throw, the
// exception of the lowest index is rethrown after every chunk has finished.
template <typename Fn>
void ParallelFor(size_t n, Fn fn) {
  constexpr size_t kMinPerChunk = 32;
  const size_t hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t chunks = std::min({size_t(4), n / kMinPerChunk, hw});
  if (chunks <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::vector<std::exception_ptr> errors(chunks);
  auto run = [&](size_t c) {
    const size_t lo = n * c / chunks, hi = n * (c + 1) / chunks;
    try {
      for (size_t i = lo; i < hi; ++i) fn(i);
    } catch (...) {
      errors[c] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(chunks - 1);
  for (size_t c = 1; c < chunks; ++c) threads.emplace_back(run, c);
  run(0);
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// A fixed set of engine contexts; Borrow() blocks until one is free.
class ContextPool {
 public:
  ContextPool(const engine::Engine& engine, int n) {
    for (int i = 0; i < std::max(1, n); ++i) free_.push_back(engine.CreateContext());
  }
  class Lease {
   public:
    Lease(ContextPool* pool, std::unique_ptr<engine::Context> ctx)
        : pool_(pool), ctx_(std::move(ctx)) {}
    ~Lease() { pool_->Return(std::move(ctx_)); }
    engine::Context* operator->() { return ctx_.get(); }

   private:
    ContextPool* pool_;
    std::unique_ptr<engine::Context> ctx_;
  };
  Lease Borrow() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !free_.empty(); });
    auto ctx = std::move(free_.back());
    free_.pop_back();
    return Lease(this, std::move(ctx));
  }

 private:
  void Return(std::unique_ptr<engine::Context> ctx) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_.push_back(std::move(ctx));
    }
    cv_.notify_one();
  }
  std::mutex mu_;  // guards free_
  std::condition_variable cv_;
  std::vector<std::unique_ptr<engine::Context>> free_;
};

const engine::Output& FindOutput(const std::vector<engine::Output>& outs, const std::string& name) {
  for (const auto& o : outs)
    if (o.name == name) return o;
  throw Error("engine run gave no output named '" + name + "'", Code::kInternal);
}

// Loads the cached plan, or builds and caches it; falls back to an in-memory build when the cache
// cannot be written (a read-only model folder).
std::shared_ptr<engine::Engine> LoadEngine(const ModelConfig& c, engine::BuildOptions b,
                                           bool use_cache, std::string* plan_path) {
  plan_path->clear();
  const bool have_onnx = fs::exists(c.onnx_file);
  // INT8 on the CPU: the folder's own calibration (int8_calibration.json, `hotline calibrate`).
  if (have_onnx) ApplyFolderInt8(c, &b);
  if (!use_cache) {
    if (!have_onnx) throw Error("ONNX file '" + c.onnx_file + "' not found", Code::kNotFound);
    return engine::Engine::BuildFromOnnx(c.onnx_file, b);
  }
  if (!have_onnx) {
    // A folder shipped with plans only: take a cached plan for this precision and backend.
    const std::string prefix = c.name + "-" + std::string(engine::PrecisionName(b.precision)) +
                               "-" + std::string(engine::BackendName(b.backend)) + "-";
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(fs::path(c.dir) / "cache", ec)) {
      const std::string f = e.path().filename().string();
      if (f.rfind(prefix, 0) == 0 && e.path().extension() == ".plan") {
        *plan_path = e.path().string();
        return engine::Engine::Load(*plan_path);
      }
    }
    throw Error("model folder '" + c.dir + "' has neither the ONNX file '" + c.onnx_file +
                    "' nor a cached " + prefix + "*.plan",
                Code::kNotFound);
  }
  const std::string path = PlanCachePath(c, b);
  if (fs::exists(path)) {
    try {
      *plan_path = path;
      return engine::Engine::Load(path);
    } catch (const std::exception& e) {  // stale (other hardware or format) or corrupt
      std::fprintf(stderr,
                   "hotline: WARNING: cached plan %s is unusable (%s); rebuilding it from %s\n",
                   path.c_str(), e.what(), c.onnx_file.c_str());
    }
  }
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string tmp =
      path.substr(0, path.size() - 5) + "-" + std::to_string(::getpid()) + ".plan.tmp";
  try {
    if (ec) throw Error("cannot create " + fs::path(path).parent_path().string());
    engine::BuildPlanFile(c.onnx_file, b, tmp);
    fs::rename(tmp, path);
  } catch (const std::exception& e) {
    fs::remove(tmp, ec);
    std::fprintf(stderr, "hotline: cannot cache a plan in %s (%s); building in memory\n",
                 path.c_str(), e.what());
    plan_path->clear();
    return engine::Engine::BuildFromOnnx(c.onnx_file, b);
  }
  *plan_path = path;
  return engine::Engine::Load(path);
}

// The plan's build options: the caller's precision and backend; model.yaml's profile unless the
// caller gave one; sequences capped at the model's max length.
engine::BuildOptions EngineOptions(const ModelConfig& config, const PipelineOptions& opts) {
  engine::BuildOptions b;
  b.precision = opts.precision;
  b.backend = opts.backend;
  b.profile = opts.profile;
  const engine::Profile defaults;
  if (!config.profile.empty() && b.profile.ToString() == defaults.ToString())
    b.profile = engine::Profile::Parse(config.profile);
  b.profile.max_seq = std::min(b.profile.max_seq, config.max_length);
  b.profile.opt_seq = std::min(b.profile.opt_seq, b.profile.max_seq);
  b.profile.min_seq = std::min(b.profile.min_seq, b.profile.opt_seq);
  return b;
}

// Softmax of logits / temperature (max-subtracted), and the k best indices, best first (ties:
// lower index first).
std::vector<float> Softmax(const float* logits, int n, float temperature) {
  std::vector<float> p(logits, logits + n);
  for (float& v : p) v /= temperature;
  const float mx = *std::max_element(p.begin(), p.end());
  double sum = 0;
  for (float& v : p) sum += (v = std::exp(v - mx));
  for (float& v : p) v = float(v / sum);
  return p;
}

std::vector<int> TopK(const std::vector<float>& p, int k) {
  std::vector<int> order(p.size());
  for (size_t i = 0; i < p.size(); ++i) order[i] = int(i);
  k = std::min<int>(k, int(p.size()));
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int x, int y) { return p[x] > p[y] || (p[x] == p[y] && x < y); });
  order.resize(k);
  return order;
}

class PipelineImpl : public Pipeline {
 public:
  PipelineImpl(ModelConfig config, const PipelineOptions& opts)
      : opts_(opts),
        config_(std::move(config)),
        taxonomy_(Taxonomy::Load(config_.taxonomy_file)),
        labels_(Labels::Load(config_.labels_file, taxonomy_)),
        tags_(labels_.slot_tags) {
    if (opts_.top_k < 1) throw Error("top_k must be at least 1");
    const engine::BuildOptions b = EngineOptions(config_, opts);
    engine_ = LoadEngine(config_, b, opts.use_plan_cache, &plan_path_);
    profile_ = engine_->info().profile;
    CheckOutputs();

    text::TokenizerOptions t;
    t.lowercase = config_.lowercase;
    t.normalize_width = config_.normalize_width;
    t.max_length = std::min(config_.max_length, profile_.max_seq);
    tokenizer_ = std::make_unique<text::Tokenizer>(
        std::make_shared<const text::Vocab>(text::Vocab::Load(config_.vocab_file)), t);
    pool_ = std::make_unique<ContextPool>(*engine_, opts.contexts);
  }

  std::vector<Understanding> Understand(
      const std::vector<std::string>& texts,
      std::chrono::system_clock::time_point reference_time) override {
    std::vector<Understanding> results(texts.size());
    std::vector<std::vector<char32_t>> cps(texts.size());
    std::vector<text::Encoding> encs(texts.size());
    std::vector<int> todo;  // texts that go to the engine
    ParallelFor(texts.size(), [&](size_t i) {
      try {
        text::DecodeUtf8(texts[i], &cps[i]);
      } catch (const Error& e) {
        throw Error("text " + std::to_string(i) + ": " + e.what(), Code::kInvalidArgument);
      }
      encs[i] = tokenizer_->Encode(cps[i]);
      results[i].truncated = encs[i].truncated;
      results[i].num_tokens = int(encs[i].ids.size());
    });
    for (size_t i = 0; i < texts.size(); ++i) {
      if (encs[i].ids.size() <= 2) {
        SetIntent(&results[i], "out_of_scope", 0.0f);
      } else {
        todo.push_back(int(i));
      }
    }
    const int max_batch = std::max(1, profile_.max_batch);
    for (size_t a = 0; a < todo.size(); a += max_batch) {
      const size_t b = std::min(todo.size(), a + max_batch);
      engine::PackedBatch batch;
      batch.cu_seqlens.push_back(0);
      for (size_t k = a; k < b; ++k) {
        const auto& ids = encs[todo[k]].ids;
        batch.input_ids.insert(batch.input_ids.end(), ids.begin(), ids.end());
        batch.cu_seqlens.push_back(int32_t(batch.input_ids.size()));
      }
      batch.token_type_ids.assign(batch.input_ids.size(), 0);
      std::vector<engine::Output> outs;
      {
        auto ctx = pool_->Borrow();
        ctx->Run(batch, &outs);
      }
      const engine::Output& intents = FindOutput(outs, config_.intent_output);
      const engine::Output& slots = FindOutput(outs, config_.slot_output);
      const int n_int = int(labels_.intents.size()), n_tag = tags_.size();
      if (intents.data.size() != size_t(batch.batch()) * n_int ||
          slots.data.size() != size_t(batch.total_tokens()) * n_tag)
        throw Error("engine outputs have unexpected sizes", Code::kInternal);
      ParallelFor(b - a, [&](size_t s) {
        const int i = todo[a + s];
        Decode(&intents.data[s * n_int], &slots.data[size_t(batch.cu_seqlens[s]) * n_tag],
               encs[i], cps[i], reference_time, &results[i]);
      });
    }
    return results;
  }

  const ModelConfig& config() const override { return config_; }
  const engine::PlanInfo& plan_info() const override { return engine_->info(); }
  const Taxonomy& taxonomy() const override { return taxonomy_; }
  const Labels& labels() const override { return labels_; }
  const ClassifierLabels& classifier_labels() const override { return no_heads_; }
  std::string plan_path() const override { return plan_path_; }

 private:
  void CheckOutputs() const {
    const auto& info = engine_->info();
    auto check = [&](const std::string& name, engine::Output::Kind kind, size_t n,
                     const char* what) {
      for (const auto& o : info.outputs) {
        if (o.name != name) continue;
        if (o.kind != kind || o.inner_shape.size() != 1 || size_t(o.inner_shape[0]) != n) {
          std::string shape;
          for (auto d : o.inner_shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
          throw Error("model '" + config_.dir + "': output '" + name + "' has inner shape [" +
                      shape + "] but labels.json lists " + std::to_string(n) + " " + what);
        }
        return;
      }
      throw Error("model '" + config_.dir + "' has no output named '" + name + "'");
    };
    check(config_.intent_output, engine::Output::Kind::kPerSequence, labels_.intents.size(),
          "intents");
    check(config_.slot_output, engine::Output::Kind::kPerToken, labels_.slot_tags.size(),
          "slot tags");
  }

  void SetIntent(Understanding* u, const std::string& intent, float p) const {
    u->intent = intent;
    u->confidence = p;
    if (const IntentInfo* info = taxonomy_.FindIntent(intent)) {
      u->department = info->dept;
      u->business_line = info->line;
      u->category = info->category;
      u->category_name = taxonomy_.CategoryName(info->category);
    }
  }

  void Decode(const float* intent_logits, const float* slot_logits, const text::Encoding& enc,
              const std::vector<char32_t>& text,
              std::chrono::system_clock::time_point reference_time, Understanding* u) const {
    const int n_int = int(labels_.intents.size()), n_tag = tags_.size();
    // Softmax at the folder's calibration temperature (1 when model.yaml gives none).
    const std::vector<float> p = Softmax(intent_logits, n_int, config_.intent_temperature);
    const std::vector<int> order = TopK(p, opts_.top_k);
    for (int k : order) u->top_k.push_back({labels_.intents[k], p[k]});
    SetIntent(u, labels_.intents[order[0]], p[order[0]]);

    // Slots over the tokens between [CLS] and [SEP].
    const int n_tok = int(enc.ids.size());
    std::vector<int> tag_ids;
    std::vector<text::Span> offsets;
    for (int t = 1; t + 1 < n_tok; ++t) {
      const float* row = slot_logits + size_t(t) * n_tag;
      tag_ids.push_back(int(std::max_element(row, row + n_tag) - row));
      offsets.push_back(enc.offsets[t]);
    }
    if (opts_.debug_tokens) {
      u->token_ids.assign(enc.ids.begin(), enc.ids.end());
      for (int t = 0; t < n_tok; ++t) {
        const float* row = slot_logits + size_t(t) * n_tag;
        u->token_tags.push_back(labels_.slot_tags[std::max_element(row, row + n_tag) - row]);
      }
    }
    const auto spans = ToCharSpans(DecodeBio(tags_, tag_ids), offsets, text);
    if (spans.empty()) return;
    std::string utf8;
    for (const CharSpan& s : spans) {
      Slot slot;
      slot.type = tags_.type_names()[s.type];
      slot.start = s.start;
      slot.end = s.end;
      for (int c = s.start; c < s.end; ++c) text::AppendUtf8(text[c], &slot.value);
      if (HasNormalizer(slot.type)) {
        Normalized n = NormalizeSlot(slot.type, slot.value, reference_time);
        slot.normalized = std::move(n.value);
        slot.valid = n.valid;
      }
      u->slots.push_back(std::move(slot));
    }
  }

  PipelineOptions opts_;
  ModelConfig config_;
  Taxonomy taxonomy_;
  Labels labels_;
  TagSet tags_;
  std::shared_ptr<engine::Engine> engine_;
  engine::Profile profile_;
  std::string plan_path_;
  std::unique_ptr<text::Tokenizer> tokenizer_;
  std::unique_ptr<ContextPool> pool_;
  const ClassifierLabels no_heads_;
};

// kind: classifier. One softmax per head over that head's labels; no taxonomy, no slots.
class ClassifierImpl : public Pipeline {
 public:
  ClassifierImpl(ModelConfig config, const PipelineOptions& opts)
      : opts_(opts),
        config_(std::move(config)),
        labels_(ClassifierLabels::Load(config_.labels_file, config_)),
        top_k_(opts.head_top_k > 0 ? opts.head_top_k : config_.top_k) {
    const engine::BuildOptions b = EngineOptions(config_, opts);
    engine_ = LoadEngine(config_, b, opts.use_plan_cache, &plan_path_);
    const engine::Profile profile = engine_->info().profile;
    max_tokens_ = std::min(config_.max_length, profile.max_seq);
    max_batch_ = std::max(1, profile.max_batch);
    CheckOutputs();
    text::TokenizerOptions t;
    t.lowercase = config_.lowercase;
    t.normalize_width = config_.normalize_width;
    // Whole texts: long_text decides which tokens the model sees (KeptTokens).
    t.max_length = std::numeric_limits<int>::max() / 2;
    tokenizer_ = std::make_unique<text::Tokenizer>(
        std::make_shared<const text::Vocab>(text::Vocab::Load(config_.vocab_file)), t);
    pool_ = std::make_unique<ContextPool>(*engine_, opts.contexts);
  }

  std::vector<Understanding> Understand(const std::vector<std::string>& texts,
                                        std::chrono::system_clock::time_point) override {
    std::vector<Understanding> results(texts.size());
    std::vector<std::vector<int32_t>> ids(texts.size());
    ParallelFor(texts.size(), [&](size_t i) {
      std::vector<char32_t> cps;
      try {
        text::DecodeUtf8(texts[i], &cps);
      } catch (const Error& e) {
        throw Error("text " + std::to_string(i) + ": " + e.what(), Code::kInvalidArgument);
      }
      const text::Encoding enc = tokenizer_->Encode(cps);
      const std::vector<int> keep =
          KeptTokens(int(enc.ids.size()), max_tokens_, config_.long_text);
      for (int k : keep) ids[i].push_back(enc.ids[k]);
      results[i].truncated = keep.size() < enc.ids.size();
      results[i].num_tokens = int(ids[i].size());
      if (opts_.debug_tokens) results[i].token_ids.assign(ids[i].begin(), ids[i].end());
    });
    std::vector<int> todo;  // texts with content go to the engine
    for (size_t i = 0; i < texts.size(); ++i) {
      if (ids[i].size() > 2) {
        todo.push_back(int(i));
      } else {  // nothing to classify: every head answers "" with score 0
        for (const ClassifierHead& head : config_.heads) {
          HeadResult r;
          r.head = head.name;
          results[i].heads.push_back(std::move(r));
        }
      }
    }
    for (size_t a = 0; a < todo.size(); a += max_batch_) {
      const size_t b = std::min(todo.size(), a + size_t(max_batch_));
      engine::PackedBatch batch;
      batch.cu_seqlens.push_back(0);
      for (size_t k = a; k < b; ++k) {
        const auto& v = ids[todo[k]];
        batch.input_ids.insert(batch.input_ids.end(), v.begin(), v.end());
        batch.cu_seqlens.push_back(int32_t(batch.input_ids.size()));
      }
      batch.token_type_ids.assign(batch.input_ids.size(), 0);
      std::vector<engine::Output> outs;
      {
        auto ctx = pool_->Borrow();
        ctx->Run(batch, &outs);
      }
      for (size_t h = 0; h < config_.heads.size(); ++h) {
        const ClassifierHead& head = config_.heads[h];
        const std::vector<std::string>& labels = labels_.heads[h];
        const engine::Output& out = FindOutput(outs, head.output);
        const int n = int(labels.size());
        if (out.data.size() != size_t(batch.batch()) * n)
          throw Error("engine output '" + head.output + "' has an unexpected size",
                      Code::kInternal);
        for (size_t s = 0; s < b - a; ++s) {
          Understanding& u = results[todo[a + s]];
          const std::vector<float> p = Softmax(&out.data[s * n], n, head.temperature);
          HeadResult r;
          r.head = head.name;
          for (int k : TopK(p, top_k_)) r.top_k.push_back({labels[k], p[k]});
          r.label = r.top_k[0].label;
          r.score = r.top_k[0].score;
          if (head.name == "department") u.department = r.label;
          u.heads.push_back(std::move(r));
        }
      }
    }
    return results;
  }

  const ModelConfig& config() const override { return config_; }
  const engine::PlanInfo& plan_info() const override { return engine_->info(); }
  const Taxonomy& taxonomy() const override { return no_taxonomy_; }
  const Labels& labels() const override { return no_labels_; }
  const ClassifierLabels& classifier_labels() const override { return labels_; }
  std::string plan_path() const override { return plan_path_; }

 private:
  // Every head's output is per sequence with as many values as its labels.json list.
  void CheckOutputs() const {
    const auto& info = engine_->info();
    for (size_t h = 0; h < config_.heads.size(); ++h) {
      const ClassifierHead& head = config_.heads[h];
      const size_t n = labels_.heads[h].size();
      const engine::OutputInfo* found = nullptr;
      for (const auto& o : info.outputs)
        if (o.name == head.output) found = &o;
      if (!found) {
        std::string names;
        for (const auto& o : info.outputs) names += (names.empty() ? "" : ", ") + o.name;
        throw Error("model '" + config_.dir + "' has no output named '" + head.output +
                    "' (head '" + head.name + "'); its outputs: " + names);
      }
      if (found->kind != engine::Output::Kind::kPerSequence || found->inner_shape.size() != 1 ||
          size_t(found->inner_shape[0]) != n) {
        std::string shape;
        for (auto d : found->inner_shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
        const bool per_token = found->kind == engine::Output::Kind::kPerToken;
        throw Error("model '" + config_.dir + "': output '" + head.output + "' is " +
                    (per_token ? "per token" : "per sequence") +
                    " with inner shape [" + shape + "] but labels.json lists " +
                    std::to_string(n) + " labels for head '" + head.name +
                    "' (expected per sequence [" + std::to_string(n) + "])");
      }
    }
  }

  PipelineOptions opts_;
  ModelConfig config_;
  ClassifierLabels labels_;
  int top_k_;
  std::shared_ptr<engine::Engine> engine_;
  std::string plan_path_;
  int max_tokens_ = 0, max_batch_ = 1;
  std::unique_ptr<text::Tokenizer> tokenizer_;
  std::unique_ptr<ContextPool> pool_;
  const Taxonomy no_taxonomy_;
  const Labels no_labels_;
};

}  // namespace

std::unique_ptr<Pipeline> Pipeline::Open(const std::string& model_dir,
                                         const PipelineOptions& opts) {
  ModelConfig config = ModelConfig::Load(model_dir);
  if (config.kind == "classifier") return std::make_unique<ClassifierImpl>(std::move(config), opts);
  return std::make_unique<PipelineImpl>(std::move(config), opts);
}

}  // namespace hotline::nlu
