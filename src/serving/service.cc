#include "serving/service.h"

#include <algorithm>
#include <future>
#include <memory>
#include <mutex>

#include "base/echo.h"
#include "serving/utf8.h"

namespace hotline::serving {
namespace {

double Seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

// Shared by the texts of one call: the last one to finish replies.
struct Join {
  std::mutex mu;
  size_t remaining = 0;
  UnderstandReply reply;
  std::function<void(UnderstandReply)> done;
};

}  // namespace

Service::Service(ServiceOptions options, ModelRepository* repository, ServingMetrics* metrics,
                 Logger* logger)
    : options_(std::move(options)), repository_(repository), metrics_(metrics), logger_(logger) {}

Status Service::Start(const std::vector<std::string>& models) {
  Status first;
  for (const std::string& name : models) {
    try {
      repository_->Load(name);
      if (logger_) logger_->Info("model_loaded", {{"model", name}});
    } catch (const Error& e) {
      if (logger_) logger_->Error("model_load_failed", {{"model", name}, {"error", e.what()}});
      if (first.ok()) first = Status::FromError(e);
    }
  }
  started_.store(true);
  return first;
}

Status Service::CheckAdmin(const std::string& token) const {
  if (options_.admin_token.empty()) {
    return Status(Code::kPermissionDenied,
                  "administration is disabled: the server has no admin_token configured");
  }
  if (token.empty()) {
    return Status(Code::kUnauthenticated, "administration needs the admin token");
  }
  if (token != options_.admin_token) return Status(Code::kPermissionDenied, "wrong admin token");
  return Status::Ok();
}

Status Service::LoadModel(const std::string& admin_token, const std::string& name,
                          const std::string& version) {
  HOTLINE_RETURN_IF_ERROR(CheckAdmin(admin_token));
  if (name.empty()) return Status(Code::kInvalidArgument, "LoadModel needs a model name");
  try {
    repository_->Load(name, version);
    if (logger_) logger_->Info("model_loaded", {{"model", name}, {"version", version}});
    return Status::Ok();
  } catch (const Error& e) {
    if (logger_) logger_->Error("model_load_failed", {{"model", name}, {"error", e.what()}});
    return Status::FromError(e);
  }
}

Status Service::UnloadModel(const std::string& admin_token, const std::string& name) {
  HOTLINE_RETURN_IF_ERROR(CheckAdmin(admin_token));
  try {
    repository_->Unload(name);
    if (logger_) logger_->Info("model_unloaded", {{"model", name}});
    return Status::Ok();
  } catch (const Error& e) {
    return Status::FromError(e);
  }
}

Status Service::Validate(const UnderstandCall& call) const {
  if (call.texts.empty()) {
    return Status(Code::kInvalidArgument, "the call has no text; send at least one");
  }
  if (call.texts.size() > size_t(options_.max_texts_per_call)) {
    return Status(Code::kInvalidArgument,
                  "the call has " + std::to_string(call.texts.size()) + " texts; at most " +
                      std::to_string(options_.max_texts_per_call) + " are allowed");
  }
  for (size_t i = 0; i < call.texts.size(); ++i) {
    const std::string& t = call.texts[i];
    const std::string which = call.texts.size() == 1 ? "text" : "text " + std::to_string(i);
    if (t.size() > size_t(options_.max_text_bytes)) {
      return Status(Code::kInvalidArgument,
                    which + " is " + std::to_string(t.size()) + " bytes; at most " +
                        std::to_string(options_.max_text_bytes) + " are allowed");
    }
    size_t bad = 0;
    if (!IsValidUtf8(t, &bad)) {
      return Status(
          Code::kInvalidArgument,
          which + " is not valid UTF-8 (first bad byte at offset " + std::to_string(bad) + ")");
    }
  }
  return Status::Ok();
}

void Service::Finish(const UnderstandCall& call, const std::string& model, UnderstandReply reply,
                     TimePoint start, std::function<void(UnderstandReply)>& done) {
  const double latency = Seconds(Clock::now() - start);
  const std::string label = model.empty() ? "-" : model;
  if (metrics_) {
    metrics_->request_seconds.WithLabels({label}).Observe(latency);
    const std::string code(CodeName(reply.status.code()));
    if (reply.status.ok()) {
      for (const auto& u : reply.results) {
        metrics_->requests.WithLabels({label, u.intent, code}).Inc();
      }
    } else {
      // Per text; a call with no text still counts once.
      metrics_->requests.WithLabels({label, "", code})
          .Inc(double(std::max<size_t>(1, call.texts.size())));
    }
  }
  const bool shed = reply.status.code() == Code::kResourceExhausted ||
                    reply.status.code() == Code::kUnavailable;
  if (shed) {
    LogShed(model, reply.status);
  } else if (logger_ && options_.log_requests) {
    nlohmann::json f = {
        {"request_id", RedactPii(call.request_id)}, {"model", model},
        {"version", reply.model_version},           {"texts", call.texts.size()},
        {"code", CodeName(reply.status.code())},    {"latency_ms", latency * 1000},
        {"queue_ms", reply.queue_seconds * 1000},   {"compute_ms", reply.compute_seconds * 1000}};
    if (!call.trace_id.empty()) f["trace_id"] = call.trace_id;
    if (reply.status.ok() && !reply.results.empty()) f["intent"] = reply.results[0].intent;
    if (!reply.status.ok()) f["error"] = RedactPii(reply.status.message());
    if (reply.status.ok()) {
      logger_->Info("understand", std::move(f));
    } else {
      logger_->Warn("understand", std::move(f));
    }
  }
  done(std::move(reply));
}

void Service::LogShed(const std::string& model, const Status& status) {
  if (!logger_) return;
  uint64_t count = 0;
  {
    std::lock_guard<std::mutex> lock(shed_mu_);
    ++shed_unlogged_;
    const TimePoint now = Clock::now();
    if (now - shed_logged_ < std::chrono::seconds(1)) return;
    shed_logged_ = now;
    count = shed_unlogged_;
    shed_unlogged_ = 0;
  }
  logger_->Warn("shed", {{"calls", count},
                         {"model", model},
                         {"code", CodeName(status.code())},
                         {"example", RedactPii(status.message())}});
}

void Service::Understand(UnderstandCall call, std::function<void(UnderstandReply)> done) {
  const TimePoint start = Clock::now();
  auto refuse = [&](Status st, const std::string& model) {
    UnderstandReply r;
    r.status = std::move(st);
    Finish(call, model, std::move(r), start, done);
  };
  if (draining_.load())
    return refuse(Status(Code::kUnavailable, "the server is shutting down"), "");
  std::string name = call.model;
  if (name.empty() && !call.business_line.empty()) {
    name = repository_->ModelForBusinessLine(call.business_line);
    if (name.empty()) {
      return refuse(Status(Code::kNotFound, "no model serves business line '" +
                                                EchoInput(call.business_line) + "'"),
                    "");
    }
  }
  if (name.empty()) name = options_.default_model;
  if (name.empty()) {
    return refuse(Status(Code::kInvalidArgument,
                         "the call names no model and the server has "
                         "no default_model"),
                  "");
  }
  // Labels carry only names of models that exist: a caller must not mint metric series.
  std::shared_ptr<LoadedModel> model;
  try {
    model = repository_->Acquire(name);
  } catch (const Error& e) {
    return refuse(Status::FromError(e), e.code() == Code::kNotFound ? "" : name);
  }
  if (Status st = Validate(call); !st.ok()) return refuse(st, name);

  TimePoint deadline = call.deadline;
  if (deadline == TimePoint::max() && options_.default_timeout > Duration::zero()) {
    deadline = start + options_.default_timeout;
  }
  auto join = std::make_shared<Join>();
  join->remaining = call.texts.size();
  join->reply.model_name = name;
  join->reply.model_version = model->spec().version;
  join->reply.results.resize(call.texts.size());
  // The call's fields outlive this function through the join (logging at the end needs them).
  auto shared_call = std::make_shared<UnderstandCall>();
  shared_call->request_id = call.request_id;
  shared_call->trace_id = call.trace_id;
  shared_call->texts.resize(call.texts.size());
  join->done = std::move(done);

  std::vector<WorkItem> items;
  items.reserve(call.texts.size());
  for (size_t i = 0; i < call.texts.size(); ++i) {
    WorkItem w;
    w.text = std::move(call.texts[i]);
    w.deadline = deadline;
    w.priority = call.priority;
    w.reference_time = call.reference_time;
    w.cancelled = call.cancelled;
    w.done = [this, join, shared_call, name, start, i](ItemResult r) {
      std::unique_lock<std::mutex> lock(join->mu);
      UnderstandReply& reply = join->reply;
      if (r.status.ok()) {
        reply.results[i] = std::move(r.understanding);
      } else if (reply.status.ok()) {
        reply.status = r.status;  // the first failure decides the call's status
      }
      reply.queue_seconds = std::max(reply.queue_seconds, r.queue_seconds);
      reply.compute_seconds = std::max(reply.compute_seconds, r.compute_seconds);
      if (--join->remaining > 0) return;
      lock.unlock();
      if (!reply.status.ok()) reply.results.clear();
      Finish(*shared_call, name, std::move(reply), start, join->done);
    };
    items.push_back(std::move(w));
  }
  const size_t n = items.size();
  Status admitted = model->batcher().Enqueue(std::move(items));
  if (!admitted.ok()) {
    shared_call->texts.resize(n);
    UnderstandReply r;
    r.status = admitted;
    Finish(*shared_call, name, std::move(r), start, join->done);
  }
}

UnderstandReply Service::UnderstandSync(UnderstandCall call) {
  auto promise = std::make_shared<std::promise<UnderstandReply>>();
  std::future<UnderstandReply> future = promise->get_future();
  Understand(std::move(call), [promise](UnderstandReply r) { promise->set_value(std::move(r)); });
  return future.get();
}

}  // namespace hotline::serving
