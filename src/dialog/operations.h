// The supervisors' view of the work orders (the web console, its API and metrics):
//   hotspots   many orders of one problem in one street (or district) within a time window, e.g.
//              10 停水 orders in one street within 2 hours: a likely mains failure, not 10 taps;
//   duplicates open orders of one problem at one street and house number that the dialog did not
//              merge itself (its place keys differ in wording): candidates for 并单 by a person;
//   SLA        a handling deadline per intent or category, and each order's state against it;
//   trends     orders per hour or day, by category or intent.
// All are pure functions of a list of orders and `now`, so any server on a shared store computes
// the same view; config/operations.yaml configures them (OperationsConfig::Load).
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "dialog/dialog.h"
#include "nlu/taxonomy.h"

namespace hotline::dialog {

struct HotspotRule {
  std::string name;                   // metric label and alert text: [a-z0-9_]+
  std::string scope = "street";       // street (district + street) | district
  std::string group = "intent";       // orders alike: same intent | same taxonomy category
  int min_orders = 10;                // at least this many ...
  std::chrono::seconds window{7200};  // ... created within this window ending now
};

struct SlaConfig {
  double default_hours = 72;
  std::map<std::string, double> category_hours;  // taxonomy category id -> hours
  std::map<std::string, double> intent_hours;    // intent id -> hours (before the category's)
  double due_soon_fraction = 0.2;                // due_soon: less than this share of time left
};

struct OperationsConfig {
  std::vector<HotspotRule> hotspots = {HotspotRule{"street_2h"}};
  SlaConfig sla;
  int duplicate_window_h = 72;  // duplicate candidates: orders created within this of each other
  double refresh_s = 1.0;       // how often a server recomputes hotspots from the store
  // Throws hotline::Error naming the file and the key; intents and categories must be the
  // taxonomy's.
  static OperationsConfig Load(const std::string& path, const nlu::Taxonomy& taxonomy);
};

// Where an order is: its district slot (or a leading "...区/县/市" of the address) and the street
// of its address (the first name ending in 路, 街, 大道, 巷, 胡同, 弄, 道 ...), plus the house
// number that follows it ("12" of "荷光路南一巷12号"). Empty parts when unknown.
struct OrderPlace {
  std::string district, street, number;
};
OrderPlace PlaceOf(const WorkOrder& order);
OrderPlace ParseAddress(std::string_view address);

// RFC 3339 UTC ("2026-12-01T10:00:00Z", fractions and offsets accepted); false when malformed.
bool ParseRfc3339(std::string_view text, std::chrono::system_clock::time_point* out);

struct Hotspot {
  std::string rule;                    // HotspotRule::name
  std::string key;                     // stable id: rule|group|district|street
  std::string group;                   // the intent or category id
  std::string group_name;              // its Chinese name from the taxonomy
  std::string district, street;        // street "" for a district-scope rule
  int count = 0;                       // orders within the window
  std::string first_at, last_at;       // RFC 3339 of the oldest and newest in the window
  std::vector<std::string> order_ids;  // newest first
};
// Active hotspots at `now`, most orders first. Orders without a place at the rule's scope
// (no street, or no district) never count.
std::vector<Hotspot> FindHotspots(const std::vector<WorkOrder>& orders,
                                  const std::vector<HotspotRule>& rules,
                                  const nlu::Taxonomy& taxonomy,
                                  std::chrono::system_clock::time_point now);

struct DuplicateGroup {
  std::string intent, district, street, number;
  std::vector<std::string> order_ids;  // oldest first: the first is the one to merge into
};
// Open or in-progress orders of one intent at one district, street and house number, created
// within `window_h` of the group's oldest; groups of two or more.
std::vector<DuplicateGroup> FindDuplicateCandidates(const std::vector<WorkOrder>& orders,
                                                    int window_h);

struct SlaStatus {
  double hours = 0;      // the deadline's length
  std::string deadline;  // RFC 3339 UTC
  // on_time | due_soon | overdue (still open); met | missed (resolved or closed: by its note)
  std::string state;
  double seconds_left = 0;  // negative when overdue; at resolution for met/missed
};
double SlaHours(const WorkOrder& order, const SlaConfig& sla, const nlu::Taxonomy& taxonomy);
// Throws hotline::Error(kDataLoss) when created_at is not RFC 3339.
SlaStatus EvaluateSla(const WorkOrder& order, const SlaConfig& sla, const nlu::Taxonomy& taxonomy,
                      std::chrono::system_clock::time_point now);

struct Trend {
  std::string bucket;               // hour | day (Asia/Shanghai)
  std::vector<std::string> starts;  // each bucket's start, RFC 3339 UTC, oldest first
  std::map<std::string, std::vector<int>> series;  // category or intent id -> count per bucket
};
// Orders per bucket over the last `buckets` hours or days (the current one included).
// Throws hotline::Error(kInvalidArgument) for a bucket other than hour/day or a `by` other than
// category/intent.
Trend ComputeTrend(const std::vector<WorkOrder>& orders, const std::string& bucket, int buckets,
                   const std::string& by, const nlu::Taxonomy& taxonomy,
                   std::chrono::system_clock::time_point now);

}  // namespace hotline::dialog
