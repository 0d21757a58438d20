// DialogConfig::Load and the DialogManager: call-id checks, session store transactions around
// the policy, summaries and work-order look-ups.
#include <yaml-cpp/yaml.h>

#include "base/error.h"
#include "dialog/dialog.h"
#include "dialog/manager_internal.h"
#include "dialog/policy.h"
#include "text/utf8.h"

namespace hotline::dialog {
namespace {

void CheckCallId(const std::string& id) {
  if (id.empty()) throw Error("call_id is empty", Code::kInvalidArgument);
  if (id.size() > 128)
    throw Error("call_id has " + std::to_string(id.size()) + " bytes, at most 128 allowed",
                Code::kInvalidArgument);
  for (unsigned char c : id) {
    if (!(std::isalnum(c) || c == '_' || c == '.' || c == ':' || c == '-'))
      throw Error("call_id may hold only A-Z a-z 0-9 _ . : -", Code::kInvalidArgument);
  }
}

template <typename T>
T Field(const YAML::Node& root, const char* key, T fallback, const std::string& path) {
  const YAML::Node n = root[key];
  if (!n) return fallback;
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    throw Error("dialog config '" + path + "': field '" + key + "' has the wrong type");
  }
}

class Manager : public DialogManager {
 public:
  Manager(const DialogConfig& config, const nlu::Taxonomy& taxonomy,
          std::unique_ptr<SessionStore> sessions, std::unique_ptr<WorkOrderStore> orders)
      : config_(config),
        taxonomy_(taxonomy),
        texts_(DialogTexts::Load(config.prompts_file, taxonomy_)),
        kb_(KnowledgeBase::Load(config.answers_dir, taxonomy_,
                                Policy::RuleIntents(taxonomy_, texts_.rules))),
        sessions_(std::move(sessions)),
        orders_(std::move(orders)),
        policy_(config_, taxonomy_, texts_, kb_, *orders_) {}

  TurnReply Turn(const std::string& call_id, const std::string& text, const nlu::Understanding& nlu,
                 std::chrono::system_clock::time_point now) override {
    CheckCallId(call_id);
    // Sessions and orders store the caller's words as JSON/SQLite text: UTF-8 only.
    if (std::string problem = text::Utf8Problem(text); !problem.empty())
      throw Error("text is not valid UTF-8: " + problem, Code::kInvalidArgument);
    if (text.size() > 4096)
      throw Error("text has " + std::to_string(text.size()) + " bytes, at most 4096 allowed",
                  Code::kInvalidArgument);
    TurnReply reply;
    sessions_->Transact(call_id, [&](std::optional<Session>& s) {
      if (!s) {
        s.emplace();
        s->call_id = call_id;
      }
      reply = policy_.Turn(*s, text, nlu, now);
    });
    return reply;
  }

  CallSummary EndCall(const std::string& call_id) override {
    CheckCallId(call_id);
    std::optional<CallSummary> summary;
    sessions_->Transact(call_id, [&](std::optional<Session>& s) {
      if (!s) return;
      summary = policy_.Summarize(*s);
      s.reset();
    });
    if (!summary)
      throw Error("no call with this call_id (ended or idle too long)", Code::kNotFound);
    return *summary;
  }

  std::optional<WorkOrder> GetWorkOrder(const std::string& id) override { return orders_->Get(id); }
  WorkOrderStore& work_orders() override { return *orders_; }

 private:
  const DialogConfig config_;
  const nlu::Taxonomy taxonomy_;  // a copy: the manager may outlive the caller's taxonomy
  const DialogTexts texts_;
  const KnowledgeBase kb_;
  std::unique_ptr<SessionStore> sessions_;
  std::unique_ptr<WorkOrderStore> orders_;
  Policy policy_;
};

}  // namespace

std::string DialogConfig::ApplyModelThreshold(const std::optional<float>& model_threshold) {
  if (!min_confidence_from_model)
    return "dialog: min_confidence " + std::to_string(min_confidence) + " (dialog config)";
  if (!model_threshold) {
    return "dialog: WARNING: min_confidence is 'model' but the model folder has no "
           "calibration.handoff_threshold; using " + std::to_string(min_confidence);
  }
  min_confidence = *model_threshold;
  if (switch_confidence < min_confidence) switch_confidence = min_confidence;
  return "dialog: min_confidence " + std::to_string(min_confidence) +
         " (the model's calibrated hand-off threshold)";
}

DialogConfig DialogConfig::Load(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw Error("cannot open dialog config '" + path + "'", Code::kNotFound);
  } catch (const YAML::Exception& e) {
    throw Error("dialog config '" + path + "' is not valid YAML: " + e.what());
  }
  DialogConfig c;
  c.prompts_file = path;
  c.answers_dir = Field<std::string>(root, "answers_dir", c.answers_dir, path);
  c.session_store = Field<std::string>(root, "session_store", c.session_store, path);
  c.work_order_db = Field<std::string>(root, "work_order_db", c.work_order_db, path);
  c.idle_timeout_s = Field<int>(root, "idle_timeout_s", c.idle_timeout_s, path);
  c.max_sessions = Field<int>(root, "max_sessions", c.max_sessions, path);
  c.max_turns = Field<int>(root, "max_turns", c.max_turns, path);
  if (root["min_confidence"] && root["min_confidence"].IsScalar() &&
      root["min_confidence"].Scalar() == "model") {
    c.min_confidence_from_model = true;  // the value comes from the model folder
  } else {
    c.min_confidence = Field<float>(root, "min_confidence", c.min_confidence, path);
  }
  c.switch_confidence = Field<float>(root, "switch_confidence", c.switch_confidence, path);
  c.unclear_handoff_after =
      Field<int>(root, "unclear_handoff_after", c.unclear_handoff_after, path);
  c.duplicate_window_h = Field<int>(root, "duplicate_window_h", c.duplicate_window_h, path);
  auto bad = [&](const std::string& field, const std::string& why) {
    return Error("dialog config '" + path + "': field '" + field + "' " + why);
  };
  if (c.idle_timeout_s <= 0) throw bad("idle_timeout_s", "must be > 0");
  if (c.max_sessions <= 0) throw bad("max_sessions", "must be > 0");
  if (c.max_turns <= 0) throw bad("max_turns", "must be > 0");
  if (c.unclear_handoff_after <= 0) throw bad("unclear_handoff_after", "must be > 0");
  if (c.duplicate_window_h < 0) throw bad("duplicate_window_h", "must be >= 0 (0: off)");
  if (!(c.min_confidence >= 0 && c.min_confidence <= 1))
    throw bad("min_confidence", "must be in [0, 1]");
  if (!(c.switch_confidence >= c.min_confidence && c.switch_confidence <= 1))
    throw bad("switch_confidence", "must be in [min_confidence, 1]");
  if (c.session_store != "memory" && c.session_store.rfind("redis://", 0) != 0)
    throw bad("session_store",
              "must be 'memory' or 'redis://host:port[/db]', got '" + c.session_store + "'");
  if (c.work_order_db.empty()) throw bad("work_order_db", "is empty");
  return c;
}

std::unique_ptr<SessionStore> NewSessionStore(const DialogConfig& config) {
  const auto idle = std::chrono::seconds(config.idle_timeout_s);
  if (config.session_store == "memory") {
    return NewMemorySessionStore(idle, nullptr, size_t(config.max_sessions));
  }
  return NewRedisSessionStore(config.session_store, idle);
}

std::unique_ptr<DialogManager> NewDialogManager(const DialogConfig& config,
                                                const nlu::Taxonomy& taxonomy,
                                                std::unique_ptr<SessionStore> sessions,
                                                std::unique_ptr<WorkOrderStore> orders) {
  return std::make_unique<Manager>(config, taxonomy, std::move(sessions), std::move(orders));
}

std::unique_ptr<DialogManager> DialogManager::Create(const DialogConfig& config,
                                                     const nlu::Taxonomy& taxonomy) {
  if (config.prompts_file.empty())
    throw Error("DialogConfig.prompts_file is empty: load the config with DialogConfig::Load");
  return NewDialogManager(config, taxonomy, NewSessionStore(config),
                          WorkOrderStore::Open(config.work_order_db));
}

}  // namespace hotline::dialog
