#include "dialog/operations.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <set>

#include "base/error.h"
#include "dialog/work_order_store.h"

namespace hotline::dialog {
namespace {

using Clock = std::chrono::system_clock;
constexpr int kShanghaiOffset = 8 * 3600;  // Asia/Shanghai: UTC+8 all year

// UTF-8 to code points (invalid bytes become U+FFFD) and back: the address is split on
// characters, never inside one.
std::u32string Decode(std::string_view s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + size_t(n) > s.size()) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    char32_t cp = n == 1 ? c : c & (0x7F >> n);
    bool ok = true;
    for (int k = 1; k < n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + size_t(k)]);
      if ((d >> 6) != 2) ok = false;
      cp = (cp << 6) | (d & 0x3F);
    }
    out.push_back(ok ? cp : 0xFFFD);
    i += ok ? size_t(n) : 1;
  }
  return out;
}

std::string Encode(std::u32string_view s) {
  std::string out;
  for (char32_t c : s) {
    if (c < 0x80) {
      out.push_back(char(c));
    } else if (c < 0x800) {
      out.push_back(char(0xC0 | (c >> 6)));
      out.push_back(char(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
      out.push_back(char(0xE0 | (c >> 12)));
      out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(char(0x80 | (c & 0x3F)));
    } else {
      out.push_back(char(0xF0 | (c >> 18)));
      out.push_back(char(0x80 | ((c >> 12) & 0x3F)));
      out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(char(0x80 | (c & 0x3F)));
    }
  }
  return out;
}

bool IsDigit(char32_t c) { return (c >= U'0' && c <= U'9') || (c >= U'０' && c <= U'９'); }
char DigitChar(char32_t c) { return c <= U'9' ? char(c) : char('0' + (c - U'０')); }

// Spaces and punctuation carry no place: dropped before parsing.
std::u32string Compact(std::string_view text) {
  std::u32string out;
  for (char32_t c : Decode(text)) {
    const bool drop = c == U' ' || c == U'\t' || c == U'\n' || c == U'　' || c == U',' ||
                      c == U'，' || c == U'。' || c == U'.' || c == U'、' || c == U'-' ||
                      c == U'－' || c == U'#' || c == U'＃';
    if (!drop) out.push_back(c);
  }
  return out;
}

bool EndsWith(const std::u32string& s, size_t end, std::u32string_view suffix) {
  return end >= suffix.size() && s.compare(end - suffix.size(), suffix.size(), suffix) == 0;
}

std::string SlotValue(const WorkOrder& o, const char* type) {
  for (const SlotFill& f : o.slots) {
    if (f.type == type) return f.normalized.empty() ? f.value : f.normalized;
  }
  return "";
}

std::string CategoryOf(const std::string& intent, const nlu::Taxonomy& taxonomy) {
  const nlu::IntentInfo* info = taxonomy.FindIntent(intent);
  return info ? info->category : "";
}

Clock::time_point CreatedAt(const WorkOrder& o) {
  Clock::time_point t;
  if (!ParseRfc3339(o.created_at, &t)) {
    throw Error("work order " + o.id + " has a created_at that is not RFC 3339", Code::kDataLoss);
  }
  return t;
}

bool IsOpen(const std::string& status) { return status == "open" || status == "in_progress"; }

template <typename T>
T Get(const YAML::Node& node, const char* key, T fallback, const std::string& where) {
  const YAML::Node v = node[key];
  if (!v) return fallback;
  try {
    return v.as<T>();
  } catch (const YAML::Exception&) {
    throw Error(where + ": '" + key + "' has a value of the wrong type");
  }
}

void CheckKeys(const YAML::Node& node, std::initializer_list<const char*> keys,
               const std::string& where) {
  if (!node.IsMap()) throw Error(where + " must be a mapping");
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    if (std::none_of(keys.begin(), keys.end(), [&](const char* k) { return key == k; })) {
      std::string list;
      for (const char* k : keys) list += (list.empty() ? "" : ", ") + std::string(k);
      throw Error(where + ": unknown key '" + key + "' (expected " + list + ")");
    }
  }
}

double PositiveHours(const YAML::Node& v, const std::string& where) {
  double h = 0;
  try {
    h = v.as<double>();
  } catch (const YAML::Exception&) {
    throw Error(where + " must be a number of hours");
  }
  if (!(h > 0) || h > 24 * 365) throw Error(where + " must be more than 0 and at most 8760 hours");
  return h;
}

}  // namespace

OperationsConfig OperationsConfig::Load(const std::string& path, const nlu::Taxonomy& taxonomy) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw Error("cannot read the operations config " + path, Code::kNotFound);
  } catch (const YAML::Exception& e) {
    throw Error(path + ": not valid YAML: " + e.what());
  }
  OperationsConfig c;
  if (root.IsNull()) return c;
  CheckKeys(root, {"hotspots", "duplicates", "sla", "refresh_s"}, path);
  c.refresh_s = Get(root, "refresh_s", c.refresh_s, path);
  if (!(c.refresh_s >= 0.1 && c.refresh_s <= 60)) throw Error(path + ": refresh_s must be 0.1..60");
  if (const YAML::Node h = root["hotspots"]) {
    if (!h.IsSequence()) throw Error(path + ": hotspots must be a list of rules");
    c.hotspots.clear();
    std::set<std::string> names;
    for (size_t i = 0; i < h.size(); ++i) {
      const std::string at = path + ": hotspots[" + std::to_string(i) + "]";
      CheckKeys(h[i], {"name", "scope", "group", "min_orders", "window_minutes"}, at);
      HotspotRule r;
      r.name = Get<std::string>(h[i], "name", "", at);
      const bool name_ok =
          !r.name.empty() && r.name.size() <= 64 &&
          std::all_of(r.name.begin(), r.name.end(), [](char ch) {
            return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_';
          });
      if (!name_ok) throw Error(at + ": name must be 1..64 characters of a-z 0-9 _");
      if (!names.insert(r.name).second) throw Error(at + ": the name " + r.name + " repeats");
      r.scope = Get<std::string>(h[i], "scope", r.scope, at);
      if (r.scope != "street" && r.scope != "district") {
        throw Error(at + ": scope must be street or district; got '" + r.scope + "'");
      }
      r.group = Get<std::string>(h[i], "group", r.group, at);
      if (r.group != "intent" && r.group != "category") {
        throw Error(at + ": group must be intent or category; got '" + r.group + "'");
      }
      r.min_orders = Get(h[i], "min_orders", r.min_orders, at);
      if (r.min_orders < 2 || r.min_orders > 100000)
        throw Error(at + ": min_orders must be 2..100000");
      const double minutes = Get(h[i], "window_minutes", 120.0, at);
      if (!(minutes >= 1 && minutes <= 7 * 24 * 60)) {
        throw Error(at + ": window_minutes must be 1..10080 (a week)");
      }
      r.window = std::chrono::seconds(int64_t(minutes * 60));
      c.hotspots.push_back(r);
    }
  }
  if (const YAML::Node d = root["duplicates"]) {
    CheckKeys(d, {"window_hours"}, path + ": duplicates");
    c.duplicate_window_h = Get(d, "window_hours", c.duplicate_window_h, path + ": duplicates");
    if (c.duplicate_window_h < 1 || c.duplicate_window_h > 24 * 90) {
      throw Error(path + ": duplicates.window_hours must be 1..2160");
    }
  }
  if (const YAML::Node s = root["sla"]) {
    const std::string at = path + ": sla";
    CheckKeys(s, {"default_hours", "due_soon_fraction", "categories", "intents"}, at);
    if (s["default_hours"])
      c.sla.default_hours = PositiveHours(s["default_hours"], at + ".default_hours");
    c.sla.due_soon_fraction = Get(s, "due_soon_fraction", c.sla.due_soon_fraction, at);
    if (!(c.sla.due_soon_fraction >= 0 && c.sla.due_soon_fraction < 1)) {
      throw Error(at + ".due_soon_fraction must be in [0, 1)");
    }
    if (const YAML::Node cats = s["categories"]) {
      if (!cats.IsMap()) throw Error(at + ".categories must be a mapping of category: hours");
      for (const auto& kv : cats) {
        const std::string id = kv.first.as<std::string>();
        if (!taxonomy.categories.count(id)) {
          throw Error(at + ".categories: '" + id + "' is not a category of the taxonomy");
        }
        c.sla.category_hours[id] = PositiveHours(kv.second, at + ".categories." + id);
      }
    }
    if (const YAML::Node intents = s["intents"]) {
      if (!intents.IsMap()) throw Error(at + ".intents must be a mapping of intent: hours");
      for (const auto& kv : intents) {
        const std::string id = kv.first.as<std::string>();
        if (!taxonomy.FindIntent(id)) {
          throw Error(at + ".intents: '" + id + "' is not an intent of the taxonomy");
        }
        c.sla.intent_hours[id] = PositiveHours(kv.second, at + ".intents." + id);
      }
    }
  }
  return c;
}

bool ParseRfc3339(std::string_view s, Clock::time_point* out) {
  // YYYY-MM-DDTHH:MM:SS[.fff](Z|+HH:MM|-HH:MM)
  auto num = [&](size_t at, size_t n, int* v) {
    if (at + n > s.size()) return false;
    int x = 0;
    for (size_t i = at; i < at + n; ++i) {
      if (s[i] < '0' || s[i] > '9') return false;
      x = x * 10 + (s[i] - '0');
    }
    *v = x;
    return true;
  };
  int y, mo, d, h, mi, se;
  if (!num(0, 4, &y) || s.size() < 20 || s[4] != '-' || !num(5, 2, &mo) || s[7] != '-' ||
      !num(8, 2, &d) || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') || !num(11, 2, &h) ||
      s[13] != ':' || !num(14, 2, &mi) || s[16] != ':' || !num(17, 2, &se)) {
    return false;
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60) return false;
  size_t i = 19;
  double frac = 0;
  if (i < s.size() && s[i] == '.') {
    double scale = 0.1;
    size_t j = i + 1;
    for (; j < s.size() && s[j] >= '0' && s[j] <= '9'; ++j, scale /= 10)
      frac += (s[j] - '0') * scale;
    if (j == i + 1) return false;
    i = j;
  }
  int offset = 0;
  if (i < s.size() && (s[i] == 'Z' || s[i] == 'z') && i + 1 == s.size()) {
    offset = 0;
  } else if (i + 6 == s.size() && (s[i] == '+' || s[i] == '-') && s[i + 3] == ':') {
    int oh, om;
    if (!num(i + 1, 2, &oh) || !num(i + 4, 2, &om) || oh > 23 || om > 59) return false;
    offset = (s[i] == '+' ? 1 : -1) * (oh * 3600 + om * 60);
  } else {
    return false;
  }
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = se;
  const std::time_t t = timegm(&tm) - offset;
  *out = Clock::from_time_t(t) +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(frac));
  return true;
}

OrderPlace ParseAddress(std::string_view address) {
  OrderPlace p;
  std::u32string s = Compact(address);
  // A leading province and city are no part of the place; a district (区/县, not 小区/社区/园区)
  // within the first few characters is.
  for (const char32_t mark : {U'省', U'市'}) {
    const size_t at = s.find(mark);
    if (at != std::u32string::npos && at >= 1 && at <= 6 && at + 1 < s.size()) s = s.substr(at + 1);
  }
  for (size_t i = 1; i < s.size() && i <= 6; ++i) {
    if ((s[i] == U'区' || s[i] == U'县') && s[i - 1] != U'小' && s[i - 1] != U'社' &&
        s[i - 1] != U'园' && s[i - 1] != U'景') {
      p.district = Encode(s.substr(0, i + 1));
      s = s.substr(i + 1);
      break;
    }
  }
  // The street: the first name ending in a street word, at least two characters long.
  static const std::u32string_view kSuffixes[] = {U"街道", U"大道", U"大街", U"胡同", U"路",
                                                  U"街",   U"巷",   U"弄",   U"道"};
  size_t street_end = 0;
  for (size_t end = 2; end <= s.size() && street_end == 0; ++end) {
    for (std::u32string_view suf : kSuffixes) {
      // The longer word wins where both end here (大道 over 道); 道 needs two before it.
      const size_t before = suf == U"道" ? 2 : 1;
      if (EndsWith(s, end, suf) && end >= suf.size() + before &&
          !IsDigit(s[end - suf.size() - 1])) {
        street_end = end;
        if (suf == U"街" && end < s.size() && s[end] == U'道') ++street_end;  // 石牌街道
        break;
      }
    }
  }
  if (street_end > 0) {
    p.street = Encode(s.substr(0, street_end));
    size_t i = street_end;
    while (i < s.size() && !IsDigit(s[i])) ++i;
    for (; i < s.size() && IsDigit(s[i]); ++i) p.number.push_back(DigitChar(s[i]));
  }
  return p;
}

OrderPlace PlaceOf(const WorkOrder& order) {
  OrderPlace p = ParseAddress(SlotValue(order, "address"));
  const std::u32string district = Compact(SlotValue(order, "district"));
  if (!district.empty()) p.district = Encode(district);
  return p;
}

std::vector<Hotspot> FindHotspots(const std::vector<WorkOrder>& orders,
                                  const std::vector<HotspotRule>& rules,
                                  const nlu::Taxonomy& taxonomy, Clock::time_point now) {
  std::vector<Hotspot> out;
  for (const HotspotRule& rule : rules) {
    std::map<std::string, Hotspot> groups;
    std::map<std::string, std::pair<Clock::time_point, Clock::time_point>> spans;
    for (const WorkOrder& o : orders) {
      const Clock::time_point t = CreatedAt(o);
      // Within the window ending now; a minute ahead allowed for another server's clock.
      if (t <= now - rule.window || t > now + std::chrono::minutes(1)) continue;
      const OrderPlace place = PlaceOf(o);
      if (rule.scope == "street" ? place.street.empty() : place.district.empty()) continue;
      const std::string group = rule.group == "intent" ? o.intent : CategoryOf(o.intent, taxonomy);
      if (group.empty()) continue;
      const std::string street = rule.scope == "street" ? place.street : "";
      const std::string key = rule.name + "|" + group + "|" + place.district + "|" + street;
      Hotspot& h = groups[key];
      auto [span, fresh] = spans.try_emplace(key, t, t);
      if (fresh) {
        h.rule = rule.name;
        h.key = key;
        h.group = group;
        if (rule.group == "intent") {
          const nlu::IntentInfo* info = taxonomy.FindIntent(group);
          h.group_name = info ? info->zh : group;
        } else {
          h.group_name = taxonomy.CategoryName(group);
        }
        h.district = place.district;
        h.street = street;
      }
      span->second.first = std::min(span->second.first, t);
      span->second.second = std::max(span->second.second, t);
      ++h.count;
      h.order_ids.push_back(o.id);
    }
    for (auto& [key, h] : groups) {
      if (h.count < rule.min_orders) continue;
      h.first_at = FormatRfc3339Utc(spans[key].first);
      h.last_at = FormatRfc3339Utc(spans[key].second);
      out.push_back(std::move(h));
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Hotspot& a, const Hotspot& b) { return a.count > b.count; });
  // Newest first within each, whatever order the store listed them in.
  std::map<std::string, std::string> created;
  for (const WorkOrder& o : orders) created[o.id] = o.created_at;
  for (Hotspot& h : out) {
    std::stable_sort(h.order_ids.begin(), h.order_ids.end(),
                     [&](const auto& a, const auto& b) { return created[a] > created[b]; });
  }
  return out;
}

std::vector<DuplicateGroup> FindDuplicateCandidates(const std::vector<WorkOrder>& orders,
                                                    int window_h) {
  struct Item {
    Clock::time_point t;
    std::string id;
  };
  std::map<std::vector<std::string>, std::vector<Item>> by_place;
  for (const WorkOrder& o : orders) {
    if (!IsOpen(o.status)) continue;
    const OrderPlace p = PlaceOf(o);
    if (p.street.empty() || p.number.empty()) continue;
    by_place[{o.intent, p.district, p.street, p.number}].push_back({CreatedAt(o), o.id});
  }
  std::vector<DuplicateGroup> out;
  for (auto& [key, items] : by_place) {
    std::sort(items.begin(), items.end(),
              [](const Item& a, const Item& b) { return a.t != b.t ? a.t < b.t : a.id < b.id; });
    for (size_t i = 0; i < items.size();) {
      size_t j = i + 1;
      while (j < items.size() && items[j].t - items[i].t <= std::chrono::hours(window_h)) ++j;
      if (j - i >= 2) {
        DuplicateGroup g{key[0], key[1], key[2], key[3], {}};
        for (size_t k = i; k < j; ++k) g.order_ids.push_back(items[k].id);
        out.push_back(std::move(g));
      }
      i = j;
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const DuplicateGroup& a, const DuplicateGroup& b) {
    return a.order_ids.size() > b.order_ids.size();
  });
  return out;
}

double SlaHours(const WorkOrder& order, const SlaConfig& sla, const nlu::Taxonomy& taxonomy) {
  if (auto it = sla.intent_hours.find(order.intent); it != sla.intent_hours.end()) {
    return it->second;
  }
  const std::string category = CategoryOf(order.intent, taxonomy);
  if (auto it = sla.category_hours.find(category); it != sla.category_hours.end()) {
    return it->second;
  }
  return sla.default_hours;
}

SlaStatus EvaluateSla(const WorkOrder& order, const SlaConfig& sla, const nlu::Taxonomy& taxonomy,
                      Clock::time_point now) {
  SlaStatus s;
  s.hours = SlaHours(order, sla, taxonomy);
  const Clock::time_point deadline =
      CreatedAt(order) +
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s.hours * 3600));
  s.deadline = FormatRfc3339Utc(deadline);
  if (!IsOpen(order.status)) {
    // Finished when the note that set the final status was written.
    Clock::time_point done = now;
    for (const OrderNote& n : order.notes) {
      Clock::time_point at;
      if (n.status == order.status && ParseRfc3339(n.at, &at)) done = at;
    }
    s.seconds_left = std::chrono::duration<double>(deadline - done).count();
    s.state = s.seconds_left >= 0 ? "met" : "missed";
    return s;
  }
  s.seconds_left = std::chrono::duration<double>(deadline - now).count();
  if (s.seconds_left < 0) {
    s.state = "overdue";
  } else if (s.seconds_left < sla.due_soon_fraction * s.hours * 3600) {
    s.state = "due_soon";
  } else {
    s.state = "on_time";
  }
  return s;
}

Trend ComputeTrend(const std::vector<WorkOrder>& orders, const std::string& bucket, int buckets,
                   const std::string& by, const nlu::Taxonomy& taxonomy, Clock::time_point now) {
  if (bucket != "hour" && bucket != "day") {
    throw Error("bucket must be hour or day; got '" + bucket.substr(0, 32) + "'",
                Code::kInvalidArgument);
  }
  if (by != "category" && by != "intent") {
    throw Error("by must be category or intent; got '" + by.substr(0, 32) + "'",
                Code::kInvalidArgument);
  }
  if (buckets < 1 || buckets > 1000) {
    throw Error("buckets must be 1..1000; got " + std::to_string(buckets), Code::kInvalidArgument);
  }
  const int64_t size = bucket == "hour" ? 3600 : 86400;
  const int64_t secs =
      std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  // Bucket edges fall on Shanghai's hours and midnights.
  const int64_t current = ((secs + kShanghaiOffset) / size) * size - kShanghaiOffset;
  const int64_t first = current - int64_t(buckets - 1) * size;
  Trend t;
  t.bucket = bucket;
  for (int i = 0; i < buckets; ++i) {
    t.starts.push_back(FormatRfc3339Utc(Clock::from_time_t(std::time_t(first + i * size))));
  }
  for (const WorkOrder& o : orders) {
    const int64_t at =
        std::chrono::duration_cast<std::chrono::seconds>(CreatedAt(o).time_since_epoch()).count();
    if (at < first || at >= current + size) continue;
    std::string key = by == "intent" ? o.intent : CategoryOf(o.intent, taxonomy);
    if (key.empty()) key = "unknown";
    std::vector<int>& series = t.series[key];
    if (series.empty()) series.assign(size_t(buckets), 0);
    ++series[size_t((at - first) / size)];
  }
  return t;
}

}  // namespace hotline::dialog
