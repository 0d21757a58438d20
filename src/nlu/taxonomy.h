// The hotline taxonomy (config/taxonomy/hotline.yaml): intents with their business line and
// department, slot types, in the file's order.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace hotline::nlu {

struct IntentInfo {
  std::string id, line, dept, kind, zh;
  std::vector<std::string> required_slots;
};

struct Taxonomy {
  std::vector<IntentInfo> intents;                  // file order
  std::vector<std::string> slots;                   // slot type ids, file order
  std::map<std::string, std::string> departments;   // id → name
  std::map<std::string, std::string> business_lines;

  // Throws hotline::Error naming the file and the entry when the file is unreadable or an intent
  // refers to an unknown department or business line.
  static Taxonomy Load(const std::string& path);
  // nullptr when unknown.
  const IntentInfo* FindIntent(const std::string& id) const;
  bool HasSlot(const std::string& id) const;
};

}  // namespace hotline::nlu
