// The transport-agnostic serving core: what the gRPC, KServe and HTTP frontends call after they
// have parsed a request into native types. It validates input (so a bad text never reaches a
// batch shared with other callers), picks the model, admits the texts to its batcher, joins the
// answers, counts and logs. Errors come back as hotline::Status with codes that map one to one to
// gRPC and HTTP.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "serving/log.h"
#include "serving/model_repository.h"
#include "serving/serving_metrics.h"

namespace hotline::serving {

struct ServiceOptions {
  std::string default_model;     // used when a call names neither model nor business line
  std::string admin_token;       // "" disables LoadModel/UnloadModel
  int max_text_bytes = 16384;    // per text; longer is INVALID_ARGUMENT
  int max_texts_per_call = 256;  // UnderstandBatch
  Duration default_timeout = Duration::zero();  // applied when a call has no deadline; 0: none
  bool log_requests = true;                     // one structured line per call
};

struct UnderstandCall {
  std::string model;          // optional
  std::string business_line;  // optional; selects the model that declares it
  std::string request_id;     // optional; logged (masked), echoed
  std::string trace_id;       // optional; W3C trace-id of the caller's traceparent, logged
  std::vector<std::string> texts;
  std::optional<std::chrono::system_clock::time_point> reference_time;
  TimePoint deadline = TimePoint::max();
  std::function<bool()> cancelled;  // optional
  Priority priority = Priority::kBulk;  // dialog turns: kInteractive (batched first)
};

struct UnderstandReply {
  Status status;
  std::string model_name, model_version;
  std::vector<nlu::Understanding> results;  // one per text, in order, when status is OK
  double queue_seconds = 0;                 // the longest queue wait among the call's texts
  double compute_seconds = 0;               // the longest execution among the call's texts
};

class Service {
 public:
  Service(ServiceOptions options, ModelRepository* repository, ServingMetrics* metrics,
          Logger* logger);

  // Calls `done` exactly once: inline for refusals, otherwise from a batcher thread.
  void Understand(UnderstandCall call, std::function<void(UnderstandReply)> done);
  // Blocking convenience for callers without their own event loop (HTTP, tests).
  UnderstandReply UnderstandSync(UnderstandCall call);

  Status LoadModel(const std::string& admin_token, const std::string& name,
                   const std::string& version);
  Status UnloadModel(const std::string& admin_token, const std::string& name);
  std::vector<ModelStatus> ListModels() const { return repository_->List(); }
  ModelRepository& repository() { return *repository_; }

  // Startup: loads each named model (warm-up included) and then marks the service ready.
  // Returns the first failure; models that loaded keep serving.
  Status Start(const std::vector<std::string>& models);
  bool live() const { return true; }
  bool ready() const { return started_.load() && !draining_.load() && repository_->ready(); }
  // Graceful shutdown, step 1: refuse new calls with UNAVAILABLE (readiness goes false) and run
  // what is queued without waiting to fill batches.
  void BeginShutdown() {
    draining_.store(true);
    repository_->FlushAll();
  }
  bool draining() const { return draining_.load(); }
  // Step 2: answer everything queued, then unload.
  void FinishShutdown() { repository_->StopAll(); }

 private:
  Status CheckAdmin(const std::string& token) const;
  Status Validate(const UnderstandCall& call) const;
  void Finish(const UnderstandCall& call, const std::string& model, UnderstandReply reply,
              TimePoint start, std::function<void(UnderstandReply)>& done);
  // Shed calls (refused for load or shutdown) are counted, not logged one line each: at most one
  // "shed" line a second with the count since the last one.
  void LogShed(const std::string& model, const Status& status);

  const ServiceOptions options_;
  ModelRepository* const repository_;
  ServingMetrics* const metrics_;
  Logger* const logger_;
  std::atomic<bool> started_{false}, draining_{false};
  std::mutex shed_mu_;
  TimePoint shed_logged_{};
  uint64_t shed_unlogged_ = 0;
};

}  // namespace hotline::serving
