// Time expressions → ISO-8601 against the call's reference time in Asia/Shanghai (UTC+8).
//
// Resolution rules (documented contract, tested in tests/nlu/normalize/time_test.cc):
// - A day with a clock time gives a date-time; a day alone gives a date; a vague period of the day
//   without a clock (明早, 中午, 傍晚) gives a representative time with extra approx = true:
//   凌晨 03:00, 早上 08:00, 上午 10:00, 中午 12:00, 下午 15:00, 傍晚 18:00, 晚上 20:00, 半夜 23:00.
// - A clock time without a day is on the reference day (晚上十点 said at 09:00 is today 22:00).
// - 晚上/半夜 with 12 点 is midnight at the end of that day (next day 00:00); with 1-4 点 after a
//   stated day the early hours after that evening (昨天半夜两点 is today 02:00), without one the
//   reference day's early hours (半夜两点 is today 02:00). 凌晨12点 is 00:00 of that day.
// - Dates without a year or month are the most recent occurrence, allowing a little future:
//   a month and day (12月3号) up to 61 days after the reference day, a day alone (28号) up to 7
//   days after it, a month alone (11月) up to 2 months after the reference month. Callers mostly
//   report what happened; appointments are near.
// - Weeks start on Monday (ISO): 这周五 is Friday of the reference week, 上周一 Monday a week
//   earlier; 周五 alone means 这周五.
// - N天前/N个月前/N年前 give dates (months and years clamp the day to the month's end);
//   N小时前/N分钟前 give date-times. 上个月 gives "2026-10", 去年 "2025", 上周 "2026-W47".
#include <string>

#include "nlu/normalize/calendar.h"
#include "nlu/normalize/normalize.h"
#include "nlu/normalize/text_util.h"
#include "nlu/normalize/time_parse.h"

namespace hotline::nlu {
namespace {

using internal::CivilDate;
using internal::Invalid;
using internal::kMicros;
using internal::Numeral;
using internal::Span;
using internal::TimeCursor;

enum class Period {
  kNone,
  kEarlyMorning,
  kMorning,
  kForenoon,
  kNoon,
  kAfternoon,
  kDusk,
  kEvening,
  kLateNight
};

struct PeriodInfo {
  std::u32string_view word;
  Period period;
};
// Longest words first so 早上 wins over 早.
constexpr PeriodInfo kPeriods[] = {
    {U"凌晨", Period::kEarlyMorning}, {U"清晨", Period::kMorning},   {U"早晨", Period::kMorning},
    {U"早上", Period::kMorning},      {U"上午", Period::kForenoon},  {U"中午", Period::kNoon},
    {U"下午", Period::kAfternoon},    {U"傍晚", Period::kDusk},      {U"黄昏", Period::kDusk},
    {U"晚上", Period::kEvening},      {U"夜里", Period::kEvening},   {U"夜间", Period::kEvening},
    {U"夜晚", Period::kEvening},      {U"半夜", Period::kLateNight}, {U"深夜", Period::kLateNight},
    {U"早", Period::kMorning},        {U"晚", Period::kEvening},
};

const char* PeriodId(Period p) {
  switch (p) {
    case Period::kEarlyMorning:
      return "early_morning";
    case Period::kMorning:
      return "morning";
    case Period::kForenoon:
      return "forenoon";
    case Period::kNoon:
      return "noon";
    case Period::kAfternoon:
      return "afternoon";
    case Period::kDusk:
      return "dusk";
    case Period::kEvening:
      return "evening";
    case Period::kLateNight:
      return "late_night";
    case Period::kNone:
      break;
  }
  return "";
}

int RepresentativeHour(Period p) {
  switch (p) {
    case Period::kEarlyMorning:
      return 3;
    case Period::kMorning:
      return 8;
    case Period::kForenoon:
      return 10;
    case Period::kNoon:
      return 12;
    case Period::kAfternoon:
      return 15;
    case Period::kDusk:
      return 18;
    case Period::kEvening:
      return 20;
    case Period::kLateNight:
      return 23;
    case Period::kNone:
      break;
  }
  return 0;
}

// Hour of a clock said with a period, as hours from the start of that day (24 and more roll over).
int ApplyPeriod(Period p, int h, bool day_stated) {
  switch (p) {
    case Period::kEarlyMorning:
      return h == 12 ? 0 : h;
    case Period::kNoon:
      return (h >= 1 && h <= 5) ? h + 12 : h;
    case Period::kAfternoon:
    case Period::kDusk:
      return h < 12 ? h + 12 : h;
    case Period::kEvening:
      if (h >= 5 && h <= 11) return h + 12;
      if (h == 12) return 24;
      return (h <= 4 && day_stated) ? h + 24 : h;
    case Period::kLateNight:
      if (h >= 9 && h <= 11) return h + 12;
      if (h == 12) return 24;
      return (h <= 4 && day_stated) ? h + 24 : h;
    default:
      return h;
  }
}

struct DayWord {
  std::u32string_view word;
  int offset;
  Period period;
};
constexpr DayWord kDayWords[] = {
    {U"大前天", -3, Period::kNone},  {U"大后天", 3, Period::kNone},
    {U"前天", -2, Period::kNone},    {U"后天", 2, Period::kNone},
    {U"昨天", -1, Period::kNone},    {U"昨日", -1, Period::kNone},
    {U"昨儿", -1, Period::kNone},    {U"今天", 0, Period::kNone},
    {U"今日", 0, Period::kNone},     {U"今儿", 0, Period::kNone},
    {U"明天", 1, Period::kNone},     {U"明日", 1, Period::kNone},
    {U"明儿", 1, Period::kNone},     {U"昨晚", -1, Period::kEvening},
    {U"昨夜", -1, Period::kEvening}, {U"今早", 0, Period::kMorning},
    {U"今晨", 0, Period::kMorning},  {U"今晚", 0, Period::kEvening},
    {U"明早", 1, Period::kMorning},  {U"明晨", 1, Period::kMorning},
    {U"明晚", 1, Period::kEvening},
};

enum class Gran { kNone, kDay, kMonth, kYear, kWeek };

struct Point {
  Gran gran = Gran::kNone;
  int64_t day = 0;          // kDay, kWeek (any day of the week)
  int year = 0, month = 0;  // kMonth, kYear
  Period period = Period::kNone;
  int hour = -1, minute = 0, second = 0;
  bool approx = false;
};

class TimeParser {
 public:
  TimeParser(std::u32string_view s, int64_t ref_local_seconds)
      : c_(s), ref_seconds_(ref_local_seconds) {
    ref_day_ = ref_seconds_ / 86400;
    ref_ = internal::CivilFromDays(ref_day_);
  }

  Normalized Run(const std::string& raw);

 private:
  bool ParsePrefix(Point& p);
  bool ParseDate(Point& p);
  std::optional<int> EatRelativePrefix();
  bool ParseWeek(Point& p);
  bool ParseRelativeMonth(Point& p);
  bool ParseYearWord(Point& p);
  bool ParseAbsolute(Point& p);
  bool ParseMonthDay(Point& p, std::optional<int> year);
  bool ParsePeriod(Point& p);
  bool ParseClock(Point& p);
  void ParseSuffix(Point& p);
  Normalized Resolve(const Point& p, const std::string& raw);
  // 三天前, 两个小时后 (direction required) or a duration 三天, 三天以内 (none allowed).
  std::optional<Normalized> TrySpan(const std::string& raw, bool direction);

  // A numeral at the cursor; nullopt (cursor unchanged) when none or approximate.
  std::optional<int> Int() {
    const size_t start = c_.pos();
    auto n = c_.Number(/*allow_approx=*/false);
    if (!n || n->vague || n->approx || n->micros > 9999LL * kMicros) {
      c_.set_pos(start);
      return std::nullopt;
    }
    return static_cast<int>(n->micros / kMicros);
  }
  int64_t LatestDate(int month, int day) const;

  TimeCursor c_;
  int64_t ref_seconds_, ref_day_;
  CivilDate ref_;
  bool error_date_ = false;  // a date was read but does not exist (2月30号)
};

// The latest year-month-day with this month and day at most 61 days after the reference day;
// INT64_MIN when the day does not exist in any candidate year (2月30号).
int64_t TimeParser::LatestDate(int month, int day) const {
  for (int y = ref_.year + 1; y >= ref_.year - 4; --y) {
    if (!internal::IsValidDate(y, month, day)) continue;
    const int64_t d = internal::DaysFromCivil(y, month, day);
    if (d <= ref_day_ + 61) return d;
  }
  return INT64_MIN;
}

bool TimeParser::ParsePrefix(Point& p) {
  for (auto w : {U"大概", U"大约", U"差不多", U"约"}) {
    if (c_.Eat(w)) p.approx = true;
  }
  for (auto w : {U"在", U"于", U"是"}) c_.Eat(w);
  return true;
}

// 上上(个) -2, 上(个) -1, 这(个)/本 0, 下(个) +1, 下下(个) +2 before 周/星期/礼拜/月.
std::optional<int> TimeParser::EatRelativePrefix() {
  static constexpr std::pair<std::u32string_view, int> kPrefixes[] = {
      {U"上上", -2}, {U"下下", 2}, {U"上", -1}, {U"下", 1}, {U"这", 0}, {U"本", 0}};
  for (const auto& [word, offset] : kPrefixes) {
    if (c_.Eat(word)) {
      c_.Eat(U"个");
      return offset;
    }
  }
  return std::nullopt;
}

bool TimeParser::ParseWeek(Point& p) {
  const size_t start = c_.pos();
  const std::optional<int> prefix = EatRelativePrefix();
  const bool prefixed = prefix.has_value();
  const int offset = prefix.value_or(0);
  if (!(c_.Eat(U"周") || c_.Eat(U"星期") || c_.Eat(U"礼拜"))) {
    c_.set_pos(start);
    return false;
  }
  const int64_t monday = ref_day_ - (internal::IsoWeekday(ref_day_) - 1) + 7 * offset;
  int weekday = 0;
  const char32_t ch = c_.peek();
  static constexpr std::u32string_view kDays = U"一二三四五六";
  if (auto k = kDays.find(ch); k != std::u32string_view::npos && ch != 0) {
    weekday = static_cast<int>(k) + 1;
  } else if (ch == U'日' || ch == U'天' || ch == U'7') {
    weekday = 7;
  } else if (ch >= U'1' && ch <= U'6') {
    weekday = static_cast<int>(ch - U'0');
  } else if (ch == U'末') {
    weekday = 6;
    p.approx = true;
  }
  if (weekday == 0) {
    if (!prefixed) {
      c_.set_pos(start);
      return false;
    }
    p.gran = Gran::kWeek;
    p.day = monday;
    return true;
  }
  c_.set_pos(c_.pos() + 1);
  p.gran = Gran::kDay;
  p.day = monday + weekday - 1;
  return true;
}

bool TimeParser::ParseRelativeMonth(Point& p) {
  const size_t start = c_.pos();
  const std::optional<int> prefix = EatRelativePrefix();
  if (!prefix) return false;
  const int offset = *prefix;
  if (!c_.Eat(U"月")) {
    c_.set_pos(start);
    return false;
  }
  const auto [year, month] = internal::AddMonths(ref_.year, ref_.month, offset);
  const size_t before_day = c_.pos();
  if (auto d = Int(); d && (c_.Eat(U"号") || c_.Eat(U"日"))) {
    if (!internal::IsValidDate(year, month, *d)) {
      error_date_ = true;
      return true;
    }
    p.gran = Gran::kDay;
    p.day = internal::DaysFromCivil(year, month, *d);
    return true;
  }
  c_.set_pos(before_day);
  if (c_.Eat(U"初")) p.approx = true;  // 上个月初: the month, roughly its start
  p.gran = Gran::kMonth;
  p.year = year;
  p.month = month;
  return true;
}

bool TimeParser::ParseYearWord(Point& p) {
  static constexpr std::pair<std::u32string_view, int> kYears[] = {
      {U"今年", 0}, {U"去年", -1}, {U"前年", -2}, {U"明年", 1}, {U"后年", 2}};
  for (const auto& [word, offset] : kYears) {
    if (c_.Eat(word)) {
      const int year = ref_.year + offset;
      if (!ParseMonthDay(p, year)) {
        p.gran = Gran::kYear;
        p.year = year;
      }
      return true;
    }
  }
  return false;
}

// MONTH月 [DAY日|号] with a known year, or (no year) the latest occurrence (see the top).
bool TimeParser::ParseMonthDay(Point& p, std::optional<int> year) {
  const size_t start = c_.pos();
  auto month = Int();
  if (!month || !c_.Eat(U"月")) {
    c_.set_pos(start);
    return false;
  }
  c_.Eat(U"份");
  if (*month < 1 || *month > 12) {
    error_date_ = true;
    return true;
  }
  const size_t before_day = c_.pos();
  auto day = Int();
  if (day && (c_.Eat(U"日") || c_.Eat(U"号"))) {
    if (year) {
      if (!internal::IsValidDate(*year, *month, *day)) {
        error_date_ = true;
        return true;
      }
      p.day = internal::DaysFromCivil(*year, *month, *day);
    } else {
      p.day = LatestDate(*month, *day);
      if (p.day == INT64_MIN) {
        error_date_ = true;
        return true;
      }
    }
    p.gran = Gran::kDay;
    return true;
  }
  c_.set_pos(before_day);
  p.gran = Gran::kMonth;
  p.month = *month;
  if (year) {
    p.year = *year;
  } else {
    // The latest year with this month at most 2 months after the reference month.
    const int ref_index = ref_.year * 12 + ref_.month - 1;
    int best = ref_.year + 1;
    while (best * 12 + *month - 1 > ref_index + 2) --best;
    p.year = best;
  }
  return true;
}

bool TimeParser::ParseAbsolute(Point& p) {
  const size_t start = c_.pos();
  // A year is a digit string of 2 or 4 digits (2026, 二〇二六, 26) followed by 年, or the first
  // part of 2026-11-28 / 2026/11/28 / 2026.11.28.
  std::u32string_view s = c_.text();
  c_.SkipSpace();
  size_t i = c_.pos();
  while (i < s.size() && internal::SpokenDigit(s[i]) >= 0 && s[i] != U'幺' && s[i] != U'洞' &&
         s[i] != U'两') {
    ++i;
  }
  const size_t ndigits = i - c_.pos();
  if ((ndigits == 4 || ndigits == 2) && i < s.size()) {
    int year = 0;
    for (size_t k = c_.pos(); k < i; ++k) year = year * 10 + internal::SpokenDigit(s[k]);
    if (ndigits == 2) year += (2000 + year <= ref_.year + 10) ? 2000 : 1900;
    if (year < 1900 || year > 2200) {
      error_date_ = true;
      c_.set_pos(i);
      return true;
    }
    const char32_t sep = s[i];
    if (sep == U'年') {
      c_.set_pos(i + 1);
      if (!ParseMonthDay(p, year)) {
        p.gran = Gran::kYear;
        p.year = year;
      }
      return true;
    }
    if (ndigits == 4 && (sep == U'-' || sep == U'/' || sep == U'.')) {
      c_.set_pos(i + 1);
      auto month = Int();
      if (month && c_.Eat(std::u32string(1, sep))) {
        if (auto day = Int()) {
          if (!internal::IsValidDate(year, *month, *day)) {
            error_date_ = true;
            return true;
          }
          p.gran = Gran::kDay;
          p.day = internal::DaysFromCivil(year, *month, *day);
          c_.Eat(U"T");
          return true;
        }
      }
      c_.set_pos(start);
      return false;
    }
  }
  c_.set_pos(start);
  if (ParseMonthDay(p, std::nullopt)) return true;
  // A day of the month alone: 28号, 三号 (latest at most 7 days ahead).
  auto day = Int();
  if (day && (c_.Eat(U"号") || c_.Eat(U"日"))) {
    int64_t best = INT64_MIN;
    for (int off = 1; off >= -3 && best == INT64_MIN; --off) {
      const auto [y, mo] = internal::AddMonths(ref_.year, ref_.month, off);
      if (!internal::IsValidDate(y, mo, *day)) continue;
      const int64_t d = internal::DaysFromCivil(y, mo, *day);
      if (d <= ref_day_ + 7) best = d;
    }
    if (best == INT64_MIN) {
      error_date_ = true;
      return true;
    }
    p.gran = Gran::kDay;
    p.day = best;
    return true;
  }
  c_.set_pos(start);
  return false;
}

bool TimeParser::ParseDate(Point& p) {
  for (const DayWord& w : kDayWords) {
    if (c_.Eat(w.word)) {
      p.gran = Gran::kDay;
      p.day = ref_day_ + w.offset;
      p.period = w.period;
      return true;
    }
  }
  return ParseWeek(p) || ParseRelativeMonth(p) || ParseYearWord(p) || ParseAbsolute(p);
}

bool TimeParser::ParsePeriod(Point& p) {
  for (const PeriodInfo& info : kPeriods) {
    if (c_.Eat(info.word)) {
      p.period = info.period;
      return true;
    }
  }
  return false;
}

bool TimeParser::ParseClock(Point& p) {
  const size_t start = c_.pos();
  auto hour = Int();
  if (!hour) return false;
  int minute = 0, second = 0;
  if (c_.Eat(U":")) {
    auto m = Int();
    if (!m) {
      c_.set_pos(start);
      return false;
    }
    minute = *m;
    if (c_.Eat(U":")) {
      auto sec = Int();
      if (!sec) {
        c_.set_pos(start);
        return false;
      }
      second = *sec;
    }
  } else if (c_.Eat(U"点钟") || c_.Eat(U"点") || c_.Eat(U"时")) {
    if (c_.Eat(U"半")) {
      minute = 30;
    } else if (c_.Eat(U"一刻")) {
      minute = 15;
    } else if (c_.Eat(U"三刻")) {
      minute = 45;
    } else if (c_.Eat(U"整")) {
      minute = 0;
    } else {
      const size_t before = c_.pos();
      c_.Eat(U"过");
      if (auto m = Int()) {
        minute = *m;
        if (!c_.Eat(U"分钟")) c_.Eat(U"分");
        if (auto sec = Int(); sec && c_.Eat(U"秒")) second = *sec;
      } else {
        c_.set_pos(before);
      }
    }
  } else {
    c_.set_pos(start);
    return false;
  }
  if (*hour > 24 || minute > 59 || second > 59 || (*hour == 24 && (minute || second))) {
    error_date_ = true;
    return true;
  }
  p.hour = *hour;
  p.minute = minute;
  p.second = second;
  return true;
}

void TimeParser::ParseSuffix(Point& p) {
  for (bool again = true; again;) {
    again = false;
    for (auto w : {U"左右", U"前后", U"多", U"许", U"的样子"}) {
      if (c_.Eat(w)) p.approx = again = true;
    }
    for (auto w : {U"的时候", U"时候", U"那会儿", U"那会", U"钟", U"的"}) {
      if (c_.Eat(w)) again = true;
    }
  }
}

std::optional<Normalized> TimeParser::TrySpan(const std::string& raw, bool direction) {
  const size_t start = c_.pos();
  auto span = internal::ParseSpan(c_);
  if (!span) return std::nullopt;
  int sign = 0;
  if (c_.Eat(U"以前") || c_.Eat(U"之前") || c_.Eat(U"前")) {
    sign = -1;
  } else if (c_.Eat(U"以后") || c_.Eat(U"之后") || c_.Eat(U"过后") || c_.Eat(U"后")) {
    sign = 1;
  } else {
    c_.Eat(U"以内") || c_.Eat(U"之内") || c_.Eat(U"内");
  }
  Point dummy;
  ParseSuffix(dummy);
  if (!c_.done() || direction != (sign != 0)) {
    c_.set_pos(start);
    return std::nullopt;
  }
  if (span->vague) return Invalid(raw, "vague time expression");
  Normalized n;
  if (span->approx || dummy.approx) n.extra["approx"] = "true";
  if (sign == 0) {
    n.value = internal::FormatDuration(*span);
    n.extra["kind"] = "duration";
    return n;
  }
  // Calendar part first (months clamp the day), then the clock part.
  const int64_t months = sign * (span->years * 12 + span->months);
  int64_t day = ref_day_;
  if (months != 0) {
    const auto [y, mo] = internal::AddMonths(ref_.year, ref_.month, months);
    day = internal::DaysFromCivil(y, mo, std::min(ref_.day, internal::DaysInMonth(y, mo)));
  }
  day += sign * (span->weeks * 7 + span->days);
  if (const int year = internal::CivilFromDays(day).year; year < 1900 || year > 2200) {
    return Invalid(raw, "time expression resolves outside the years 1900-2200");
  }
  if (!span->clock()) {
    n.value = internal::FormatDate(day);
    n.extra["kind"] = "date";
    return n;
  }
  const int64_t seconds = day * 86400 + (ref_seconds_ - ref_day_ * 86400) +
                          sign * (span->hours * 3600 + span->minutes * 60 + span->seconds);
  n.value = internal::FormatDateTime(seconds);
  n.extra["kind"] = "datetime";
  return n;
}

Normalized TimeParser::Resolve(const Point& p, const std::string& raw) {
  Normalized n;
  if (p.approx) n.extra["approx"] = "true";
  if (p.period != Period::kNone) n.extra["period"] = PeriodId(p.period);
  const bool has_time = p.hour >= 0 || p.period != Period::kNone;
  if (has_time && p.gran != Gran::kDay && p.gran != Gran::kNone) {
    return Invalid(raw, "a time of day needs a day, not a whole month, week or year");
  }
  switch (p.gran) {
    case Gran::kMonth:
      n.value = internal::FormatMonth(p.year, p.month);
      n.extra["kind"] = "month";
      return n;
    case Gran::kYear:
      n.value = std::to_string(p.year);
      n.extra["kind"] = "year";
      return n;
    case Gran::kWeek:
      n.value = internal::FormatIsoWeek(p.day);
      n.extra["kind"] = "week";
      return n;
    default:
      break;
  }
  const int64_t day = p.gran == Gran::kDay ? p.day : ref_day_;
  if (!has_time) {
    n.value = internal::FormatDate(day);
    n.extra["kind"] = "date";
    return n;
  }
  int hour = 0;
  if (p.hour >= 0) {
    hour = ApplyPeriod(p.period, p.hour, p.gran == Gran::kDay);
  } else {
    hour = RepresentativeHour(p.period);
    n.extra["approx"] = "true";
  }
  n.value = internal::FormatDateTime(day * 86400 + hour * 3600 + p.minute * 60 + p.second);
  n.extra["kind"] = "datetime";
  return n;
}

Normalized TimeParser::Run(const std::string& raw) {
  if (c_.done()) return Invalid(raw, "empty time expression");
  if (c_.Eat(U"现在") || c_.Eat(U"此刻") || c_.Eat(U"目前") || c_.Eat(U"当前")) {
    if (c_.done()) {
      Normalized n;
      n.value = internal::FormatDateTime(ref_seconds_);
      n.extra["kind"] = "datetime";
      return n;
    }
    c_.set_pos(0);
  }
  if (c_.Eat(U"刚才") || c_.Eat(U"刚刚")) {
    if (c_.done()) {
      Normalized n;
      n.value = internal::FormatDateTime(ref_seconds_);
      n.extra["kind"] = "datetime";
      n.extra["approx"] = "true";
      return n;
    }
    c_.set_pos(0);
  }
  if (auto relative = TrySpan(raw, /*direction=*/true)) return *relative;
  Point p;
  ParsePrefix(p);
  const size_t body = c_.pos();
  ParseDate(p);
  ParsePeriod(p);
  ParseClock(p);
  ParseSuffix(p);
  if (error_date_) return Invalid(raw, "no such date or time of day");
  if (c_.pos() == body || !c_.done()) {
    c_.set_pos(0);
    if (auto duration = TrySpan(raw, /*direction=*/false)) return *duration;
    for (auto vague : {U"几", U"最近", U"那天", U"之前", U"以前", U"前段", U"这段"}) {
      if (c_.text().find(vague) != std::u32string_view::npos) {
        return Invalid(raw, "vague time expression");
      }
    }
    return Invalid(raw, "could not resolve the time expression");
  }
  return Resolve(p, raw);
}

}  // namespace

Normalized NormalizeTime(std::string_view text,
                         std::chrono::system_clock::time_point reference_time) {
  auto prepared = internal::Prepare(text);
  if (!prepared) return Invalid(std::string(text), "time expression is not valid UTF-8");
  TimeParser parser(*prepared, internal::ShanghaiLocalSeconds(reference_time));
  return parser.Run(internal::TrimmedRaw(text));
}

}  // namespace hotline::nlu
