// The dialog policy: (session, caller text, NLU result) → updated session + reply. Deterministic
// given its inputs and the work-order store; no threads, no I/O besides the store, so tests drive
// it with hand-built nlu::Understanding values.
#pragma once

#include <chrono>

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

  // The call's summary (outcome dispatch > human > answer > abandoned).
  CallSummary Summarize(const Session& s) const;

 private:
  struct TurnSlot {
    SlotFill fill;
    bool valid = true;
  };
  bool IsBusiness(const std::string& intent) const;
  std::string KindOf(const std::string& intent) const;
  std::string DeptOf(const std::string& intent) const;
  std::vector<std::string> RequiredSlots(const std::string& intent) const;
  // This turn's slots: the model's (the last value of a type wins, adjacent address pieces are
  // joined), an order id read from the text, or a bare value for the pending question.
  std::vector<TurnSlot> TurnSlots(const Session& s, const std::string& text,
                                  const nlu::Understanding& u, bool bare_value_ok,
                                  const std::string& bare_type) const;
  // The slot types a reply may be answering: the one asked for, or while a read-back is being
  // confirmed or corrected every required slot of the main intent.
  std::vector<std::string> PendingSlots(const Session& s) const;
  // The free-text slot type a slot-less turn answers, judged by its form ("" when none).
  std::string BareValueType(const Session& s, const std::string& text,
                            const nlu::Understanding& u) const;
  // Whether the turn is little more than a value of a pending slot that the model did span
  // ("叫好味道餐厅" after "哪里需要更正"): an answer, not a new problem, whatever its intent.
  bool AnswersPending(const Session& s, const std::string& text,
                      const nlu::Understanding& u) const;
  Vars SlotVars(const Session& s) const;

  void StartMain(Session& s, const std::string& intent, bool keep_slots) const;
  TurnReply Advance(Session& s, bool slots_changed, const nlu::Understanding& u,
                    std::chrono::system_clock::time_point now) const;
  TurnReply AskSlot(Session& s, const std::string& slot, bool invalid) const;
  TurnReply ReadBack(Session& s) const;
  TurnReply Dispatch(Session& s, std::chrono::system_clock::time_point now) const;
  TurnReply Answer(Session& s) const;
  TurnReply Order(Session& s, std::chrono::system_clock::time_point now) const;
  TurnReply Handoff(Session& s, const std::string& reply_key) const;
  TurnReply Simple(const std::string& reply, Action action) const;
  void Finish(const Session& s, TurnReply& r) const;

  const DialogConfig& config_;
  const nlu::Taxonomy& taxonomy_;
  const DialogTexts& texts_;
  const KnowledgeBase& kb_;
  WorkOrderStore& orders_;
};

}  // namespace hotline::dialog
