#include "nlu/json_io.h"

#include <cstdio>

namespace hotline::nlu {

namespace {

// A classifier's answer: per head its label and score, the first head's top_k as "top_k" and
// the other heads' as "<head>_top_k".
nlohmann::json HeadsJson(const Understanding& u) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t h = 0; h < u.heads.size(); ++h) {
    const HeadResult& r = u.heads[h];
    j[r.head] = r.label;
    j[r.head + "_score"] = r.score;
    nlohmann::json top = nlohmann::json::array();
    for (const LabelScore& t : r.top_k) top.push_back({{r.head, t.label}, {"score", t.score}});
    j[h == 0 ? std::string("top_k") : r.head + "_top_k"] = std::move(top);
  }
  j["truncated"] = u.truncated;
  j["num_tokens"] = u.num_tokens;
  return j;
}

}  // namespace

nlohmann::json ToJson(const Understanding& u) {
  if (!u.heads.empty()) return HeadsJson(u);
  nlohmann::json slots = nlohmann::json::array();
  for (const Slot& s : u.slots) {
    slots.push_back({{"type", s.type},
                     {"start", s.start},
                     {"end", s.end},
                     {"value", s.value},
                     {"normalized", s.normalized},
                     {"valid", s.valid}});
  }
  nlohmann::json top = nlohmann::json::array();
  for (const IntentScore& t : u.top_k)
    top.push_back({{"intent", t.intent}, {"probability", t.probability}});
  return {{"intent", u.intent},
          {"confidence", u.confidence},
          {"department", u.department},
          {"business_line", u.business_line},
          {"category", u.category},
          {"category_name", u.category_name},
          {"slots", std::move(slots)},
          {"top_k", std::move(top)},
          {"truncated", u.truncated},
          {"num_tokens", u.num_tokens}};
}

std::optional<std::chrono::system_clock::time_point> ParseIsoTime(const std::string& s) {
  int y, mo, d, h, mi, sec, n = 0;
  char sep;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2d%c%2d:%2d:%2d%n", &y, &mo, &d, &sep, &h, &mi, &sec, &n) !=
          7 ||
      (sep != 'T' && sep != ' '))
    return std::nullopt;
  std::string rest = s.substr(n);
  if (!rest.empty() && rest[0] == '.') {  // fractional seconds: ignored
    size_t k = 1;
    while (k < rest.size() && rest[k] >= '0' && rest[k] <= '9') ++k;
    rest = rest.substr(k);
  }
  int offset = 8 * 3600;
  if (rest == "Z") {
    offset = 0;
  } else if (rest.size() == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':') {
    int oh, om;
    if (std::sscanf(rest.c_str() + 1, "%2d:%2d", &oh, &om) != 2) return std::nullopt;
    offset = (rest[0] == '+' ? 1 : -1) * (oh * 3600 + om * 60);
  } else if (!rest.empty()) {
    return std::nullopt;
  }
  using namespace std::chrono;
  const year_month_day ymd{year(y), month(unsigned(mo)), day(unsigned(d))};
  if (!ymd.ok() || h > 23 || mi > 59 || sec > 60) return std::nullopt;
  return system_clock::time_point(sys_days(ymd).time_since_epoch() + hours(h) + minutes(mi) +
                                  seconds(sec) - seconds(offset));
}

}  // namespace hotline::nlu
