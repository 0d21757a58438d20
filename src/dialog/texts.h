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

struct DialogTexts {
  std::map<std::string, std::string> prompts, invalid_prompts, issues, confirm, confirm_by_intent,
      replies;
  // Loads the sections of config/dialog.yaml. Every reply the policy uses must be present, and
  // every dispatch intent needs an issue description and every required slot type a prompt:
  // otherwise hotline::Error naming the file and the missing key.
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
  std::vector<std::string> requires_slots;  // the taxonomy's required_slots + the file's `requires`
  std::vector<AnswerEntry> answers;         // the last one has no conditions
};

class KnowledgeBase {
 public:
  // Loads <dir>/<intent>.yaml for every `answer` intent of the taxonomy; a missing or malformed
  // file is a hotline::Error naming it.
  static KnowledgeBase Load(const std::string& dir, const nlu::Taxonomy& taxonomy);
  const AnswerTopic* Find(const std::string& intent) const;
  // The first entry whose conditions hold for these slots and the caller's words.
  const AnswerEntry& Choose(const AnswerTopic& topic, const Vars& slots,
                            const std::string& caller_words) const;

 private:
  std::map<std::string, AnswerTopic> topics_;
};

}  // namespace hotline::dialog
