#include "nlu/taxonomy.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>

#include "base/error.h"

namespace hotline::nlu {

Taxonomy Taxonomy::Load(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw Error("cannot open taxonomy file '" + path + "'", Code::kNotFound);
  } catch (const YAML::Exception& e) {
    throw Error("taxonomy file '" + path + "' is not valid YAML: " + e.what());
  }
  Taxonomy t;
  try {
    for (const auto& kv : root["departments"])
      t.departments[kv.first.as<std::string>()] = kv.second.as<std::string>();
    for (const auto& kv : root["business_lines"])
      t.business_lines[kv.first.as<std::string>()] = kv.second.as<std::string>();
    if (root["categories"]) {
      if (!root["categories"].IsMap())
        throw Error("taxonomy file '" + path + "': categories must be a map of id: name");
      for (const auto& kv : root["categories"])
        t.categories[kv.first.as<std::string>()] = kv.second.as<std::string>();
    }
    for (const auto& kv : root["slots"]) t.slots.push_back(kv.first.as<std::string>());
    for (const auto& n : root["intents"]) {
      IntentInfo i;
      i.id = n["id"].as<std::string>();
      i.line = n["line"].as<std::string>();
      i.dept = n["dept"].as<std::string>();
      i.kind = n["kind"] ? n["kind"].as<std::string>() : "";
      i.zh = n["zh"] ? n["zh"].as<std::string>() : "";
      i.category = n["category"] ? n["category"].as<std::string>() : "";
      if (n["co_depts"]) i.co_depts = n["co_depts"].as<std::vector<std::string>>();
      if (n["required_slots"])
        i.required_slots = n["required_slots"].as<std::vector<std::string>>();
      t.intents.push_back(std::move(i));
    }
  } catch (const YAML::Exception& e) {
    throw Error("taxonomy file '" + path + "': unexpected structure: " + e.what());
  }
  if (t.intents.empty() || t.slots.empty())
    throw Error("taxonomy file '" + path + "' has no intents or no slots");
  for (const auto& i : t.intents) {
    if (!t.departments.count(i.dept))
      throw Error("taxonomy file '" + path + "': intent '" + i.id + "' has unknown department '" +
                  i.dept + "'");
    if (!t.business_lines.count(i.line))
      throw Error("taxonomy file '" + path + "': intent '" + i.id +
                  "' has unknown business line '" + i.line + "'");
    for (const auto& d : i.co_depts) {
      if (!t.departments.count(d))
        throw Error("taxonomy file '" + path + "': intent '" + i.id +
                    "' has unknown co-handling department '" + d + "'");
      if (d == i.dept)
        throw Error("taxonomy file '" + path + "': intent '" + i.id + "' lists its lead department '" +
                    d + "' among co_depts");
    }
    if (t.categories.empty()) {
      if (!i.category.empty())
        throw Error("taxonomy file '" + path + "': intent '" + i.id + "' has category '" +
                    i.category + "' but the file has no categories");
    } else if (i.category.empty()) {
      throw Error("taxonomy file '" + path + "': intent '" + i.id + "' has no category");
    } else if (!t.categories.count(i.category)) {
      throw Error("taxonomy file '" + path + "': intent '" + i.id + "' has unknown category '" +
                  i.category + "'");
    }
  }
  return t;
}

const IntentInfo* Taxonomy::FindIntent(const std::string& id) const {
  for (const auto& i : intents)
    if (i.id == id) return &i;
  return nullptr;
}

std::string Taxonomy::CategoryName(const std::string& id) const {
  auto it = categories.find(id);
  return it == categories.end() ? "" : it->second;
}

bool Taxonomy::HasSlot(const std::string& id) const {
  return std::find(slots.begin(), slots.end(), id) != slots.end();
}

}  // namespace hotline::nlu
