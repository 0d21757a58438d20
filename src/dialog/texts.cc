#include "dialog/texts.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>

#include "base/error.h"

namespace hotline::dialog {
namespace {

YAML::Node LoadYaml(const std::string& path, const std::string& what) {
  try {
    return YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw Error("cannot open " + what + " '" + path + "'", Code::kNotFound);
  } catch (const YAML::Exception& e) {
    throw Error(what + " '" + path + "' is not valid YAML: " + e.what());
  }
}

std::map<std::string, std::string> StringMap(const YAML::Node& root, const std::string& key,
                                             const std::string& path) {
  std::map<std::string, std::string> out;
  const YAML::Node n = root[key];
  if (!n) return out;
  if (!n.IsMap()) throw Error("'" + path + "': field '" + key + "' must be a map of strings");
  for (const auto& kv : n) {
    try {
      out[kv.first.as<std::string>()] = kv.second.as<std::string>();
    } catch (const YAML::Exception&) {
      throw Error("'" + path + "': " + key + "." + kv.first.as<std::string>() +
                  " must be a string");
    }
  }
  return out;
}

std::vector<std::string> StringList(const YAML::Node& n, const std::string& where) {
  if (!n) return {};
  if (n.IsScalar()) return {n.as<std::string>()};
  try {
    return n.as<std::vector<std::string>>();
  } catch (const YAML::Exception&) {
    throw Error(where + " must be a string or a list of strings");
  }
}

std::string LastChars(const std::string& s, size_t n) {
  // Code points, so a Chinese value is not cut inside a character.
  std::vector<size_t> starts;
  for (size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) starts.push_back(i);
  if (starts.size() <= n) return s;
  return s.substr(starts[starts.size() - n]);
}

}  // namespace

std::string Render(const std::string& tmpl, const Vars& vars) {
  std::string out;
  size_t i = 0;
  while (i < tmpl.size()) {
    const size_t open = tmpl.find('{', i);
    if (open == std::string::npos) break;
    const size_t close = tmpl.find('}', open);
    if (close == std::string::npos) break;
    out.append(tmpl, i, open - i);
    std::string name = tmpl.substr(open + 1, close - open - 1), filter;
    if (const auto bar = name.find('|'); bar != std::string::npos) {
      filter = name.substr(bar + 1);
      name = name.substr(0, bar);
    }
    auto it = vars.find(name);
    std::string value = it == vars.end() ? "" : it->second;
    if (filter == "tail4") value = LastChars(value, 4);
    out += value;
    i = close + 1;
  }
  out.append(tmpl, i, std::string::npos);
  return out;
}

DialogTexts DialogTexts::Load(const std::string& path, const nlu::Taxonomy& taxonomy) {
  const YAML::Node root = LoadYaml(path, "dialog config");
  DialogTexts t;
  t.prompts = StringMap(root, "prompts", path);
  t.invalid_prompts = StringMap(root, "invalid_prompts", path);
  t.issues = StringMap(root, "issues", path);
  t.confirm = StringMap(root, "confirm", path);
  t.confirm_by_intent = StringMap(root, "confirm_by_intent", path);
  t.replies = StringMap(root, "replies", path);
  for (const char* key :
       {"greet", "greet_again", "dispatched", "ask_correction", "confirm_again", "anything_else",
        "praise", "goodbye", "out_of_scope", "ask_issue", "clarify", "handoff_request",
        "handoff_unclear", "handoff_turns", "handoff_order", "after_handoff", "order_status",
        "order_urge", "order_not_found"}) {
    if (!t.replies.count(key)) throw Error("'" + path + "': replies." + key + " is missing");
  }
  if (!t.confirm.count("default")) throw Error("'" + path + "': confirm.default is missing");
  for (const auto& intent : taxonomy.intents) {
    for (const auto& slot : intent.required_slots) {
      if (!t.prompts.count(slot)) {
        throw Error("'" + path + "': prompts." + slot + " is missing (a required slot of " +
                    intent.id + ")");
      }
    }
    if (intent.kind == "dispatch" && !t.issues.count(intent.id))
      throw Error("'" + path + "': issues." + intent.id + " is missing (a dispatch intent)");
  }
  for (const auto& [slot, text] : t.prompts) {
    if (!taxonomy.HasSlot(slot))
      throw Error("'" + path + "': prompts." + slot + ": unknown slot type");
  }
  return t;
}

const std::string& DialogTexts::Reply(const std::string& key) const {
  auto it = replies.find(key);
  if (it == replies.end())
    throw Error("dialog reply '" + key + "' is not configured", Code::kInternal);
  return it->second;
}

KnowledgeBase KnowledgeBase::Load(const std::string& dir, const nlu::Taxonomy& taxonomy) {
  KnowledgeBase kb;
  for (const auto& intent : taxonomy.intents) {
    if (intent.kind != "answer") continue;
    const std::string path = (std::filesystem::path(dir) / (intent.id + ".yaml")).string();
    const YAML::Node root = LoadYaml(path, "answer file for intent " + intent.id);
    AnswerTopic topic;
    topic.intent = intent.id;
    if (root["intent"] && root["intent"].as<std::string>() != intent.id) {
      throw Error("'" + path + "': intent is '" + root["intent"].as<std::string>() +
                  "', expected '" + intent.id + "'");
    }
    topic.requires_slots = intent.required_slots;
    for (const auto& s : StringList(root["requires"], "'" + path + "': requires")) {
      if (!taxonomy.HasSlot(s))
        throw Error("'" + path + "': requires: unknown slot type '" + s + "'");
      if (std::find(topic.requires_slots.begin(), topic.requires_slots.end(), s) ==
          topic.requires_slots.end())
        topic.requires_slots.push_back(s);
    }
    const YAML::Node answers = root["answers"];
    if (!answers || !answers.IsSequence() || answers.size() == 0)
      throw Error("'" + path + "': answers must be a non-empty list");
    for (size_t i = 0; i < answers.size(); ++i) {
      const YAML::Node a = answers[i];
      const std::string where = "'" + path + "': answers[" + std::to_string(i) + "]";
      AnswerEntry e;
      if (!a["text"]) throw Error(where + ".text is missing");
      e.text = a["text"].as<std::string>();
      if (const YAML::Node w = a["when"]) {
        if (!w.IsMap()) throw Error(where + ".when must be a map");
        for (const auto& kv : w) {
          const std::string k = kv.first.as<std::string>();
          if (k == "slot" || k == "slots") {
            e.slots_present = StringList(kv.second, where + ".when." + k);
          } else if (k == "text_any") {
            e.text_any = StringList(kv.second, where + ".when.text_any");
          } else if (k == "slot_contains") {
            if (!kv.second.IsMap()) throw Error(where + ".when.slot_contains must be a map");
            for (const auto& sc : kv.second)
              e.slot_contains[sc.first.as<std::string>()] =
                  StringList(sc.second, where + ".when.slot_contains");
          } else {
            throw Error(where + ".when." + k +
                        ": unknown condition (expected slot, slots, slot_contains, text_any)");
          }
        }
        for (const auto& s : e.slots_present)
          if (!taxonomy.HasSlot(s)) throw Error(where + ".when: unknown slot type '" + s + "'");
        for (const auto& [s, _] : e.slot_contains)
          if (!taxonomy.HasSlot(s)) throw Error(where + ".when: unknown slot type '" + s + "'");
      }
      topic.answers.push_back(std::move(e));
    }
    const AnswerEntry& last = topic.answers.back();
    if (!last.slots_present.empty() || !last.slot_contains.empty() || !last.text_any.empty())
      throw Error("'" + path + "': the last answer must have no `when` (the default answer)");
    kb.topics_[intent.id] = std::move(topic);
  }
  return kb;
}

const AnswerTopic* KnowledgeBase::Find(const std::string& intent) const {
  auto it = topics_.find(intent);
  return it == topics_.end() ? nullptr : &it->second;
}

const AnswerEntry& KnowledgeBase::Choose(const AnswerTopic& topic, const Vars& slots,
                                         const std::string& caller_words) const {
  for (const auto& e : topic.answers) {
    bool ok = true;
    for (const auto& s : e.slots_present) ok = ok && slots.count(s) && !slots.at(s).empty();
    for (const auto& [s, words] : e.slot_contains) {
      auto it = slots.find(s);
      bool any = false;
      if (it != slots.end())
        for (const auto& w : words) any = any || it->second.find(w) != std::string::npos;
      ok = ok && any;
    }
    if (!e.text_any.empty()) {
      bool any = false;
      for (const auto& w : e.text_any) any = any || caller_words.find(w) != std::string::npos;
      ok = ok && any;
    }
    if (ok) return e;
  }
  return topic.answers.back();
}

}  // namespace hotline::dialog
