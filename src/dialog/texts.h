// What the dialog says: slot prompts, read-back templates and canned replies (config/dialog.yaml),
// and the answer knowledge base (config/answers/<intent>.yaml). Templates use {name}
// placeholders; {name|tail4} gives the value's last four characters (for ID numbers: a caller
// hears enough to recognise it, a log would not hold it in clear).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "nlu/taxonomy.h"

namespace hotline::dialog {

using Vars = std::map<std::string, std::string>;

// Replaces {name} and {name|tail4} with vars[name]; unknown names become "". A "{" without a
// closing "}" is kept as written.
std::string Render(const std::string& tmpl, const Vars& vars);

// How a slot is asked again (Dialogflow CX's no-match / no-input handlers): the prompt, then
// `rephrase`, then `example` (an example or an alternative); after max_no_match turns that did not
// give the slot either go on without it, marked unverified in the work order ("continue"), or
// hand off ("handoff"); after max_no_input turns of silence or noise, likewise (on_no_input).
struct SlotLadder {
  int max_no_match = 3, max_no_input = 2;
  std::string on_exhausted = "handoff";  // after max_no_match
  std::string on_no_input = "handoff";   // after max_no_input (noise: the caller is not heard)
  std::vector<std::string> alternatives;  // slot types that may stand in ("说一下地址也可以")
};

// An emergency the hotline does not handle itself: the caller is sent to `number` at once.
struct EmergencyRule {
  std::string category, number, service;  // "fire", "119", "火警"
  std::string department;  // the emergency service's department, when the taxonomy has it
  std::vector<std::string> keywords;      // any of them in the caller's words
  std::vector<std::string> except;        // look-alikes taken out first ("打不着火")
  std::vector<std::string> unless;        // words that make it no emergency now (上个月, 理赔)
  std::vector<std::string> intents;       // taxonomy intents that mean it (when they exist)
};

// Words that route a problem elsewhere than the model's intent says (路灯 -> city management).
struct Reroute {
  std::vector<std::string> keywords;
  std::string intent;  // used as the issue's intent; may be absent from the taxonomy
  // When `intent` is not in the taxonomy: its department, description, kind and required slots.
  std::string department, issue, kind = "dispatch";
  std::vector<std::string> required_slots;
};

struct TopicReply {
  std::vector<std::string> keywords;
  std::string reply;
  // Out-of-scope topics only: not out of scope when the taxonomy has one of these intents (a
  // newer taxonomy takes express-delivery complaints, say).
  std::vector<std::string> in_scope_if;
};

// The dialog's rules beyond the texts (all in config/dialog.yaml).
struct DialogRules {
  SlotLadder default_ladder;
  std::map<std::string, SlotLadder> ladders;        // per slot type
  std::map<std::string, std::string> rephrase;      // second ask per slot type
  std::map<std::string, std::string> example;       // third ask per slot type
  std::map<std::string, std::string> id_problems;   // length | check_digit | birth_date | province
  std::vector<EmergencyRule> emergencies;
  std::string emergency_department = "hotline";
  std::vector<std::string> legal_keywords;          // 信访, 法院, 起诉 ...
  std::vector<std::string> legal_intent_prefixes;   // petition, court, ...
  std::string legal_department = "hotline";
  // Which legal channel a matter belongs to, by keyword: its department when the taxonomy has it.
  std::vector<TopicReply> legal_routes;             // reply = the department id
  std::vector<TopicReply> out_of_scope_topics;
  std::map<std::string, std::vector<std::string>> problem_keywords;  // intent -> keywords
  std::vector<Reroute> reroutes;
  std::map<std::string, std::string> slot_names;    // 地址 -> address (a named slot in a correction)

  const SlotLadder& Ladder(const std::string& slot) const;
};

struct DialogTexts {
  std::map<std::string, std::string> prompts, invalid_prompts, issues, confirm, confirm_by_intent,
      replies;
  DialogRules rules;
  // Loads the sections of config/dialog.yaml. Every reply the policy uses must be present, and
  // every required slot type a prompt: otherwise hotline::Error naming the file and the missing
  // key. An intent without an `issues` description is described by the taxonomy's zh.
  static DialogTexts Load(const std::string& path, const nlu::Taxonomy& taxonomy);
  const std::string& Reply(const std::string& key) const;  // Error(kInternal) when missing
};

// One answer of the knowledge base, chosen when all its conditions hold.
struct AnswerEntry {
  std::vector<std::string> slots_present;                         // when.slot / when.slots
  std::map<std::string, std::vector<std::string>> slot_contains;  // when.slot_contains
  std::vector<std::string> text_any;  // when.text_any: a word in the caller's words
  std::string text;
};

struct AnswerTopic {
  std::string intent;
  // The file's `requires`: asked before any answer. The taxonomy's required_slots are asked only
  // when the chosen answer's text uses them ({id_number|tail4}), so a policy question is answered
  // without asking for personal numbers; other slots a text uses are optional.
  std::vector<std::string> requires_slots;
  std::vector<AnswerEntry> answers;         // the last one has no conditions
};

class KnowledgeBase {
 public:
  // Loads <dir>/<intent>.yaml for every `answer` intent of the taxonomy; a malformed file is a
  // hotline::Error naming it, and so is a missing one unless the intent is in `handled_elsewhere`
  // (emergency and legal-channel intents, which the dialog answers by rule) or the folder has a
  // `_default.yaml`, which then answers it.
  static KnowledgeBase Load(const std::string& dir, const nlu::Taxonomy& taxonomy,
                            const std::vector<std::string>& handled_elsewhere = {});
  // Slot types the entry's text uses ({type} or {type|filter}).
  static std::vector<std::string> SlotsUsed(const AnswerEntry& entry,
                                            const nlu::Taxonomy& taxonomy);
  const AnswerTopic* Find(const std::string& intent) const;
  // The first entry whose conditions hold for these slots and the caller's words.
  const AnswerEntry& Choose(const AnswerTopic& topic, const Vars& slots,
                            const std::string& caller_words) const;

 private:
  std::map<std::string, AnswerTopic> topics_;
};

}  // namespace hotline::dialog
