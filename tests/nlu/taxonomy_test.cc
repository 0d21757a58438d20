// The taxonomy loader: categories, co-handling departments, version-1 files without categories,
// and a clear error for each inconsistency.
#include "nlu/taxonomy.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "base/error.h"

namespace hotline::nlu {
namespace {
namespace fs = std::filesystem;

const std::string kConfig = std::string(HOTLINE_SOURCE_DIR) + "/config/taxonomy/hotline.yaml";

// A small taxonomy with the given extra top-level text and intents.
std::string Write(const std::string& name, const std::string& categories,
                  const std::string& intents) {
  const fs::path p = fs::path(::testing::TempDir()) /
                     ("hotline_taxonomy_" + name + "_" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(p) << "departments: {city_mgmt: 城管, power: 供电, hotline: 热线}\n"
                   << "business_lines: {city: 城市管理, service: 热线服务}\n"
                   << categories << "slots:\n  address: {zh: 地址}\n"
                   << "intents:\n"
                   << intents;
  return p.string();
}

const char* kCategories = "categories: {city_management: 城市管理, hotline_other: 咨询与其他}\n";

TEST(Taxonomy, ShippedFileHasCategoriesAndCoDepartments) {
  const Taxonomy t = Taxonomy::Load(kConfig);
  ASSERT_EQ(t.intents.size(), 125u);
  EXPECT_EQ(t.categories.size(), 16u);
  // The first 55 intents are version 1's, in its order.
  EXPECT_EQ(t.intents[0].id, "pension_inquiry");
  EXPECT_EQ(t.intents[54].id, "out_of_scope");
  for (const auto& i : t.intents) {
    EXPECT_TRUE(t.categories.count(i.category)) << i.id;
    EXPECT_FALSE(t.CategoryName(i.category).empty()) << i.id;
  }
  const IntentInfo* light = t.FindIntent("street_light");
  ASSERT_NE(light, nullptr);
  EXPECT_EQ(light->dept, "city_mgmt");  // city management, not the traffic police
  EXPECT_EQ(light->category, "city_management");
  EXPECT_EQ(t.CategoryName(light->category), "城市管理");
  EXPECT_EQ(light->co_depts, std::vector<std::string>{"power"});
  const IntentInfo* gas = t.FindIntent("gas_leak");
  ASSERT_NE(gas, nullptr);
  EXPECT_EQ(gas->category, "emergency_safety");
  EXPECT_EQ(gas->co_depts, std::vector<std::string>{"fire"});
  EXPECT_TRUE(t.FindIntent("taxi_complaint")->co_depts.size() == 1);
  EXPECT_TRUE(t.FindIntent("greeting")->co_depts.empty());
  EXPECT_EQ(t.CategoryName("no_such_category"), "");
}

TEST(Taxonomy, VersionOneFileWithoutCategoriesLoads) {
  const Taxonomy t = Taxonomy::Load(
      Write("v1", "", "  - {id: street_vendor, line: city, dept: city_mgmt, kind: dispatch}\n"));
  ASSERT_EQ(t.intents.size(), 1u);
  EXPECT_TRUE(t.categories.empty());
  EXPECT_EQ(t.intents[0].category, "");
  EXPECT_EQ(t.CategoryName(t.intents[0].category), "");
}

TEST(Taxonomy, InconsistenciesAreErrorsNamingTheIntent) {
  struct Case {
    const char* name;
    std::string categories, intents, want;
  };
  const Case cases[] = {
      {"unknown category", kCategories,
       "  - {id: street_light, category: lights, line: city, dept: city_mgmt}\n",
       "intent 'street_light' has unknown category 'lights'"},
      {"missing category", kCategories, "  - {id: street_light, line: city, dept: city_mgmt}\n",
       "intent 'street_light' has no category"},
      {"category without categories", "",
       "  - {id: street_light, category: city_management, line: city, dept: city_mgmt}\n",
       "but the file has no categories"},
      {"unknown co-handling department", kCategories,
       "  - {id: street_light, category: city_management, line: city, dept: city_mgmt, "
       "co_depts: [power, police]}\n",
       "intent 'street_light' has unknown co-handling department 'police'"},
      {"lead among co-handling", kCategories,
       "  - {id: street_light, category: city_management, line: city, dept: city_mgmt, "
       "co_depts: [city_mgmt]}\n",
       "lists its lead department 'city_mgmt' among co_depts"},
      {"categories not a map", "categories: [city_management]\n",
       "  - {id: street_light, line: city, dept: city_mgmt}\n", "categories must be a map"},
  };
  for (const auto& c : cases) {
    try {
      Taxonomy::Load(Write("bad", c.categories, c.intents));
      ADD_FAILURE() << c.name << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.want), std::string::npos) << c.name << ": " << e.what();
    }
  }
}

}  // namespace
}  // namespace hotline::nlu
