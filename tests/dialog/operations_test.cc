// The supervisors' view (dialog/operations.h): address parsing, hotspots, duplicate candidates,
// SLA states and trends, on hand-made orders with hand-worked expectations; then hotspots over
// orders stored in and listed back from a real SQLite work-order store.
#include "dialog/operations.h"

#include <gtest/gtest.h>

#include <fstream>

#include "base/error.h"
#include "dialog/work_order_store.h"
#include "test_util.h"

namespace hotline::dialog {
namespace {

using std::chrono::hours;
using std::chrono::minutes;
using testing::Dec1;  // 2026-12-01T02:00:00Z, 10:00 in Shanghai

WorkOrder Order(const std::string& id, const std::string& intent, const std::string& district,
                const std::string& address, std::chrono::system_clock::time_point at,
                const std::string& status = "open") {
  WorkOrder o;
  o.id = id;
  o.intent = intent;
  o.status = status;
  o.created_at = FormatRfc3339Utc(at);
  if (!district.empty()) o.slots.push_back({"district", district, ""});
  o.slots.push_back({"address", address, ""});
  return o;
}

TEST(OperationsTest, AddressesSplitIntoDistrictStreetAndNumber) {
  struct Case {
    const char* address;
    const char* district;
    const char* street;
    const char* number;
  } cases[] = {
      {"天河区荷光路南一巷12号", "天河区", "荷光路", "12"},
      {"广州市天河区 荷光路 14号", "天河区", "荷光路", "14"},
      {"建国路88号华贸小区3号楼", "", "建国路", "88"},
      {"朝阳区华贸小区3号楼", "朝阳区", "", ""},                  // no street word: no street
      {"海珠区江南大道中１２０号", "海珠区", "江南大道", "120"},  // full-width digits
      {"石牌街道华师社区", "", "石牌街道", ""},
      {"望京小区5号", "", "", ""},  // 小区 is no district
      {"", "", "", ""},
  };
  for (const Case& c : cases) {
    const OrderPlace p = ParseAddress(c.address);
    EXPECT_EQ(p.district, c.district) << c.address;
    EXPECT_EQ(p.street, c.street) << c.address;
    EXPECT_EQ(p.number, c.number) << c.address;
  }
  // The district slot, when said, wins over the address's.
  const WorkOrder o = Order("a", "water_outage", "越秀区", "天河区荷光路1号", Dec1());
  EXPECT_EQ(PlaceOf(o).district, "越秀区");
  // Invalid UTF-8 is survived: each bad byte becomes U+FFFD.
  EXPECT_EQ(ParseAddress("\xff\xfe路").street, "\xEF\xBF\xBD\xEF\xBF\xBD路");
}

TEST(OperationsTest, Rfc3339ParsesWhatTheStoreWritesAndRefusesTheRest) {
  std::chrono::system_clock::time_point t;
  ASSERT_TRUE(ParseRfc3339("2026-12-01T02:00:00Z", &t));
  EXPECT_EQ(t, Dec1());
  ASSERT_TRUE(ParseRfc3339("2026-12-01T10:00:00+08:00", &t));
  EXPECT_EQ(t, Dec1());
  ASSERT_TRUE(ParseRfc3339("2026-12-01T02:00:00.500Z", &t));
  EXPECT_EQ(t - Dec1(), std::chrono::milliseconds(500));
  for (const char* bad : {"", "2026-12-01", "2026-13-01T10:00:00Z", "2026-12-01T10:00:00",
                          "2026-12-01T10:00:00Zx", "yesterday"}) {
    EXPECT_FALSE(ParseRfc3339(bad, &t)) << bad;
  }
}

TEST(OperationsTest, TenOrdersInOneStreetWithinTwoHoursAreAHotspot) {
  const auto& tax = testing::TheTaxonomy();
  const std::vector<HotspotRule> rules = {HotspotRule{"street_2h"}};
  std::vector<WorkOrder> orders;
  // Nine 停水 reports on 荷光路 over 90 minutes (different houses, different wording).
  for (int i = 0; i < 9; ++i) {
    orders.push_back(
        Order("W" + std::to_string(i), "water_outage", i % 2 ? "天河区" : "",
              (i % 2 ? "" : "天河区") + std::string("荷光路") + std::to_string(2 * i) + "号",
              Dec1() + minutes(10 * i)));
  }
  // Around them: another street, another problem, and one too old for the window.
  orders.push_back(Order("X1", "water_outage", "天河区", "中山大道1号", Dec1()));
  orders.push_back(Order("X2", "power_outage", "天河区", "荷光路3号", Dec1()));
  orders.push_back(Order("X3", "water_outage", "天河区", "荷光路5号", Dec1() - hours(3)));
  const auto now = Dec1() + minutes(95);
  EXPECT_TRUE(FindHotspots(orders, rules, tax, now).empty());  // nine: not yet
  orders.push_back(Order("W9", "water_outage", "天河区", "荷光路99号", Dec1() + minutes(95)));
  auto found = FindHotspots(orders, rules, tax, now);
  ASSERT_EQ(found.size(), 1u);
  const Hotspot& h = found[0];
  EXPECT_EQ(h.count, 10);
  EXPECT_EQ(h.group, "water_outage");
  EXPECT_EQ(h.group_name, "停水与水质问题");
  EXPECT_EQ(h.district, "天河区");
  EXPECT_EQ(h.street, "荷光路");
  EXPECT_EQ(h.first_at, "2026-12-01T02:00:00Z");
  EXPECT_EQ(h.last_at, "2026-12-01T03:35:00Z");
  ASSERT_EQ(h.order_ids.size(), 10u);
  EXPECT_EQ(h.order_ids.front(), "W9");  // newest first
  EXPECT_EQ(h.order_ids.back(), "W0");
  // Two hours after the first, it has slid out of the window: nine left, no hotspot.
  EXPECT_TRUE(FindHotspots(orders, rules, tax, Dec1() + hours(2)).empty());
  // A district rule over categories sees the power outage too (公用事业: 11 within 2 h).
  HotspotRule district{"district_util", "district", "category", 11, hours(2)};
  found = FindHotspots(orders, {district}, tax, now);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].group, "public_utilities");
  EXPECT_EQ(found[0].street, "");
  EXPECT_EQ(found[0].count, 12);  // 10 on 荷光路 + 中山大道 + the power outage
}

TEST(OperationsTest, DuplicateCandidatesShareIntentStreetAndNumberWithinTheWindow) {
  std::vector<WorkOrder> orders = {
      Order("A", "water_outage", "天河区", "荷光路12号", Dec1()),
      Order("B", "water_outage", "", "天河区荷光路南一巷12号3楼", Dec1() + hours(5)),
      Order("C", "water_outage", "天河区", "荷光路12号", Dec1() + hours(100)),  // out of window
      Order("D", "water_outage", "天河区", "荷光路13号", Dec1()),               // other house
      Order("E", "power_outage", "天河区", "荷光路12号", Dec1()),               // other problem
      Order("F", "water_outage", "天河区", "荷光路12号", Dec1(), "resolved"),   // not open
  };
  auto groups = FindDuplicateCandidates(orders, 72);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].order_ids, (std::vector<std::string>{"A", "B"}));
  EXPECT_EQ(groups[0].street, "荷光路");
  EXPECT_EQ(groups[0].number, "12");
  // A window of 200 h takes C in too.
  groups = FindDuplicateCandidates(orders, 200);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].order_ids.size(), 3u);
}

TEST(OperationsTest, SlaDeadlinesPerIntentAndCategoryWithStates) {
  const auto& tax = testing::TheTaxonomy();
  SlaConfig sla;
  sla.default_hours = 72;
  sla.category_hours["public_utilities"] = 24;
  sla.intent_hours["water_outage"] = 12;
  sla.due_soon_fraction = 0.25;
  WorkOrder water = Order("A", "water_outage", "", "x路1号", Dec1());
  WorkOrder power = Order("B", "power_outage", "", "x路1号", Dec1());
  WorkOrder other = Order("C", "construction_noise", "", "x路1号", Dec1());
  ASSERT_NE(tax.FindIntent("power_outage"), nullptr);
  EXPECT_EQ(SlaHours(water, sla, tax), 12);
  EXPECT_EQ(SlaHours(power, sla, tax), 24);
  EXPECT_EQ(SlaHours(other, sla, tax), 72);
  SlaStatus s = EvaluateSla(water, sla, tax, Dec1() + hours(1));
  EXPECT_EQ(s.state, "on_time");
  EXPECT_EQ(s.deadline, "2026-12-01T14:00:00Z");
  EXPECT_DOUBLE_EQ(s.seconds_left, 11 * 3600);
  EXPECT_EQ(EvaluateSla(water, sla, tax, Dec1() + hours(10)).state, "due_soon");  // 2 h < 3 h
  s = EvaluateSla(water, sla, tax, Dec1() + hours(13));
  EXPECT_EQ(s.state, "overdue");
  EXPECT_DOUBLE_EQ(s.seconds_left, -3600);
  // Resolved: judged at the note that resolved it, not now.
  water.status = "resolved";
  water.notes.push_back({"2026-12-01T12:00:00Z", "ops", "修好了", "resolved"});
  s = EvaluateSla(water, sla, tax, Dec1() + hours(100));
  EXPECT_EQ(s.state, "met");
  EXPECT_DOUBLE_EQ(s.seconds_left, 2 * 3600);
  water.notes.back().at = "2026-12-01T16:00:00Z";
  EXPECT_EQ(EvaluateSla(water, sla, tax, Dec1() + hours(100)).state, "missed");
  WorkOrder broken = water;
  broken.created_at = "not a time";
  EXPECT_THROW(EvaluateSla(broken, sla, tax, Dec1()), Error);
}

TEST(OperationsTest, TrendsCountPerShanghaiHourAndDay) {
  const auto& tax = testing::TheTaxonomy();
  // 15:59Z is 23:59 in Shanghai, 16:00Z already the next day there.
  const auto at = [](int h, int m) { return Dec1() + hours(h - 2) + minutes(m); };  // UTC h:m
  std::vector<WorkOrder> orders = {
      Order("A", "water_outage", "", "", at(10, 5)),
      Order("B", "water_outage", "", "", at(11, 5)),
      Order("C", "power_outage", "", "", at(11, 10)),
      Order("D", "water_outage", "", "", at(15, 59)),
      Order("E", "water_outage", "", "", at(16, 0)),
      Order("F", "water_outage", "", "", at(9, 59)),  // before the first hour bucket
  };
  const auto now = at(16, 30);  // 2026-12-02 00:30 Shanghai
  Trend t = ComputeTrend(orders, "hour", 7, "intent", tax, now);
  ASSERT_EQ(t.starts.size(), 7u);
  EXPECT_EQ(t.starts.front(), "2026-12-01T10:00:00Z");
  EXPECT_EQ(t.starts.back(), "2026-12-01T16:00:00Z");
  EXPECT_EQ(t.series["water_outage"], (std::vector<int>{1, 1, 0, 0, 0, 1, 1}));
  EXPECT_EQ(t.series["power_outage"], (std::vector<int>{0, 1, 0, 0, 0, 0, 0}));
  t = ComputeTrend(orders, "day", 2, "category", tax, now);
  EXPECT_EQ(t.starts.front(), "2026-11-30T16:00:00Z");  // Shanghai's midnight of Dec 1
  EXPECT_EQ(t.series["public_utilities"], (std::vector<int>{5, 1}));  // F counts on the day
  EXPECT_THROW(ComputeTrend(orders, "week", 2, "intent", tax, now), Error);
  EXPECT_THROW(ComputeTrend(orders, "day", 2, "department", tax, now), Error);
  EXPECT_THROW(ComputeTrend(orders, "day", 0, "intent", tax, now), Error);
}

TEST(OperationsTest, ConfigLoadsAndNamesWhatIsWrong) {
  const auto& tax = testing::TheTaxonomy();
  const OperationsConfig shipped =
      OperationsConfig::Load(testing::SourcePath("config/operations.yaml"), tax);
  ASSERT_FALSE(shipped.hotspots.empty());
  EXPECT_EQ(shipped.hotspots[0].min_orders, 10);
  EXPECT_EQ(shipped.hotspots[0].window, hours(2));
  const std::string dir = testing::TempDir("ops-config");
  auto load = [&](const std::string& text) {
    std::ofstream(dir + "/o.yaml") << text;
    return OperationsConfig::Load(dir + "/o.yaml", tax);
  };
  auto error_of = [&](const std::string& text) {
    try {
      load(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("sla: {categories: {nonsense: 3}}").find("not a category"), std::string::npos);
  EXPECT_NE(error_of("sla: {intents: {water_outage: -1}}").find("more than 0"), std::string::npos);
  EXPECT_NE(error_of("hotspots: [{name: A}]").find("a-z 0-9"), std::string::npos);
  EXPECT_NE(error_of("hotspots: [{name: a, scope: city}]").find("scope"), std::string::npos);
  EXPECT_NE(error_of("hotspots: [{name: a, min_orders: 1}]").find("min_orders"), std::string::npos);
  EXPECT_NE(error_of("colour: red").find("unknown key 'colour'"), std::string::npos);
  EXPECT_NE(error_of("refresh_s: fast").find("wrong type"), std::string::npos);
  const OperationsConfig c = load(
      "hotspots: [{name: d, scope: district, group: category, min_orders: 3, window_minutes: 30}]\n"
      "sla: {default_hours: 48, intents: {water_outage: 6}}\n");
  ASSERT_EQ(c.hotspots.size(), 1u);
  EXPECT_EQ(c.hotspots[0].window, minutes(30));
  EXPECT_EQ(c.sla.default_hours, 48);
  EXPECT_EQ(c.sla.intent_hours.at("water_outage"), 6);
}

TEST(OperationsTest, HotspotOverOrdersListedFromTheStore) {
  // The server lists the window's orders from the store and runs FindHotspots on them: the same
  // through SQLite's own created_at strings and slot encoding.
  const std::string path = testing::TempDir("ops-store") + "/orders.sqlite";
  auto store = WorkOrderStore::Open(path);
  for (int i = 0; i < 10; ++i) {
    WorkOrder o;
    o.call_id = "c" + std::to_string(i);
    o.intent = "water_outage";
    o.department = "water";
    o.slots = {{"address", "天河区荷光路" + std::to_string(i + 1) + "号", ""}};
    store->Create(o, Dec1() + minutes(11 * i));
  }
  OrderQuery q;
  q.created_from = FormatRfc3339Utc(Dec1() + minutes(99) - hours(2));
  q.limit = 500;
  const auto listed = store->List(q);
  ASSERT_EQ(listed.size(), 10u);
  const auto found = FindHotspots(listed, {HotspotRule{"street_2h"}}, testing::TheTaxonomy(),
                                  Dec1() + minutes(99));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].count, 10);
  EXPECT_EQ(found[0].order_ids.front(), listed.front().id);  // the newest
}

}  // namespace
}  // namespace hotline::dialog
