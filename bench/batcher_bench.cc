// In-process benchmark of the serving core: a model folder loaded as `hotline serve` loads it
// (nlu::Pipeline through serving::PipelineModelLoader, `instances` engine contexts), behind the
// dynamic batcher (serving::Batcher), fed a fixed set of requests of given token lengths, all
// arriving at once (PERFORMANCE.md G4: 1024 requests of 8..128 tokens). Each request is one text
// through the whole pipeline: tokenizer, packed padding-free engine batch, intent and slot
// decoding, normalisers. No network: this is the throughput the batcher and the engine give.
//
//   hotline_batcher_bench --model-dir DIR [--backend cuda|cpu] [--precision fp16|...]
//       [--instances N] [--max-batch B] [--max-batch-tokens T] [--delay-us U]
//       [--lengths FILE | --requests N --min-len A --max-len B] [--passes P] [--json]
//
// Lengths are tokens including [CLS] and [SEP]; a request of L tokens is L - 2 Chinese
// characters drawn from the model's vocabulary (one token each). Prints one line (or JSON with
// --json): requests/s of the median pass, per-request latency percentiles, executions and their
// mean batch size.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "serving/batcher.h"
#include "serving/model.h"

namespace {

using Clock = std::chrono::steady_clock;

// Single-character Chinese tokens of the vocabulary (3-byte UTF-8, no "##").
std::vector<std::string> ChineseTokens(const std::string& vocab_path) {
  std::ifstream in(vocab_path);
  if (!in) throw hotline::Error("cannot read " + vocab_path);
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() == 3 && (static_cast<unsigned char>(line[0]) & 0xF0) == 0xE0) {
      out.push_back(line);
    }
  }
  if (out.size() < 100) throw hotline::Error(vocab_path + ": fewer than 100 Chinese characters");
  return out;
}

double Pct(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, size_t(q * (v.size() - 1) + 0.5))];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"In-process load on the serving core: batcher + pipeline + engine"};
  std::string dir, backend = "cuda", precision = "fp16", lengths_file;
  int instances = 4, max_batch = 128, max_batch_tokens = 16384, delay_us = 2000, passes = 5;
  int requests = 1024, min_len = 8, max_len = 128;
  bool json = false;
  app.add_option("--model-dir", dir, "model folder (model.yaml, model.onnx, vocab.txt, ...)")
      ->required();
  app.add_option("--backend", backend, "cpu or cuda");
  app.add_option("--precision", precision, "fp32, fp16, bf16, int8, fp8");
  app.add_option("--instances", instances, "engine contexts (batcher workers)");
  app.add_option("--max-batch", max_batch, "sequences per execution");
  app.add_option("--max-batch-tokens", max_batch_tokens, "estimated tokens per execution");
  app.add_option("--delay-us", delay_us, "longest wait to fill a batch");
  app.add_option("--lengths", lengths_file, "token lengths, one per line (one request each)");
  app.add_option("--requests", requests, "without --lengths: this many uniform lengths");
  app.add_option("--min-len", min_len, "without --lengths: shortest request (tokens)");
  app.add_option("--max-len", max_len, "without --lengths: longest request (tokens)");
  app.add_option("--passes", passes, "timed passes (the median is reported)");
  app.add_flag("--json", json, "print one JSON object");
  CLI11_PARSE(app, argc, argv);
  try {
    namespace hs = hotline::serving;
    std::vector<int> lengths;
    if (!lengths_file.empty()) {
      std::ifstream in(lengths_file);
      if (!in) throw hotline::Error("cannot read " + lengths_file);
      for (int L; in >> L;) lengths.push_back(L);
    } else {
      std::mt19937_64 rng(20261130);
      for (int i = 0; i < requests; ++i) lengths.push_back(min_len + int(rng() % (max_len - min_len + 1)));
    }
    if (lengths.empty()) throw hotline::Error("no request lengths");
    for (int L : lengths) {
      if (L < 3) throw hotline::Error("request lengths must be >= 3 tokens, got " + std::to_string(L));
    }

    hs::ModelSpec spec = hs::ModelSpec::Load(dir);
    spec.instances = instances;
    spec.batching.max_batch_size = max_batch;
    spec.batching.max_batch_tokens = max_batch_tokens;
    spec.batching.max_queue_delay = std::chrono::microseconds(delay_us);
    spec.batching.max_queue_size = int(lengths.size()) + 16;
    hs::PipelineModelOptions po;
    po.backend = hotline::engine::ParseBackend(backend);
    po.precision = hotline::engine::ParsePrecision(precision);
    const auto t_load = Clock::now();
    std::unique_ptr<hs::ServableModel> model = hs::PipelineModelLoader(po)(spec);
    hs::WarmUp(*model, hs::WarmupShapes(model->profile(), max_batch, model->max_length()));
    const double load_s = std::chrono::duration<double>(Clock::now() - t_load).count();

    const std::vector<std::string> chars = ChineseTokens(dir + "/vocab.txt");
    std::mt19937_64 rng(7);
    std::vector<std::string> texts;
    for (int L : lengths) {
      std::string t;
      for (int i = 0; i < L - 2; ++i) t += chars[rng() % chars.size()];
      texts.push_back(std::move(t));
    }

    hs::Batcher batcher(spec.name, model.get(), spec.batching, instances, nullptr);
    std::vector<double> pass_ms, lat_ms;
    uint64_t errors = 0;
    for (int p = 0; p <= passes; ++p) {  // pass 0 is untimed (first use of every bucket)
      std::mutex mu;
      std::condition_variable cv;
      size_t left = texts.size();
      std::vector<double> lat(texts.size());
      const auto t0 = Clock::now();
      for (size_t i = 0; i < texts.size(); ++i) {
        hs::WorkItem w;
        w.text = texts[i];
        w.done = [&, i](hs::ItemResult r) {
          lat[i] = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
          std::lock_guard<std::mutex> lock(mu);
          if (!r.status.ok()) ++errors;
          if (--left == 0) cv.notify_all();
        };
        std::vector<hs::WorkItem> one;
        one.push_back(std::move(w));
        const hotline::Status st = batcher.Enqueue(std::move(one));
        if (!st.ok()) throw hotline::Error("enqueue refused: " + st.message());
      }
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return left == 0; });
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (p > 0) {
        pass_ms.push_back(ms);
        lat_ms.insert(lat_ms.end(), lat.begin(), lat.end());
      }
    }
    const uint64_t execs = batcher.executions(), infs = batcher.inferences();
    batcher.Stop();
    const double med = Pct(pass_ms, 0.5);
    nlohmann::json J = {
        {"model_dir", dir}, {"backend", backend}, {"precision", precision},
        {"instances", instances}, {"max_batch", max_batch}, {"max_batch_tokens", max_batch_tokens},
        {"delay_us", delay_us}, {"requests", texts.size()}, {"passes", passes},
        {"mean_tokens", double(std::accumulate(lengths.begin(), lengths.end(), 0LL)) / lengths.size()},
        {"pass_ms_median", med}, {"pass_ms_all", pass_ms},
        {"requests_per_s", texts.size() / med * 1e3},
        {"latency_ms", {{"p50", Pct(lat_ms, 0.5)}, {"p99", Pct(lat_ms, 0.99)},
                        {"max", Pct(lat_ms, 1.0)}}},
        {"executions", execs}, {"mean_batch", execs ? double(infs) / execs : 0.0},
        {"errors", errors}, {"load_and_warmup_s", load_s}};
    if (json) {
      std::printf("%s\n", J.dump().c_str());
    } else {
      std::printf("%zu requests (mean %.1f tokens), %s %s, %d instances: %.0f requests/s "
                  "(median of %d passes, %.2f ms), latency p50 %.2f ms p99 %.2f ms, mean batch "
                  "%.1f, errors %llu\n",
                  texts.size(), J["mean_tokens"].get<double>(), backend.c_str(), precision.c_str(),
                  instances, J["requests_per_s"].get<double>(), passes, med,
                  J["latency_ms"]["p50"].get<double>(), J["latency_ms"]["p99"].get<double>(),
                  J["mean_batch"].get<double>(), static_cast<unsigned long long>(errors));
    }
    return errors ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hotline_batcher_bench: %s\n", e.what());
    return 1;
  }
}
