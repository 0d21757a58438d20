// The hotline taxonomy (config/taxonomy/hotline.yaml): intents with their category, business line,
// lead and co-handling departments, slot types, in the file's order.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace hotline::nlu {

struct IntentInfo {
  std::string id, line, dept, kind, zh;
  std::string category;                // "" in a taxonomy without categories (version 1)
  std::vector<std::string> co_depts;   // co-handling departments, besides the lead `dept`
  std::vector<std::string> required_slots;
};

struct Taxonomy {
  std::vector<IntentInfo> intents;                  // file order
  std::vector<std::string> slots;                   // slot type ids, file order
  std::map<std::string, std::string> departments;   // id → name
  std::map<std::string, std::string> business_lines;
  // Category id → name (categories:). Empty in a version-1 file; when present, every intent names
  // one of them.
  std::map<std::string, std::string> categories;

  // Throws hotline::Error naming the file and the entry when the file is unreadable or an intent
  // refers to an unknown department, co-handling department, business line or category, or lacks
  // a category in a file that has categories.
  static Taxonomy Load(const std::string& path);
  // nullptr when unknown.
  const IntentInfo* FindIntent(const std::string& id) const;
  bool HasSlot(const std::string& id) const;
  // The category's name, "" when unknown or empty.
  std::string CategoryName(const std::string& id) const;
};

}  // namespace hotline::nlu
