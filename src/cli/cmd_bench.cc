// `hotline bench --target HOST:PORT (--concurrency N | --rate R) --duration S --texts FILE
// [--json]`: a gRPC load generator for hotline.v1.Hotline/Understand.
//   closed loop (--concurrency N): N calls always outstanding; each answer sends the next.
//   open loop (--rate R): calls start at Poisson arrivals of mean rate R per second whatever the
//   answers do, so queueing shows in the latency (no coordinated omission).
// Reports requests answered OK, errors (by code), achieved requests/s and latency percentiles of
// the OK calls; --json prints one object with requests, errors, rps, latency_ms{p50,p90,p99,p999},
// and refusal_latency_ms{p50,p99,max}: how long the failed calls took to fail (load shedding
// must be quick). With --timeout-ms every OK call was answered within its deadline.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "base/error.h"
#include "cli/command.h"
#include "frontends/hotline_grpc.h"

namespace {

using Clock = std::chrono::steady_clock;

struct BenchOptions {
  std::string target;
  int concurrency = 0;
  double rate = 0;
  double duration_s = 10;
  double warmup_s = 1;
  std::string texts;
  std::string model;
  double timeout_ms = 0;
  bool json = false;
};

std::vector<std::string> ReadTexts(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw hotline::Error("cannot read texts file " + path, hotline::Code::kNotFound);
  std::vector<std::string> texts;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line[0] == '{') {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.contains("text") || !j["text"].is_string()) {
        throw hotline::Error(path + ": a JSON line needs a string \"text\"");
      }
      texts.push_back(j["text"]);
    } else {
      texts.push_back(line);
    }
  }
  if (texts.empty()) throw hotline::Error(path + " holds no texts");
  return texts;
}

class Runner {
 public:
  Runner(const BenchOptions& o, std::vector<std::string> texts) : o_(o), texts_(std::move(texts)) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(16 << 20);
    stub_ = hotline::v1::Hotline::NewStub(
        grpc::CreateCustomChannel(o.target, grpc::InsecureChannelCredentials(), args));
  }

  nlohmann::json Run() {
    // Warm-up period: calls are made but not recorded.
    const Clock::time_point start = Clock::now();
    record_from_ = start + ToDuration(o_.warmup_s);
    end_ = record_from_ + ToDuration(o_.duration_s);
    if (o_.concurrency > 0) {
      for (int i = 0; i < o_.concurrency; ++i) Issue();
    } else {
      std::mt19937_64 rng(12345);
      std::exponential_distribution<double> gap(o_.rate);
      Clock::time_point next = Clock::now();
      while (next < end_) {
        std::this_thread::sleep_until(next);
        Issue();
        next += ToDuration(gap(rng));
      }
    }
    std::unique_lock<std::mutex> lock(mu_);
    while (outstanding_ > 0 || Clock::now() < end_) {
      cv_.wait_for(lock, std::chrono::milliseconds(10));
    }
    return Report();
  }

 private:
  static Clock::duration ToDuration(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }

  struct Call {
    grpc::ClientContext ctx;
    hotline::v1::UnderstandRequest req;
    hotline::v1::UnderstandResponse resp;
    Clock::time_point sent;
  };

  // `counted`: the caller already holds an outstanding_ slot for this call (a closed-loop
  // re-issue keeps its slot, so Run() can never see zero outstanding between two calls).
  void Issue(bool counted = false) {
    auto* call = new Call;
    const size_t i = next_text_.fetch_add(1) % texts_.size();
    call->req.set_text(texts_[i]);
    call->req.set_model(o_.model);
    if (o_.timeout_ms > 0) {
      call->ctx.set_deadline(std::chrono::system_clock::now() +
                             std::chrono::microseconds(int64_t(o_.timeout_ms * 1000)));
    }
    if (!counted) {
      std::lock_guard<std::mutex> lock(mu_);
      ++outstanding_;
    }
    call->sent = Clock::now();
    stub_->async()->Understand(&call->ctx, &call->req, &call->resp,
                               [this, call](grpc::Status s) { Done(call, s); });
  }

  void Done(Call* call, const grpc::Status& s) {
    const Clock::time_point now = Clock::now();
    bool again = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (call->sent >= record_from_ && now <= end_) {
        if (s.ok()) {
          latencies_ms_.push_back(
              std::chrono::duration<double, std::milli>(now - call->sent).count());
        } else {
          const double ms = std::chrono::duration<double, std::milli>(now - call->sent).count();
          error_latencies_ms_.push_back(ms);
          error_latencies_by_code_[s.error_code()].push_back(ms);
          ++errors_[s.error_code()];
          if (first_error_.empty()) first_error_ = s.error_message();
        }
      }
      again = o_.concurrency > 0 && now < end_;
    }
    // The call (and its ClientContext) is destroyed before its outstanding_ slot is released:
    // once outstanding_ reaches zero, Run() returns and the Runner and channel go away, so
    // nothing of this call may be touched after that.
    delete call;
    if (again) {
      Issue(/*counted=*/true);
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    --outstanding_;
    cv_.notify_all();
  }

  static double Percentile(const std::vector<double>& sorted, double p) {
    if (sorted.empty()) return 0.0;
    size_t k = size_t(p / 100.0 * double(sorted.size() - 1) + 0.5);
    return sorted[std::min(k, sorted.size() - 1)];
  }

  nlohmann::json Report() {
    std::sort(latencies_ms_.begin(), latencies_ms_.end());
    std::sort(error_latencies_ms_.begin(), error_latencies_ms_.end());
    auto pct = [&](double p) { return Percentile(latencies_ms_, p); };
    int64_t errors = 0;
    nlohmann::json by_code = nlohmann::json::object();
    nlohmann::json p99_by_code = nlohmann::json::object();
    for (auto [code, n] : errors_) {
      errors += n;
      by_code[std::to_string(int(code))] = n;
      std::vector<double>& l = error_latencies_by_code_[code];
      std::sort(l.begin(), l.end());
      p99_by_code[std::to_string(int(code))] = Percentile(l, 99);
    }
    nlohmann::json r = {{"target", o_.target},
                        {"mode", o_.concurrency > 0 ? "closed" : "open"},
                        {"concurrency", o_.concurrency},
                        {"rate", o_.rate},
                        {"duration_s", o_.duration_s},
                        {"requests", latencies_ms_.size()},
                        {"errors", errors},
                        {"errors_by_code", by_code},
                        {"rps", double(latencies_ms_.size()) / o_.duration_s},
                        {"latency_ms",
                         {{"p50", pct(50)},
                          {"p90", pct(90)},
                          {"p99", pct(99)},
                          {"p999", pct(99.9)},
                          {"max", latencies_ms_.empty() ? 0.0 : latencies_ms_.back()}}},
                        {"refusal_latency_ms",
                         {{"p50", Percentile(error_latencies_ms_, 50)},
                          {"p99", Percentile(error_latencies_ms_, 99)},
                          {"max", error_latencies_ms_.empty() ? 0.0
                                                              : error_latencies_ms_.back()},
                          {"p99_by_code", p99_by_code}}}};
    if (!first_error_.empty()) r["first_error"] = first_error_;
    return r;
  }

  const BenchOptions& o_;
  const std::vector<std::string> texts_;
  std::unique_ptr<hotline::v1::Hotline::Stub> stub_;
  std::atomic<size_t> next_text_{0};
  Clock::time_point record_from_, end_;
  std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  int64_t outstanding_ = 0;
  std::vector<double> latencies_ms_;
  std::vector<double> error_latencies_ms_;
  std::map<grpc::StatusCode, std::vector<double>> error_latencies_by_code_;
  std::map<grpc::StatusCode, int64_t> errors_;
  std::string first_error_;
};

hotline::cli::Registrar reg(
    "bench", "Load-test a running hotline serve over gRPC", [](CLI::App& app) {
      auto o = std::make_shared<BenchOptions>();
      app.add_option("--target", o->target, "HOST:PORT of the gRPC service")->required();
      auto* conc = app.add_option("--concurrency", o->concurrency, "Closed loop: calls in flight");
      auto* rate = app.add_option("--rate", o->rate, "Open loop: Poisson arrivals per second");
      conc->excludes(rate);
      app.add_option("--duration", o->duration_s, "Seconds measured")->required();
      app.add_option("--warmup", o->warmup_s, "Seconds run before measuring (default 1)");
      app.add_option("--texts", o->texts, "Texts, one per line (or JSON lines with \"text\")")
          ->required();
      app.add_option("--model", o->model, "Model name (default: the server's)");
      app.add_option("--timeout-ms", o->timeout_ms, "Per-call deadline (default none)");
      app.add_flag("--json", o->json, "Print one JSON object");
      return [o]() -> int {
        if ((o->concurrency > 0) == (o->rate > 0)) {
          throw hotline::Error("give exactly one of --concurrency N (N > 0) or --rate R (R > 0)");
        }
        if (o->duration_s <= 0) throw hotline::Error("--duration must be > 0");
        Runner runner(*o, ReadTexts(o->texts));
        nlohmann::json r = runner.Run();
        if (o->json) {
          std::printf("%s\n", r.dump().c_str());
        } else {
          std::printf(
              "%s %s: %lld ok, %lld errors, %.1f req/s; latency ms p50 %.2f p90 %.2f "
              "p99 %.2f p99.9 %.2f\n",
              r["mode"].get<std::string>().c_str(), o->target.c_str(),
              (long long)r["requests"].get<int64_t>(), (long long)r["errors"].get<int64_t>(),
              r["rps"].get<double>(), r["latency_ms"]["p50"].get<double>(),
              r["latency_ms"]["p90"].get<double>(), r["latency_ms"]["p99"].get<double>(),
              r["latency_ms"]["p999"].get<double>());
          if (r["errors"].get<int64_t>() > 0) {
            std::printf("errors took ms p50 %.2f p99 %.2f max %.2f\n",
                        r["refusal_latency_ms"]["p50"].get<double>(),
                        r["refusal_latency_ms"]["p99"].get<double>(),
                        r["refusal_latency_ms"]["max"].get<double>());
          }
          if (r.contains("first_error")) {
            std::printf("first error: %s\n", r["first_error"].get<std::string>().c_str());
          }
        }
        return 0;
      };
    });

}  // namespace
