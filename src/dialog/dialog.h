// The call itself: a dialog session per call id, a policy that turns (NLU result, session state)
// into a reply and an action, answers from a knowledge base, work orders and hand-off.
// Transport-agnostic: the gRPC/HTTP frontends and `hotline chat` drive it through DialogManager.
// Changes to this contract are additive only.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nlu/pipeline.h"
#include "nlu/taxonomy.h"

namespace hotline::dialog {

struct SlotFill {
  std::string type, value, normalized;  // taxonomy slot id; the caller's words; normaliser output
};

enum class Action {
  kGreet, kAskSlot, kConfirm, kAnswer, kDispatch, kHandoff, kClarify, kEnd, kTransfer
};
// "greet", "ask_slot", "confirm", "answer", "dispatch", "handoff", "clarify", "end", "transfer"
// (an emergency: the caller is sent to 110/119/120/122, no form is filled).
std::string_view ActionName(Action action);
std::string_view ActionName(Action action);

// One problem or question of a call. A call holds a list of them; each gets its own work order
// (created, or merged into an open one: 并单), answer, transfer or hand-off.
struct CallIssue {
  std::string intent;      // taxonomy intent id, or a dialog.yaml extra intent ("" when none)
  std::string kind;        // dispatch | answer | order | emergency | legal | out_of_scope
  std::string department;  // taxonomy department id ("" when none)
  // pending (not finished when the call ended) | dispatched | merged | answered | transferred |
  // handed_off | cancelled
  std::string outcome = "pending";
  std::string work_order_id;  // the order created or merged into
  std::string transfer_to;    // emergency: the number the caller was sent to (119, ...)
  std::vector<SlotFill> slots;
  std::string said;  // the caller's words that raised it (for the work-order text)
};


struct TurnReply {
  std::string reply;  // text said to the caller
  Action action = Action::kClarify;
  std::string intent, department;  // the call's MAIN intent and its department so far ("" if none)
  std::vector<SlotFill> slots;     // the main intent's slots collected so far
  std::string work_order_id;       // set on the turn that created it
  // The call is over (dispatched+acknowledged, answered+goodbye, handoff, end).
  bool done = false;
  int slots_reasked = 0;  // this turn re-asked a slot already asked (metric "slots asked again")
  // The dialog acts read in this turn, in a fixed order: greeting, affirm, deny, correction,
  // inform, new_problem, thanks, goodbye, cancel, dont_know, request_human, out_of_scope, noise,
  // emergency, legal.
  std::vector<std::string> acts;
  std::vector<std::string> corrected;  // slot types this turn corrected
  std::string transfer_to;             // set on an emergency transfer (119, 110, 120, 122, ...)
  std::string transfer_category;       // fire | police | medical | traffic | gas | ...
  bool merged = false;                 // work_order_id is an existing order this call joined
  // The order's text for the handler (set with the id), its personal values (ID, phone, plate,
  // name) masked: what a log may hold. The order itself keeps the text whole.
  std::string work_order_summary;
};

struct CallSummary {
  std::string call_id;
  // dispatch (a work order created or joined) | transfer (emergency) | human | answer | abandoned
  std::string outcome;
  std::string intent, department;  // the main issue's (its first work order, else first served)
  std::string category, category_name;  // the main intent's taxonomy category ("" when none)
  std::vector<SlotFill> slots;     // the main issue's
  std::string work_order_id;       // the main issue's order
  int turns = 0;
  std::vector<CallIssue> issues;  // every problem or question of the call, in the order raised
};

// An operator's note on an order (the operators' API: status changes, handler notes).
struct OrderNote {
  std::string at;      // RFC 3339 UTC
  std::string by;      // the client that wrote it
  std::string text;
  std::string status;  // the status it set; "" when it set none
};

struct WorkOrder {
  std::string id;  // "WO20261201-000123"
  std::string call_id, department, intent;
  std::string caller_text;  // the caller's own words, all turns
  std::string created_at;   // RFC 3339 UTC
  std::string status;       // "open", then what operators set (see kOrderStatuses)
  std::vector<SlotFill> slots;
  std::vector<std::string> urged_at;  // RFC 3339 UTC, one per urging
  // The handler's paragraph (智能填单): "市民来电反映：…请…核实处理。" Complete here; logs mask it.
  std::string summary;
  std::vector<std::string> unverified;    // required slot types the caller could not give
  std::vector<std::string> linked_calls;  // later calls merged into this order (并单)
  std::string place_key;                  // what makes a repeat call the same problem, same place
  std::vector<OrderNote> notes;           // operators' notes and status changes, oldest first
  std::string updated_at;                 // RFC 3339 UTC of the last note; "" when none
};

// Loaded from config/dialog.yaml by DialogConfig::Load(path).
struct DialogConfig {
  // config/dialog.yaml itself: prompts per slot type and canned replies.
  std::string prompts_file;
  std::string answers_dir = "config/answers";
  std::string session_store = "memory";  // "memory" or "redis://host:port[/db]"
  std::string work_order_db = "var/work_orders.sqlite";
  int idle_timeout_s = 600, max_turns = 20;
  // Live calls the in-memory session store holds at most; a new call beyond it is refused
  // (RESOURCE_EXHAUSTED) rather than growing the process without bound.
  int max_sessions = 100000;
  float min_confidence = 0.5f;     // below: a low-confidence turn (two in a row -> handoff)
  // `min_confidence: model`: take the model folder's calibrated hand-off threshold
  // (model.yaml calibration.handoff_threshold); ApplyModelThreshold sets it once the model is known.
  bool min_confidence_from_model = false;
  float switch_confidence = 0.8f;  // a new business intent above this switches the main intent
  int unclear_handoff_after = 2;   // turns in a row with nothing understood -> handoff
  int duplicate_window_h = 72;     // a repeat report of an open order within this joins it
  // Throws hotline::Error naming the file and the field on problems. Relative paths in the file
  // (answers_dir, work_order_db) are kept as written: relative to the working directory.
  static DialogConfig Load(const std::string& path);
  // With `min_confidence: model`, takes the model's threshold; without one in the model folder,
  // keeps min_confidence and says so. Returns a line for the log saying which value is used.
  std::string ApplyModelThreshold(const std::optional<float>& model_threshold);
};

class WorkOrderStore;

class DialogManager {
 public:
  // Throws hotline::Error (kUnavailable naming the URL) when Redis/SQLite cannot be opened.
  static std::unique_ptr<DialogManager> Create(const DialogConfig& config,
                                               const nlu::Taxonomy& taxonomy);
  virtual ~DialogManager() = default;

  // One caller turn. The NLU result comes from the caller (the server runs it through the serving
  // core so turns batch with everything else). Thread-safe; turns of one call are serialised.
  // Bad call_id (empty, > 128 bytes, not [A-Za-z0-9_.:-]) -> hotline::Error kInvalidArgument.
  virtual TurnReply Turn(const std::string& call_id, const std::string& text,
                         const nlu::Understanding& nlu,
                         std::chrono::system_clock::time_point now) = 0;
  // Ends the call and forgets its session. Unknown id -> hotline::Error kNotFound.
  virtual CallSummary EndCall(const std::string& call_id) = 0;
  virtual std::optional<WorkOrder> GetWorkOrder(const std::string& id) = 0;
  // The store behind the calls, for the operators' API (list, search, update). Thread-safe.
  virtual WorkOrderStore& work_orders() = 0;
};

}  // namespace hotline::dialog
