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

std::string Str(const YAML::Node& n, const std::string& where) {
  try {
    return n.as<std::string>();
  } catch (const YAML::Exception&) {
    throw Error(where + " must be a string");
  }
}

int Int(const YAML::Node& n, const std::string& where, int fallback) {
  if (!n) return fallback;
  try {
    return n.as<int>();
  } catch (const YAML::Exception&) {
    throw Error(where + " must be an integer");
  }
}

SlotLadder LoadLadder(const YAML::Node& n, const SlotLadder& base, const std::string& where,
                      const nlu::Taxonomy& taxonomy) {
  SlotLadder l = base;
  if (!n) return l;
  if (!n.IsMap()) throw Error(where + " must be a map");
  l.max_no_match = Int(n["max_no_match"], where + ".max_no_match", l.max_no_match);
  l.max_no_input = Int(n["max_no_input"], where + ".max_no_input", l.max_no_input);
  if (n["on_exhausted"]) l.on_exhausted = Str(n["on_exhausted"], where + ".on_exhausted");
  if (n["on_no_input"]) l.on_no_input = Str(n["on_no_input"], where + ".on_no_input");
  if (n["alternatives"]) l.alternatives = StringList(n["alternatives"], where + ".alternatives");
  if (l.max_no_match < 1) throw Error(where + ".max_no_match must be >= 1");
  if (l.max_no_input < 1) throw Error(where + ".max_no_input must be >= 1");
  for (const auto& [key, value] : {std::pair<const char*, std::string>{"on_exhausted", l.on_exhausted},
                                   {"on_no_input", l.on_no_input}}) {
    if (value != "handoff" && value != "continue")
      throw Error(where + "." + key + " must be 'handoff' or 'continue', got '" + value + "'");
  }
  for (const auto& a : l.alternatives)
    if (!taxonomy.HasSlot(a)) throw Error(where + ".alternatives: unknown slot type '" + a + "'");
  return l;
}

DialogRules LoadRules(const YAML::Node& root, const std::string& path,
                      const nlu::Taxonomy& taxonomy) {
  DialogRules r;
  const std::string at = "'" + path + "': ";
  if (const YAML::Node n = root["reprompt"]) {
    r.default_ladder = LoadLadder(n, r.default_ladder, at + "reprompt", taxonomy);
    if (const YAML::Node slots = n["slots"]) {
      if (!slots.IsMap()) throw Error(at + "reprompt.slots must be a map");
      for (const auto& kv : slots) {
        const std::string slot = kv.first.as<std::string>();
        if (!taxonomy.HasSlot(slot))
          throw Error(at + "reprompt.slots." + slot + ": unknown slot type");
        r.ladders[slot] =
            LoadLadder(kv.second, r.default_ladder, at + "reprompt.slots." + slot, taxonomy);
      }
    }
  }
  r.rephrase = StringMap(root, "rephrase", path);
  r.example = StringMap(root, "example", path);
  r.id_problems = StringMap(root, "id_number_problems", path);
  for (const char* k : {"length", "check_digit", "birth_date", "province"})
    if (!r.id_problems.count(k)) throw Error(at + "id_number_problems." + k + " is missing");
  r.slot_names = StringMap(root, "slot_names", path);
  for (const auto& [word, slot] : r.slot_names)
    if (!taxonomy.HasSlot(slot)) throw Error(at + "slot_names." + word + ": unknown slot type");
  if (const YAML::Node e = root["emergencies"]) {
    if (e["department"]) r.emergency_department = Str(e["department"], at + "emergencies.department");
    const YAML::Node rules = e["rules"];
    if (!rules || !rules.IsSequence()) throw Error(at + "emergencies.rules must be a list");
    for (size_t i = 0; i < rules.size(); ++i) {
      const std::string w = at + "emergencies.rules[" + std::to_string(i) + "]";
      EmergencyRule er;
      if (!rules[i]["category"] || !rules[i]["number"] || !rules[i]["keywords"])
        throw Error(w + " needs category, number and keywords");
      er.category = Str(rules[i]["category"], w + ".category");
      er.number = Str(rules[i]["number"], w + ".number");
      if (rules[i]["service"]) er.service = Str(rules[i]["service"], w + ".service");
      if (rules[i]["department"]) er.department = Str(rules[i]["department"], w + ".department");
      er.keywords = StringList(rules[i]["keywords"], w + ".keywords");
      er.intents = StringList(rules[i]["intents"], w + ".intents");
      er.except = StringList(rules[i]["except"], w + ".except");
      er.unless = StringList(rules[i]["unless"], w + ".unless");
      r.emergencies.push_back(std::move(er));
    }
  }
  if (const YAML::Node l = root["legal"]) {
    if (l["department"]) r.legal_department = Str(l["department"], at + "legal.department");
    r.legal_keywords = StringList(l["keywords"], at + "legal.keywords");
    r.legal_intent_prefixes = StringList(l["intent_prefixes"], at + "legal.intent_prefixes");
    if (const YAML::Node routes = l["routes"]) {
      if (!routes.IsSequence()) throw Error(at + "legal.routes must be a list");
      for (size_t i = 0; i < routes.size(); ++i) {
        const std::string w = at + "legal.routes[" + std::to_string(i) + "]";
        if (!routes[i]["keywords"] || !routes[i]["department"])
          throw Error(w + " needs keywords and department");
        r.legal_routes.push_back({StringList(routes[i]["keywords"], w + ".keywords"),
                                  Str(routes[i]["department"], w + ".department"),
                                  {}});
      }
    }
  }
  for (const std::string* d : {&r.emergency_department, &r.legal_department})
    if (!taxonomy.departments.count(*d)) throw Error(at + "unknown department '" + *d + "'");
  if (const YAML::Node o = root["out_of_scope_topics"]) {
    if (!o.IsSequence()) throw Error(at + "out_of_scope_topics must be a list");
    for (size_t i = 0; i < o.size(); ++i) {
      const std::string w = at + "out_of_scope_topics[" + std::to_string(i) + "]";
      if (!o[i]["keywords"] || !o[i]["reply"]) throw Error(w + " needs keywords and reply");
      TopicReply t{StringList(o[i]["keywords"], w + ".keywords"), Str(o[i]["reply"], w + ".reply"),
                   StringList(o[i]["in_scope_if"], w + ".in_scope_if")};
      bool in_scope = false;
      for (const auto& intent : t.in_scope_if) in_scope = in_scope || taxonomy.FindIntent(intent);
      if (!in_scope) r.out_of_scope_topics.push_back(std::move(t));
    }
  }
  if (const YAML::Node k = root["problem_keywords"]) {
    if (!k.IsMap()) throw Error(at + "problem_keywords must be a map");
    for (const auto& kv : k) {
      const std::string intent = kv.first.as<std::string>();
      // Intents the running taxonomy lacks are skipped: the file may name intents of a newer one.
      if (!taxonomy.FindIntent(intent)) continue;
      r.problem_keywords[intent] = StringList(kv.second, at + "problem_keywords." + intent);
    }
  }
  if (const YAML::Node rr = root["reroutes"]) {
    if (!rr.IsSequence()) throw Error(at + "reroutes must be a list");
    for (size_t i = 0; i < rr.size(); ++i) {
      const std::string w = at + "reroutes[" + std::to_string(i) + "]";
      Reroute x;
      if (!rr[i]["keywords"] || !rr[i]["intent"]) throw Error(w + " needs keywords and intent");
      x.keywords = StringList(rr[i]["keywords"], w + ".keywords");
      x.intent = Str(rr[i]["intent"], w + ".intent");
      if (rr[i]["department"]) x.department = Str(rr[i]["department"], w + ".department");
      if (rr[i]["issue"]) x.issue = Str(rr[i]["issue"], w + ".issue");
      if (rr[i]["kind"]) x.kind = Str(rr[i]["kind"], w + ".kind");
      x.required_slots = StringList(rr[i]["required_slots"], w + ".required_slots");
      if (!taxonomy.FindIntent(x.intent)) {
        if (!taxonomy.departments.count(x.department))
          throw Error(w + ": intent '" + x.intent +
                      "' is not in the taxonomy, so a known department is needed");
        if (x.kind != "dispatch") throw Error(w + ".kind must be dispatch");
      }
      for (const auto& slot : x.required_slots)
        if (!taxonomy.HasSlot(slot)) throw Error(w + ".required_slots: unknown '" + slot + "'");
      r.reroutes.push_back(std::move(x));
    }
  }
  return r;
}

}  // namespace

const SlotLadder& DialogRules::Ladder(const std::string& slot) const {
  auto it = ladders.find(slot);
  return it == ladders.end() ? default_ladder : it->second;
}

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
  t.rules = LoadRules(root, path, taxonomy);
  for (const char* key :
       {"greet", "greet_again", "dispatched", "ask_correction", "confirm_again", "anything_else",
        "praise", "goodbye", "out_of_scope", "ask_issue", "clarify", "handoff_request",
        "handoff_unclear", "handoff_turns", "handoff_order", "after_handoff", "order_status",
        "order_urge", "order_not_found", "noise", "cancel", "thanks", "emergency", "legal",
        "merged", "dispatched_one_of", "next_issue", "issue_count", "queued_issue", "handoff_slot",
        "unverified", "after_transfer", "ask_issue_place", "work_order_text"}) {
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

KnowledgeBase KnowledgeBase::Load(const std::string& dir, const nlu::Taxonomy& taxonomy,
                                  const std::vector<std::string>& handled_elsewhere) {
  KnowledgeBase kb;
  for (const auto& intent : taxonomy.intents) {
    if (intent.kind != "answer") continue;
    std::string path = (std::filesystem::path(dir) / (intent.id + ".yaml")).string();
    if (!std::filesystem::exists(path) &&
        std::find(handled_elsewhere.begin(), handled_elsewhere.end(), intent.id) !=
            handled_elsewhere.end())
      continue;
    // An intent of a newer taxonomy without its own file: the folder's _default.yaml, when the
    // city put one there (its texts name the topic by {issue} and {department}).
    const std::string fallback = (std::filesystem::path(dir) / "_default.yaml").string();
    const bool by_default = !std::filesystem::exists(path) && std::filesystem::exists(fallback);
    if (by_default) path = fallback;
    const YAML::Node root = LoadYaml(path, "answer file for intent " + intent.id);
    AnswerTopic topic;
    topic.intent = intent.id;
    if (!by_default && root["intent"] && root["intent"].as<std::string>() != intent.id) {
      throw Error("'" + path + "': intent is '" + root["intent"].as<std::string>() +
                  "', expected '" + intent.id + "'");
    }
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

std::vector<std::string> KnowledgeBase::SlotsUsed(const AnswerEntry& entry,
                                                  const nlu::Taxonomy& taxonomy) {
  std::vector<std::string> out;
  for (size_t open = entry.text.find('{'); open != std::string::npos;
       open = entry.text.find('{', open + 1)) {
    const size_t close = entry.text.find('}', open);
    if (close == std::string::npos) break;
    std::string name = entry.text.substr(open + 1, close - open - 1);
    name = name.substr(0, name.find('|'));
    if (taxonomy.HasSlot(name) && std::find(out.begin(), out.end(), name) == out.end())
      out.push_back(name);
  }
  return out;
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
