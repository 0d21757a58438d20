// A call's dialog state. Plain data, serialised as JSON so that a call begun on one server can
// continue on another through a shared session store (Redis).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dialog/dialog.h"

namespace hotline::dialog {

// Where the conversation about the main intent stands.
enum class Stage {
  kOpen,        // no main intent yet, or the last one is finished
  kFilling,     // asking the main intent's missing slots
  kConfirming,  // read the summary back, waiting for yes/no
  kCorrecting,  // the caller said no: waiting for the correction
  kFinished,    // the main intent was answered or dispatched
  kHandedOff,   // handed to a person: the call is over for the machine
  kEnded,       // the caller said goodbye
};

struct Session {
  int version = 1;  // of this JSON layout
  std::string call_id;
  std::string main_intent;  // "" when none
  Stage stage = Stage::kOpen;
  std::vector<SlotFill> slots;           // the main intent's slots, in the order first given
  std::vector<bool> slot_valid;          // parallel to slots: the normaliser accepted the value
  std::string asking_slot;               // the slot type asked in the last reply ("" when none)
  std::vector<std::string> asked_slots;  // slot types asked so far (for "asked again")
  int turns = 0;
  int low_confidence_streak = 0;
  int order_misses = 0;                   // order ids looked up and not found in a row
  std::vector<std::string> caller_texts;  // the caller's words since the main intent started
  std::vector<std::string> all_texts;     // every turn of the call
  std::string work_order_id;              // the last work order this call created
  bool dispatched = false, answered = false, handed_off = false;

  // The problems of the call: finished ones (issues), those raised but not yet taken up (queued,
  // slots said with them kept), and whether the main_intent fields above hold one not yet in
  // `issues` (active_open).
  std::vector<CallIssue> issues, queued;
  bool active_open = false;
  std::vector<std::string> unverified;   // required slots of the active issue given up on
  std::map<std::string, int> asks;       // per slot type: times asked for the active issue
  std::map<std::string, int> no_match;   // per slot type: turns that did not give it
  std::map<std::string, int> no_input;   // per slot type: turns of silence or noise
  int confirm_misses = 0;                // read-back answered with neither yes nor no
  int finished_turn = 0;                 // the turn that finished the last issue
  bool transferred = false;              // sent to an emergency number

  const SlotFill* FindSlot(const std::string& type) const;
  // Sets (or corrects) a slot; a slot of that type keeps its position.
  void SetSlot(const SlotFill& fill, bool valid);
};

std::string_view StageName(Stage stage);
nlohmann::json SessionToJson(const Session& s);
// Throws hotline::Error(kDataLoss) naming the field when the JSON is not a session of this layout.
Session SessionFromJson(const nlohmann::json& j);

}  // namespace hotline::dialog
