// The dialog behind the transports: gRPC Converse/EndCall/GetWorkOrder and HTTP /v1/converse,
// /v1/calls/{id}/end, /v1/work-orders/{id} call this. A turn's NLU goes through the serving core
// (serving::Service::Understand, so turns batch with all other traffic); the dialog step
// (dialog::DialogManager::Turn, which may wait on Redis or an SQLite commit) then runs on a small
// worker pool of its own, never on a batcher thread.
//
// DialogService is an interface so the transports do not need the dialog library to link; the
// implementation (CreateDialogService) exists when the build has the dialog layer
// (HOTLINE_HAVE_DIALOG, defined by the hotline_dialog target).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "base/error.h"
#include "dialog/dialog.h"
#include "dialog/work_order_store.h"
#include "frontends/webhook.h"
#include "serving/log.h"
#include "serving/metrics.h"
#include "serving/service.h"

namespace hotline::frontends {

// Metric families of the dialog (names and labels are a contract with dashboards; extend, never
// rename). Hand-off rate = handoffs / calls, or calls{outcome="human"} / calls.
struct DialogMetrics {
  explicit DialogMetrics(serving::MetricsRegistry& r);
  // Per ended call: {outcome (dispatch|answer|human|abandoned), department ("none" when unset)}.
  serving::Family<serving::Counter>& calls;
  // Per ended call: caller turns it took {outcome}.
  serving::Family<serving::Histogram>& turns_per_call;
  // Per answered turn: {action}; per failed turn: {action="error"}.
  serving::Family<serving::Counter>& turns;
  // Turns that handed the caller to a person (any reason).
  serving::Family<serving::Counter>& handoffs;
  // Turns that asked again for a slot already asked for.
  serving::Family<serving::Counter>& slots_reasked;
  // Work orders created {department}.
  serving::Family<serving::Counter>& work_orders;
  // Calls joined to an existing open order instead of a new one (并单) {department}.
  serving::Family<serving::Counter>& merged_orders;
  // Emergencies sent to 110/119/120/122 {category, number}.
  serving::Family<serving::Counter>& emergency_transfers;
  // Webhook deliveries {result: ok|error}, and orders still waiting for one.
  serving::Family<serving::Counter>& webhook_deliveries;
  serving::Family<serving::Gauge>& webhook_pending;
  // Per turn, from arrival to reply (NLU queue + model + dialog step): no labels.
  serving::Family<serving::Histogram>& turn_seconds;
  // Dialog steps and work-order calls that failed on the session or work-order store
  // (UNAVAILABLE or DATA_LOSS): orders may not be filed. {operation: turn|read|list|update|outbox}
  serving::Family<serving::Counter>& store_errors;
};

struct ConverseCall {
  std::string call_id;
  std::string text;
  std::optional<std::chrono::system_clock::time_point> reference_time;
  serving::TimePoint deadline = serving::TimePoint::max();
  std::function<bool()> cancelled;  // optional
  std::string trace_id;             // W3C trace-id of the caller's traceparent; logged
};

struct ConverseResult {
  Status status;
  dialog::TurnReply reply;           // when status is OK
  std::string action;                // dialog::ActionName(reply.action)
  nlu::Understanding understanding;  // this turn's NLU result, when status is OK
};

class DialogService {
 public:
  virtual ~DialogService() = default;
  // Calls `done` exactly once, inline for refusals (bad call id, empty text), otherwise from a
  // dialog worker. Errors: INVALID_ARGUMENT (bad call id, empty/too long/non-UTF-8 text), the
  // serving core's codes for the NLU step, UNAVAILABLE when the session store is unreachable.
  virtual void Converse(ConverseCall call, std::function<void(ConverseResult)> done) = 0;
  // Blocking conveniences (HTTP handlers, tests); each runs on a dialog worker.
  ConverseResult ConverseSync(ConverseCall call);
  // NOT_FOUND for an unknown call, INVALID_ARGUMENT for a malformed id.
  virtual void EndCall(const std::string& call_id,
                       std::function<void(Status, dialog::CallSummary)> done) = 0;
  virtual void GetWorkOrder(const std::string& id,
                            std::function<void(Status, dialog::WorkOrder)> done) = 0;
  Status EndCallSync(const std::string& call_id, dialog::CallSummary* out);
  Status GetWorkOrderSync(const std::string& id, dialog::WorkOrder* out);
  // The operators' API. INVALID_ARGUMENT for a bad query or update, NOT_FOUND for no such order.
  virtual void ListWorkOrders(dialog::OrderQuery query,
                              std::function<void(Status, std::vector<dialog::WorkOrder>)> done) = 0;
  virtual void UpdateWorkOrder(std::string id, dialog::OrderUpdate update,
                               std::function<void(Status, dialog::WorkOrder)> done) = 0;
  Status ListWorkOrdersSync(dialog::OrderQuery query, std::vector<dialog::WorkOrder>* out);
  Status UpdateWorkOrderSync(std::string id, dialog::OrderUpdate update, dialog::WorkOrder* out);
  // Refuses new work with UNAVAILABLE, finishes what is queued, joins the workers.
  virtual void Shutdown() = 0;
};

class Security;
// Writes the audit line of a turn that created or joined a work order (nothing otherwise).
void AuditConverse(Security* security, const std::string& client, const char* transport,
                   const ConverseResult& r);

// True for 1..128 bytes of [A-Za-z0-9_.:-] (the dialog's call-id rule, checked before the NLU
// runs so a malformed id costs no model time). Work-order ids use the same rule.
bool ValidCallId(const std::string& id);

#if HOTLINE_HAVE_DIALOG
// `service`, `metrics` and `logger` (nullable) must outlive the result.
// With webhook.url set, turns the store's outbox on and runs a deliverer thread. Throws
// hotline::Error(kInvalidArgument) for a webhook URL it cannot use.
std::unique_ptr<DialogService> CreateDialogService(serving::Service* service,
                                                   std::unique_ptr<dialog::DialogManager> manager,
                                                   DialogMetrics* metrics, serving::Logger* logger,
                                                   int workers, WebhookConfig webhook = {});
#endif

}  // namespace hotline::frontends
