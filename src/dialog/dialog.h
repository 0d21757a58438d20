// The call itself: a dialog session per call id, a policy that turns (NLU result, session state)
// into a reply and an action, answers from a knowledge base, work orders and hand-off.
// Transport-agnostic: the gRPC/HTTP frontends and `hotline chat` drive it through DialogManager.
// The contract is /work/notes/s2/dialog-contract.md; changes are additive only.
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

enum class Action { kGreet, kAskSlot, kConfirm, kAnswer, kDispatch, kHandoff, kClarify, kEnd };
// "greet", "ask_slot", "confirm", "answer", "dispatch", "handoff", "clarify", "end".
std::string_view ActionName(Action action);

struct TurnReply {
  std::string reply;  // text said to the caller
  Action action = Action::kClarify;
  std::string intent, department;  // the call's MAIN intent and its department so far ("" if none)
  std::vector<SlotFill> slots;     // the main intent's slots collected so far
  std::string work_order_id;       // set on the turn that created it
  // The call is over (dispatched+acknowledged, answered+goodbye, handoff, end).
  bool done = false;
  int slots_reasked = 0;  // this turn re-asked a slot already asked (metric "slots asked again")
};

struct CallSummary {
  std::string call_id;
  std::string outcome;  // dispatch | answer | human | abandoned
  std::string intent, department;
  std::vector<SlotFill> slots;
  std::string work_order_id;
  int turns = 0;
};

struct WorkOrder {
  std::string id;  // "WO20261201-000123"
  std::string call_id, department, intent;
  std::string caller_text;  // the caller's own words, all turns
  std::string created_at;   // RFC 3339 UTC
  std::string status;       // "open"
  std::vector<SlotFill> slots;
  std::vector<std::string> urged_at;  // RFC 3339 UTC, one per urging
};

// Loaded from config/dialog.yaml by DialogConfig::Load(path).
struct DialogConfig {
  // config/dialog.yaml itself: prompts per slot type and canned replies.
  std::string prompts_file;
  std::string answers_dir = "config/answers";
  std::string session_store = "memory";  // "memory" or "redis://host:port[/db]"
  std::string work_order_db = "var/work_orders.sqlite";
  int idle_timeout_s = 600, max_turns = 20;
  float min_confidence = 0.5f;     // below: a low-confidence turn (two in a row -> handoff)
  float switch_confidence = 0.8f;  // a new business intent above this switches the main intent
  // Throws hotline::Error naming the file and the field on problems. Relative paths in the file
  // (answers_dir, work_order_db) are kept as written: relative to the working directory.
  static DialogConfig Load(const std::string& path);
};

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
};

}  // namespace hotline::dialog
