// The dialog policy: (session, caller text, NLU result) → updated session + reply. Deterministic
// given its inputs and the work-order store; no threads, no I/O besides the store, so tests drive
// it with hand-built nlu::Understanding values.
//
// A turn is read as dialog acts by rule first (acts.h: agreement, denial, corrections, thanks,
// goodbye, cancelling, noise), then by the model's intent and slots, so the policy does not hang
// on one model's quirks. Emergencies and legal-channel matters are found by keyword as well as by
// intent; problems by the model's intent and by dialog.yaml's problem keywords (several per turn).
#pragma once

#include <chrono>

#include "dialog/acts.h"
#include "dialog/dialog.h"
#include "dialog/session.h"
#include "dialog/texts.h"
#include "dialog/work_order_store.h"

namespace hotline::dialog {

class Policy {
 public:
  // All references must outlive the policy.
  Policy(const DialogConfig& config, const nlu::Taxonomy& taxonomy, const DialogTexts& texts,
         const KnowledgeBase& kb, WorkOrderStore& orders)
      : config_(config), taxonomy_(taxonomy), texts_(texts), kb_(kb), orders_(orders) {}

  // One caller turn. A work order it creates is committed before this returns.
  TurnReply Turn(Session& s, const std::string& text, const nlu::Understanding& u,
                 std::chrono::system_clock::time_point now) const;

  // The call's summary (outcome dispatch > transfer > human > answer > abandoned).
  CallSummary Summarize(const Session& s) const;

  // Taxonomy intents the dialog answers by rule (emergency and legal ones), for
  // KnowledgeBase::Load.
  static std::vector<std::string> RuleIntents(const nlu::Taxonomy& taxonomy,
                                              const DialogRules& rules);

 private:
  struct TurnSlot {
    SlotFill fill;
    bool valid = true;
  };
  // What the turn is about, beyond acts and slots.
  struct Reading {
    TurnActs acts;
    std::string model;  // the model's intent when confident and known, else ""
    bool affirm = false, deny = false, thanks = false, goodbye = false, greeting = false;
    std::vector<std::string> problems;  // problem intents raised (first = the main one)
  };

  bool IsBusiness(const std::string& intent) const;
  std::string KindOf(const std::string& intent) const;
  std::string DeptOf(const std::string& intent) const;
  std::string IssueText(const std::string& intent) const;
  std::vector<std::string> RequiredSlots(const Session& s) const;
  const EmergencyRule* EmergencyIn(const std::string& text, const std::string& model) const;
  bool IsLegal(const std::string& text, const std::string& model) const;
  bool NamesProblem(const std::string& text) const;  // a problem keyword or reroute word is said
  // Problems raised in the turn. While another is in progress the model's intent counts only at
  // switch_confidence or above (keywords always count).
  std::vector<std::string> ProblemsIn(const std::string& text, const std::string& model,
                                      float confidence, bool in_progress) const;
  std::vector<TurnSlot> TurnSlots(const Session& s, const std::string& text,
                                  const nlu::Understanding& u, bool bare_value_ok,
                                  const std::string& bare_type, bool widen = true) const;
  std::vector<std::string> PendingSlots(const Session& s) const;
  std::string BareValueType(const Session& s, const std::string& text,
                            const nlu::Understanding& u) const;
  bool AnswersPending(const Session& s, const std::string& text,
                      const nlu::Understanding& u) const;
  // Applies a correction to the slot it names; returns that slot type ("" when none fits).
  std::string ApplyCorrection(Session& s, const Correction& c, const nlu::Understanding& u,
                              std::chrono::system_clock::time_point now) const;
  // A valid ID number anywhere in the words replaces a missing or invalid one.
  bool TakeIdNumber(Session& s, const std::string& text,
                    std::chrono::system_clock::time_point now) const;
  std::string IdProblem(const std::string& value) const;
  Vars SlotVars(const Session& s) const;
  bool SlotDone(const Session& s, const std::string& slot) const;

  void StartMain(Session& s, const std::string& intent, bool keep_slots) const;
  void Queue(Session& s, const std::vector<std::string>& intents,
             const std::vector<TurnSlot>& slots, const std::string& said) const;
  void Record(Session& s, const std::string& outcome, const std::string& order_id = "",
              const std::string& transfer_to = "") const;
  TurnReply Advance(Session& s, std::chrono::system_clock::time_point now) const;
  TurnReply NextQueued(Session& s, TurnReply done, std::chrono::system_clock::time_point now) const;
  TurnReply AskSlot(Session& s, const std::string& slot, bool invalid) const;
  TurnReply SlotMissed(Session& s, bool no_input, bool dont_know,
                       std::chrono::system_clock::time_point now) const;
  TurnReply ReadBack(Session& s) const;
  TurnReply Dispatch(Session& s, std::chrono::system_clock::time_point now) const;
  TurnReply Answer(Session& s, std::chrono::system_clock::time_point now) const;
  TurnReply Order(Session& s, std::chrono::system_clock::time_point now) const;
  TurnReply Transfer(Session& s, const EmergencyRule& rule, const std::string& model) const;
  TurnReply Legal(Session& s, const std::string& model, const std::string& text) const;
  TurnReply OutOfScope(Session& s, const std::string& text) const;
  TurnReply Unclear(Session& s, bool noise) const;
  TurnReply Handoff(Session& s, const std::string& reply_key) const;
  TurnReply End(Session& s, const std::string& reply_key) const;
  TurnReply Simple(const std::string& reply, Action action) const;
  std::string WorkOrderText(const Session& s) const;
  int DispatchIssueCount(const Session& s) const;
  void Finish(const Session& s, TurnReply& r) const;

  const DialogConfig& config_;
  const nlu::Taxonomy& taxonomy_;
  const DialogTexts& texts_;
  const KnowledgeBase& kb_;
  WorkOrderStore& orders_;
};

}  // namespace hotline::dialog
