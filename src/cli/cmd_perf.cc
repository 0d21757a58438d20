// `hotline perf --plan M.plan --batch B --seq S [--iters N] [--varlen] [--contexts C]
// [--devices 0,1]`: one JSON line with latency percentiles and throughput of Context::Run on
// random token ids. Warm-up runs first (not timed); --varlen draws each sequence's length
// uniformly from [max(1, S/4), S] (fixed seed) and packs them, as the serving path does.
// --contexts runs C contexts at once, one thread each (throughput is their sum); --devices loads a
// CUDA plan once per listed GPU and deals the contexts out over them.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "base/error.h"
#include "cli/command.h"
#include "engine/engine.h"

namespace {

struct Options {
  std::string plan;
  int batch = 1, seq = 32, iters = 100, warmup = -1, contexts = 1;
  bool varlen = false;
  std::vector<int> devices;
};

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const size_t k = std::min(v.size() - 1, size_t(q * double(v.size() - 1) + 0.5));
  return v[k];
}

hotline::cli::Registrar reg("perf", "Time a plan on random input", [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--plan", o->plan, "plan file")->required();
  app.add_option("--batch", o->batch, "sequences per run")->required();
  app.add_option("--seq", o->seq, "tokens per sequence (the maximum with --varlen)")->required();
  app.add_option("--iters", o->iters, "timed runs");
  app.add_option("--warmup", o->warmup, "untimed runs first (default max(3, iters/10))");
  app.add_flag("--varlen", o->varlen, "mixed sequence lengths in [seq/4, seq]");
  app.add_option("--contexts", o->contexts, "contexts run at once, one thread each (default 1)");
  app.add_option("--devices", o->devices, "CUDA: GPUs to spread the contexts over, e.g. 0,1")
      ->delimiter(',');
  return [o]() -> int {
    using namespace hotline::engine;
    if (o->iters < 1 || o->batch < 1 || o->seq < 1 || o->contexts < 1) {
      throw hotline::Error("--batch, --seq, --iters and --contexts must be positive");
    }
    auto engine = o->devices.empty() ? Engine::Load(o->plan) : Engine::Load(o->plan, o->devices);
    // Before the batch is made: a shape past the profile would be refused only after filling
    // batch x seq token ids (2^31 x 2^31 never finishes).
    engine->info().profile.Check(o->batch, o->seq);
    std::vector<std::unique_ptr<Context>> ctxs;
    for (int c = 0; c < o->contexts; ++c) ctxs.push_back(engine->CreateContext());
    std::mt19937 rng(42);
    PackedBatch b;
    b.cu_seqlens.push_back(0);
    for (int r = 0; r < o->batch; ++r) {
      const int len = o->varlen ? std::uniform_int_distribution<int>(std::max(1, o->seq / 4),
                                                                      o->seq)(rng)
                                : o->seq;
      for (int s = 0; s < len; ++s) {
        b.input_ids.push_back(s == 0 ? 1 : std::uniform_int_distribution<int>(1, 99)(rng));
        b.token_type_ids.push_back(0);
      }
      b.cu_seqlens.push_back(int(b.input_ids.size()));
    }
    const int warm = o->warmup >= 0 ? o->warmup : std::max(3, o->iters / 10);
    std::vector<std::vector<double>> per(ctxs.size());
    std::vector<std::string> errors(ctxs.size());
    auto work = [&](size_t c, bool timed) {
      try {
        std::vector<Output> outs;
        const int n = timed ? o->iters : warm;
        for (int k = 0; k < n; ++k) {
          const auto t0 = std::chrono::steady_clock::now();
          ctxs[c]->Run(b, &outs);
          if (timed) {
            per[c].push_back(std::chrono::duration<double, std::milli>(
                                 std::chrono::steady_clock::now() - t0).count());
          }
        }
      } catch (const std::exception& e) {
        errors[c] = e.what();
      }
    };
    auto run_all = [&](bool timed) {
      std::vector<std::thread> th;
      for (size_t c = 1; c < ctxs.size(); ++c) th.emplace_back(work, c, timed);
      work(0, timed);
      for (auto& t : th) t.join();
      for (const auto& e : errors) {
        if (!e.empty()) throw hotline::Error(e);
      }
    };
    run_all(false);
    const auto start = std::chrono::steady_clock::now();
    run_all(true);
    const double total_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::vector<double> ms;
    for (const auto& v : per) ms.insert(ms.end(), v.begin(), v.end());
    struct rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    nlohmann::json j = {
        {"batch", o->batch}, {"seq", o->seq}, {"iters", o->iters}, {"varlen", o->varlen},
        {"tokens", b.total_tokens()}, {"contexts", o->contexts}, {"devices", o->devices},
        {"precision", PrecisionName(engine->info().precision)},
        {"latency_ms", {{"p50", Percentile(ms, 0.5)}, {"p90", Percentile(ms, 0.9)},
                        {"p99", Percentile(ms, 0.99)}, {"mean", total_s * 1e3 / o->iters}}},
        {"seq_per_s", double(o->batch) * o->iters * o->contexts / total_s},
        {"peak_rss_mb", double(ru.ru_maxrss) / 1024.0}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  };
});

}  // namespace
