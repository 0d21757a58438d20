#include "nlu/json_io.h"

#include <cstdio>

namespace hotline::nlu {

nlohmann::json ToJson(const Understanding& u) {
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
