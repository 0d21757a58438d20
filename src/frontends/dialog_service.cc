#include "frontends/dialog_service.h"

#include <google/protobuf/util/json_util.h>
#include <httplib.h>

#include <cmath>
#include <cstdlib>

#include "frontends/convert.h"
#include "frontends/security.h"

#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace hotline::frontends {

DialogMetrics::DialogMetrics(serving::MetricsRegistry& r)
    : calls(r.AddCounter("hotline_dialog_calls_total", "Calls ended, by outcome and department",
                         {"outcome", "department"})),
      turns_per_call(r.AddHistogram("hotline_dialog_turns_per_call", "Caller turns per ended call",
                                    {"outcome"}, {1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30})),
      turns(r.AddCounter("hotline_dialog_turns_total", "Caller turns answered, by action",
                         {"action"})),
      handoffs(r.AddCounter("hotline_dialog_handoffs_total",
                            "Turns that handed the caller to a person")),
      slots_reasked(r.AddCounter("hotline_dialog_slots_reasked_total",
                                 "Turns that asked again for a slot already asked for")),
      work_orders(
          r.AddCounter("hotline_dialog_work_orders_total", "Work orders created", {"department"})),
      merged_orders(r.AddCounter("hotline_dialog_merged_orders_total",
                                 "Calls joined to an existing open work order (并单)",
                                 {"department"})),
      emergency_transfers(r.AddCounter("hotline_dialog_emergency_transfers_total",
                                       "Emergencies sent to an emergency number",
                                       {"category", "number"})),
      webhook_deliveries(r.AddCounter("hotline_webhook_deliveries_total",
                                      "Work orders POSTed to the city's system, by result",
                                      {"result"})),
      webhook_pending(r.AddGauge("hotline_webhook_pending",
                                 "Work orders waiting in the outbox for delivery")),
      turn_seconds(r.AddHistogram("hotline_dialog_turn_seconds",
                                  "Per caller turn, arrival to reply (NLU and dialog step)", {},
                                  serving::LatencyBuckets())),
      store_errors(r.AddCounter("hotline_dialog_store_errors_total",
                                "Dialog steps and work-order calls failed on a store",
                                {"operation"})) {
  // Series without labels exist from the start (at 0), so a rate over them is defined at once.
  handoffs.WithLabels({});
  slots_reasked.WithLabels({});
  turn_seconds.WithLabels({});
  for (const char* op : {"turn", "read", "list", "update", "outbox"}) store_errors.WithLabels({op});
  for (const char* result : {"ok", "error"}) webhook_deliveries.WithLabels({result});
}

void AuditConverse(Security* security, const std::string& client, const char* transport,
                   const ConverseResult& r) {
  if (!security || !r.status.ok() || r.reply.work_order_id.empty()) return;
  security->Audit(client, transport, r.reply.merged ? "join" : "create", r.reply.work_order_id,
                  Code::kOk);
}

bool ValidCallId(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}

ConverseResult DialogService::ConverseSync(ConverseCall call) {
  auto promise = std::make_shared<std::promise<ConverseResult>>();
  auto future = promise->get_future();
  Converse(std::move(call), [promise](ConverseResult r) { promise->set_value(std::move(r)); });
  return future.get();
}

Status DialogService::EndCallSync(const std::string& call_id, dialog::CallSummary* out) {
  std::promise<Status> promise;
  auto future = promise.get_future();
  EndCall(call_id, [&promise, out](Status s, dialog::CallSummary summary) {
    *out = std::move(summary);
    promise.set_value(std::move(s));
  });
  return future.get();
}

Status DialogService::GetWorkOrderSync(const std::string& id, dialog::WorkOrder* out) {
  std::promise<Status> promise;
  auto future = promise.get_future();
  GetWorkOrder(id, [&promise, out](Status s, dialog::WorkOrder order) {
    *out = std::move(order);
    promise.set_value(std::move(s));
  });
  return future.get();
}

Status DialogService::ListWorkOrdersSync(dialog::OrderQuery query,
                                         std::vector<dialog::WorkOrder>* out) {
  std::promise<Status> promise;
  auto future = promise.get_future();
  ListWorkOrders(std::move(query),
                 [&promise, out](Status s, std::vector<dialog::WorkOrder> orders) {
                   *out = std::move(orders);
                   promise.set_value(std::move(s));
                 });
  return future.get();
}

Status DialogService::UpdateWorkOrderSync(std::string id, dialog::OrderUpdate update,
                                          dialog::WorkOrder* out) {
  std::promise<Status> promise;
  auto future = promise.get_future();
  UpdateWorkOrder(std::move(id), std::move(update),
                  [&promise, out](Status s, dialog::WorkOrder order) {
                    *out = std::move(order);
                    promise.set_value(std::move(s));
                  });
  return future.get();
}

#if HOTLINE_HAVE_DIALOG

namespace {

// Runs a store call, turning its exceptions into a status.
template <typename F>
Status Guarded(const char* what, F fn) {
  try {
    fn();
    return Status();
  } catch (const Error& e) {
    return Status::FromError(e);
  } catch (const std::exception& e) {
    return Status(Code::kInternal, std::string(what) + " failed: " + e.what());
  }
}

double SecondsSince(serving::TimePoint start) {
  return std::chrono::duration<double>(serving::Clock::now() - start).count();
}

Status BadCallId(const std::string& what, const std::string& id) {
  // The id is caller input: its length is reported, never its bytes (it may hold a phone number).
  return Status(Code::kInvalidArgument,
                what + " must be 1 to 128 characters of A-Z a-z 0-9 _ . : -; got " +
                    (id.empty() ? std::string("an empty one")
                                : "one of " + std::to_string(id.size()) + " bytes that is not"));
}

// A call id as logged: masked (a caller may use a phone number as the id), and not at all when
// malformed (it could be anything, of any size).
std::string LoggedId(const std::string& id) {
  return ValidCallId(id) ? serving::RedactPii(id) : std::string("(malformed)");
}

class DialogServiceImpl final : public DialogService {
 public:
  DialogServiceImpl(serving::Service* service, std::unique_ptr<dialog::DialogManager> manager,
                    DialogMetrics* metrics, serving::Logger* logger, int workers,
                    WebhookConfig webhook)
      : service_(service),
        manager_(std::move(manager)),
        metrics_(metrics),
        logger_(logger),
        webhook_(std::move(webhook)) {
    if (!webhook_.url.empty()) {
      client_ = MakeClient();  // a bad URL fails here, before any call is taken
      manager_->work_orders().EnableOutbox();
      deliverer_ = std::thread([this] { Deliver(); });
    }
    for (int i = 0; i < std::max(1, workers); ++i) threads_.emplace_back([this] { Work(); });
  }
  ~DialogServiceImpl() override { Shutdown(); }

  void Converse(ConverseCall call, std::function<void(ConverseResult)> done) override {
    const serving::TimePoint start = serving::Clock::now();
    auto refuse = [&](Status st) {
      Count(ConverseResult{st, {}, {}, {}}, call.call_id, start);
      done(ConverseResult{std::move(st), {}, {}, {}});
    };
    if (!ValidCallId(call.call_id)) return refuse(BadCallId("call_id", call.call_id));
    if (call.text.empty()) {
      return refuse(
          Status(Code::kInvalidArgument, "text is empty; a turn needs what the caller said"));
    }
    // DialogManager::Turn's limit, checked before the model runs on the text.
    constexpr size_t kMaxTurnBytes = 4096;
    if (call.text.size() > kMaxTurnBytes) {
      return refuse(Status(Code::kInvalidArgument,
                           "text has " + std::to_string(call.text.size()) + " bytes, at most " +
                               std::to_string(kMaxTurnBytes) + " allowed"));
    }
    if (stopping()) return refuse(Status(Code::kUnavailable, "the server is shutting down"));
    serving::UnderstandCall u;
    u.texts.push_back(call.text);
    u.reference_time = call.reference_time;
    u.deadline = call.deadline;
    u.cancelled = call.cancelled;
    u.priority = serving::Priority::kInteractive;  // a caller waits on the line
    u.request_id = call.call_id;
    u.trace_id = call.trace_id;
    auto shared = std::make_shared<ConverseCall>(std::move(call));
    auto shared_done = std::make_shared<std::function<void(ConverseResult)>>(std::move(done));
    // Runs on a batcher thread: hand the dialog step (store I/O) to a dialog worker at once.
    service_->Understand(std::move(u), [this, shared, shared_done,
                                        start](serving::UnderstandReply r) {
      if (!r.status.ok()) {
        ConverseResult out;
        out.status = std::move(r.status);
        Count(out, shared->call_id, start, shared->trace_id);
        return (*shared_done)(std::move(out));
      }
      auto understanding = std::make_shared<nlu::Understanding>(std::move(r.results.at(0)));
      Post(
          [this, shared, shared_done, understanding, start] {
            ConverseResult out;
            out.understanding = *understanding;
            try {
              const auto now = shared->reference_time.value_or(std::chrono::system_clock::now());
              out.reply = manager_->Turn(shared->call_id, shared->text, *understanding, now);
              out.action = std::string(dialog::ActionName(out.reply.action));
            } catch (const Error& e) {
              out.status = Status::FromError(e);
            } catch (const std::exception& e) {
              out.status = Status(Code::kInternal, std::string("dialog step failed: ") + e.what());
            }
            CountStoreError("turn", out.status);
            Count(out, shared->call_id, start, shared->trace_id);
            (*shared_done)(std::move(out));
          },
          [shared_done] {
            (*shared_done)(ConverseResult{
                Status(Code::kUnavailable, "the server is shutting down"), {}, {}, {}});
          });
    });
  }

  void EndCall(const std::string& call_id,
               std::function<void(Status, dialog::CallSummary)> done) override {
    if (!ValidCallId(call_id)) return done(BadCallId("call_id", call_id), {});
    auto shared_done =
        std::make_shared<std::function<void(Status, dialog::CallSummary)>>(std::move(done));
    Post(
        [this, call_id, shared_done] {
          dialog::CallSummary summary;
          Status st;
          try {
            summary = manager_->EndCall(call_id);
          } catch (const Error& e) {
            st = Status::FromError(e);
          } catch (const std::exception& e) {
            st = Status(Code::kInternal, std::string("ending the call failed: ") + e.what());
          }
          if (st.ok() && metrics_) {
            const std::string dept = summary.department.empty() ? "none" : summary.department;
            metrics_->calls.WithLabels({summary.outcome, dept}).Inc();
            metrics_->turns_per_call.WithLabels({summary.outcome}).Observe(summary.turns);
          }
          if (logger_) {
            nlohmann::json f = {{"call_id", LoggedId(call_id)}, {"code", CodeName(st.code())}};
            if (st.ok()) {
              f["outcome"] = summary.outcome;
              f["intent"] = summary.intent;
              f["department"] = summary.department;
              f["turns"] = summary.turns;
              f["work_order_id"] = serving::RedactPii(summary.work_order_id);
              logger_->Info("end_call", std::move(f));
            } else {
              f["error"] = serving::RedactPii(st.message());
              logger_->Warn("end_call", std::move(f));
            }
          }
          (*shared_done)(std::move(st), std::move(summary));
        },
        [shared_done] {
          (*shared_done)(Status(Code::kUnavailable, "the server is shutting down"), {});
        });
  }

  void GetWorkOrder(const std::string& id,
                    std::function<void(Status, dialog::WorkOrder)> done) override {
    if (!ValidCallId(id)) return done(BadCallId("work order id", id), {});
    auto shared_done =
        std::make_shared<std::function<void(Status, dialog::WorkOrder)>>(std::move(done));
    Post(
        [this, id, shared_done] {
          Status st;
          dialog::WorkOrder order;
          try {
            std::optional<dialog::WorkOrder> found = manager_->GetWorkOrder(id);
            if (found) {
              order = std::move(*found);
            } else {
              st = Status(Code::kNotFound, "no work order with id " + serving::RedactPii(id));
            }
          } catch (const Error& e) {
            st = Status::FromError(e);
          } catch (const std::exception& e) {
            st = Status(Code::kInternal, std::string("work order lookup failed: ") + e.what());
          }
          CountStoreError("read", st);
          (*shared_done)(std::move(st), std::move(order));
        },
        [shared_done] {
          (*shared_done)(Status(Code::kUnavailable, "the server is shutting down"), {});
        });
  }

  void ListWorkOrders(dialog::OrderQuery query,
                      std::function<void(Status, std::vector<dialog::WorkOrder>)> done) override {
    auto shared_done = std::make_shared<decltype(done)>(std::move(done));
    Post(
        [this, query, shared_done] {
          std::vector<dialog::WorkOrder> orders;
          Status st = Guarded("listing work orders",
                              [&] { orders = manager_->work_orders().List(query); });
          CountStoreError("list", st);
          (*shared_done)(std::move(st), std::move(orders));
        },
        [shared_done] {
          (*shared_done)(Status(Code::kUnavailable, "the server is shutting down"), {});
        });
  }

  void UpdateWorkOrder(std::string id, dialog::OrderUpdate update,
                       std::function<void(Status, dialog::WorkOrder)> done) override {
    if (!ValidCallId(id)) return done(BadCallId("work order id", id), {});
    auto shared_done = std::make_shared<decltype(done)>(std::move(done));
    Post(
        [this, id, update, shared_done] {
          dialog::WorkOrder order;
          Status st = Guarded("updating a work order", [&] {
            auto updated =
                manager_->work_orders().Update(id, update, std::chrono::system_clock::now());
            if (!updated) throw Error("no work order with id " + serving::RedactPii(id), Code::kNotFound);
            order = std::move(*updated);
          });
          CountStoreError("update", st);
          (*shared_done)(std::move(st), std::move(order));
        },
        [shared_done] {
          (*shared_done)(Status(Code::kUnavailable, "the server is shutting down"), {});
        });
  }

  void Shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      stop_ = true;
    }
    cv_.notify_all();
    stop_cv_.notify_all();
    for (std::thread& t : threads_) t.join();
    if (deliverer_.joinable()) deliverer_.join();  // an entry in flight is retried by its lease
  }

 private:
  bool stopping() {
    std::lock_guard<std::mutex> lock(mu_);
    return stop_;
  }

  // Queues `job` for a worker; runs `refused` inline when the pool has stopped.
  void Post(std::function<void()> job, std::function<void()> refused) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!stop_) {
        jobs_.push_back(std::move(job));
        cv_.notify_one();
        return;
      }
    }
    refused();
  }

  // Workers drain the queue before they exit, so every accepted job answers its caller.
  void Work() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  struct Target {
    std::string origin, path;  // "https://host:port", "/orders"
  };

  Target ParseWebhookUrl() const {
    const std::string& url = webhook_.url;
    const bool ok = url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0;
    if (!ok) {
      throw Error("dialog.webhook.url must start with http:// or https://", Code::kInvalidArgument);
    }
    const size_t slash = url.find('/', url.find("://") + 3);
    Target t{url.substr(0, slash), slash == std::string::npos ? "/" : url.substr(slash)};
    if (t.origin.size() <= url.find("://") + 3) {
      throw Error("dialog.webhook.url has no host", Code::kInvalidArgument);
    }
    return t;
  }

  std::unique_ptr<httplib::Client> MakeClient() {
    target_ = ParseWebhookUrl();
    auto c = std::make_unique<httplib::Client>(target_.origin);
    const auto secs = std::chrono::duration<double>(webhook_.timeout_s);
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(secs).count();
    c->set_connection_timeout(time_t(us / 1000000), time_t(us % 1000000));
    c->set_read_timeout(time_t(us / 1000000), time_t(us % 1000000));
    c->set_write_timeout(time_t(us / 1000000), time_t(us % 1000000));
    if (!webhook_.ca.empty()) c->set_ca_cert_path(webhook_.ca.c_str());
    if (!webhook_.token_env.empty()) {
      const char* token = std::getenv(webhook_.token_env.c_str());
      if (!token || !*token) {
        throw Error("dialog.webhook.token_env names " + webhook_.token_env + ", which is unset",
                    Code::kInvalidArgument);
      }
      c->set_bearer_token_auth(token);
    }
    return c;
  }

  // Back-off after the n-th failed attempt (n >= 1): retry_min_s * 2^(n-1), at most retry_max_s.
  std::chrono::milliseconds Backoff(int n) const {
    const double s = std::min(webhook_.retry_max_s,
                              webhook_.retry_min_s * std::pow(2.0, std::min(n - 1, 30)));
    return std::chrono::milliseconds(int64_t(s * 1000));
  }

  // One POST; "" on a 2xx answer, else what went wrong.
  std::string Post(const dialog::WorkOrder& order) {
    hotline::v1::WorkOrder msg;
    ToProto(order, &msg);
    google::protobuf::util::JsonPrintOptions opts;
    opts.preserve_proto_field_names = true;
    opts.always_print_primitive_fields = true;
    std::string body;
    if (!google::protobuf::util::MessageToJsonString(msg, &body, opts).ok())
      return "cannot encode the order";
    httplib::Headers headers = {{"Idempotency-Key", order.id}};
    auto res = client_->Post(target_.path, headers, body, "application/json");
    if (!res) return "no answer: " + httplib::to_string(res.error());
    if (res->status < 200 || res->status > 299) return "HTTP " + std::to_string(res->status);
    return "";
  }

  // The deliverer: claims due outbox entries and POSTs them until stopped.
  void Deliver() {
    dialog::WorkOrderStore& store = manager_->work_orders();
    const auto lease = std::chrono::seconds(int64_t(webhook_.timeout_s * 2) + 10);
    const auto idle = std::chrono::milliseconds(int64_t(webhook_.poll_s * 1000));
    while (!stopping()) {
      std::vector<dialog::OutboxItem> due;
      try {
        due = store.ClaimOutbox(16, std::chrono::system_clock::now(), lease);
        for (const dialog::OutboxItem& item : due) {
          std::optional<dialog::WorkOrder> order = store.Get(item.order_id);
          const std::string error = order ? Post(*order) : "the order is gone from the store";
          const auto now = std::chrono::system_clock::now();
          if (error.empty()) {
            store.OutboxDelivered(item.seq, now);
          } else {
            store.OutboxFailed(item.seq, now + Backoff(item.attempts + 1), error);
          }
          if (metrics_) metrics_->webhook_deliveries.WithLabels({error.empty() ? "ok" : "error"}).Inc();
          if (logger_) {
            nlohmann::json f = {{"work_order_id", serving::RedactPii(item.order_id)},
                                {"attempt", item.attempts + 1}};
            if (error.empty()) {
              logger_->Info("webhook_delivered", std::move(f));
            } else {
              f["error"] = serving::RedactPii(error);
              logger_->Warn("webhook_failed", std::move(f));
            }
          }
        }
        if (metrics_) metrics_->webhook_pending.WithLabels({}).Set(double(store.OutboxPending()));
      } catch (const std::exception& e) {
        // The store is away (a PostgreSQL restart): the entries stay queued; try again later.
        CountStoreError("outbox", Status(Code::kUnavailable, e.what()));
        if (logger_) logger_->Warn("webhook_outbox", {{"error", serving::RedactPii(e.what())}});
        due.clear();
      }
      if (due.empty()) {
        std::unique_lock<std::mutex> lock(mu_);
        stop_cv_.wait_for(lock, idle, [this] { return stop_; });
      }
    }
  }

  void CountStoreError(const char* operation, const Status& st) {
    if (metrics_ && (st.code() == Code::kUnavailable || st.code() == Code::kDataLoss)) {
      metrics_->store_errors.WithLabels({operation}).Inc();
    }
  }

  void Count(const ConverseResult& r, const std::string& call_id, serving::TimePoint start,
             const std::string& trace_id = "") {
    const double seconds = SecondsSince(start);
    if (metrics_) {
      metrics_->turn_seconds.WithLabels({}).Observe(seconds);
      metrics_->turns.WithLabels({r.status.ok() ? r.action : "error"}).Inc();
      if (r.status.ok()) {
        if (r.reply.action == dialog::Action::kHandoff) metrics_->handoffs.WithLabels({}).Inc();
        if (r.reply.slots_reasked > 0) {
          metrics_->slots_reasked.WithLabels({}).Inc(r.reply.slots_reasked);
        }
        if (!r.reply.work_order_id.empty()) {
          (r.reply.merged ? metrics_->merged_orders : metrics_->work_orders)
              .WithLabels({r.reply.department.empty() ? "none" : r.reply.department})
              .Inc();
        }
        if (!r.reply.transfer_to.empty()) {
          metrics_->emergency_transfers
              .WithLabels({r.reply.transfer_category, r.reply.transfer_to})
              .Inc();
        }
      }
    }
    if (!logger_) return;
    // Never the caller's text or slot values: only ids (masked) and labels.
    nlohmann::json f = {{"call_id", LoggedId(call_id)},
                        {"code", CodeName(r.status.code())},
                        {"latency_ms", seconds * 1000}};
    if (!trace_id.empty()) f["trace_id"] = trace_id;
    if (r.status.ok()) {
      f["turn_intent"] = r.understanding.intent;
      f["intent"] = r.reply.intent;
      f["action"] = r.action;
      f["done"] = r.reply.done;
      if (!r.reply.work_order_id.empty()) {
        f["work_order_id"] = serving::RedactPii(r.reply.work_order_id);
        f["merged"] = r.reply.merged;
        // The handler's text holds what the caller said (phone, ID number): masked here; the
        // order itself keeps it whole.
        f["work_order_summary"] = serving::RedactPii(r.reply.work_order_summary);
      }
      if (!r.reply.acts.empty()) f["acts"] = r.reply.acts;
      if (!r.reply.transfer_to.empty()) {
        f["transfer_to"] = r.reply.transfer_to;
        f["transfer_category"] = r.reply.transfer_category;
        logger_->Warn("emergency_transfer", {{"call_id", LoggedId(call_id)},
                                             {"category", r.reply.transfer_category},
                                             {"number", r.reply.transfer_to}});
      }
      logger_->Info("converse", std::move(f));
    } else {
      f["error"] = serving::RedactPii(r.status.message());
      logger_->Warn("converse", std::move(f));
    }
  }

  serving::Service* const service_;
  std::unique_ptr<dialog::DialogManager> manager_;
  DialogMetrics* const metrics_;
  serving::Logger* const logger_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
  const WebhookConfig webhook_;
  Target target_;
  std::unique_ptr<httplib::Client> client_;
  std::thread deliverer_;
  std::condition_variable stop_cv_;  // wakes the deliverer at shutdown (cv_ is the workers')
};

}  // namespace

std::unique_ptr<DialogService> CreateDialogService(serving::Service* service,
                                                   std::unique_ptr<dialog::DialogManager> manager,
                                                   DialogMetrics* metrics, serving::Logger* logger,
                                                   int workers, WebhookConfig webhook) {
  return std::make_unique<DialogServiceImpl>(service, std::move(manager), metrics, logger, workers,
                                             std::move(webhook));
}

#endif  // HOTLINE_HAVE_DIALOG

}  // namespace hotline::frontends
