#include "nlu/pipeline.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>

#include <unistd.h>

#include "base/error.h"
#include "nlu/bio.h"
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
std::shared_ptr<engine::Engine> LoadEngine(const ModelConfig& c, const engine::BuildOptions& b,
                                           bool use_cache, std::string* plan_path) {
  plan_path->clear();
  const bool have_onnx = fs::exists(c.onnx_file);
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
    } catch (const Error& e) {  // stale (other hardware or format): rebuild below
      std::fprintf(stderr, "hotline: cached plan %s is unusable (%s); rebuilding\n", path.c_str(),
                   e.what());
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

class PipelineImpl : public Pipeline {
 public:
  PipelineImpl(const std::string& dir, const PipelineOptions& opts)
      : opts_(opts),
        config_(ModelConfig::Load(dir)),
        taxonomy_(Taxonomy::Load(config_.taxonomy_file)),
        labels_(Labels::Load(config_.labels_file, taxonomy_)),
        tags_(labels_.slot_tags) {
    if (opts_.top_k < 1) throw Error("top_k must be at least 1");
    engine::BuildOptions b;
    b.precision = opts.precision;
    b.backend = opts.backend;
    b.profile = opts.profile;
    const engine::Profile defaults;
    if (!config_.profile.empty() && b.profile.ToString() == defaults.ToString())
      b.profile = engine::Profile::Parse(config_.profile);
    b.profile.max_seq = std::min(b.profile.max_seq, config_.max_length);
    b.profile.opt_seq = std::min(b.profile.opt_seq, b.profile.max_seq);
    b.profile.min_seq = std::min(b.profile.min_seq, b.profile.opt_seq);
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
    }
  }

  void Decode(const float* intent_logits, const float* slot_logits, const text::Encoding& enc,
              const std::vector<char32_t>& text,
              std::chrono::system_clock::time_point reference_time, Understanding* u) const {
    const int n_int = int(labels_.intents.size()), n_tag = tags_.size();
    // Softmax, max-subtracted.
    std::vector<float> p(intent_logits, intent_logits + n_int);
    const float mx = *std::max_element(p.begin(), p.end());
    double sum = 0;
    for (float& v : p) sum += (v = std::exp(v - mx));
    for (float& v : p) v = float(v / sum);
    std::vector<int> order(n_int);
    for (int k = 0; k < n_int; ++k) order[k] = k;
    const int k_top = std::min(opts_.top_k, n_int);
    std::partial_sort(order.begin(), order.begin() + k_top, order.end(),
                      [&](int x, int y) { return p[x] > p[y] || (p[x] == p[y] && x < y); });
    for (int k = 0; k < k_top; ++k) u->top_k.push_back({labels_.intents[order[k]], p[order[k]]});
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
};

}  // namespace

std::unique_ptr<Pipeline> Pipeline::Open(const std::string& model_dir,
                                         const PipelineOptions& opts) {
  return std::make_unique<PipelineImpl>(model_dir, opts);
}

}  // namespace hotline::nlu
