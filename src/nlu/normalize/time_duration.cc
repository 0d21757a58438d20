#include <string>

#include "nlu/normalize/time_parse.h"

namespace hotline::nlu::internal {

void TimeCursor::SkipSpace() {
  while (pos_ < s_.size() && IsSpace(s_[pos_])) ++pos_;
}

bool TimeCursor::Eat(std::u32string_view word) {
  SkipSpace();
  if (!MatchAt(s_, pos_, word)) return false;
  pos_ += word.size();
  return true;
}

std::optional<Numeral> TimeCursor::Number(bool allow_approx) {
  SkipSpace();
  NumeralOptions opt;
  opt.approx_words = allow_approx;
  auto n = ParseNumeral(s_, pos_, opt);
  if (!n) return std::nullopt;
  pos_ += n->length;
  return n;
}

namespace {

enum class Unit { kYear, kMonth, kWeek, kDay, kHour, kMinute, kSecond };

// Units after a quantity. 月 needs 个 (三月 is March), 日 and 分 alone are left to dates and
// clocks.
std::optional<Unit> EatUnit(TimeCursor& c, bool after_ge) {
  if (c.Eat(U"小时") || c.Eat(U"钟头")) return Unit::kHour;
  if (c.Eat(U"分钟")) return Unit::kMinute;
  if (c.Eat(U"秒钟") || c.Eat(U"秒")) return Unit::kSecond;
  if (c.Eat(U"星期") || c.Eat(U"礼拜")) return Unit::kWeek;
  if (after_ge) {
    if (c.Eat(U"月")) return Unit::kMonth;
    return std::nullopt;
  }
  if (c.Eat(U"年")) return Unit::kYear;
  if (c.Eat(U"周")) return Unit::kWeek;
  if (c.Eat(U"天")) return Unit::kDay;
  return std::nullopt;
}

// Adds n (in halves: 3 = one and a half) of unit to span. False when a half has no exact form.
bool Add(Span& s, Unit u, int64_t halves) {
  const int64_t whole = halves / 2;
  const bool half = halves % 2 != 0;
  switch (u) {
    case Unit::kYear:
      s.years += whole;
      if (half) s.months += 6;
      return true;
    case Unit::kMonth:
      s.months += whole;
      if (half) s.days += 15;
      return true;
    case Unit::kWeek:
      s.weeks += whole;
      if (half) return false;
      return true;
    case Unit::kDay:
      s.days += whole;
      if (half) {
        s.hours += 12;
        s.approx |= whole == 0;
      }  // 半天 is also "a long while"
      return true;
    case Unit::kHour:
      s.hours += whole;
      if (half) s.minutes += 30;
      return true;
    case Unit::kMinute:
      s.minutes += whole;
      if (half) s.seconds += 30;
      return true;
    case Unit::kSecond:
      s.seconds += whole;
      return !half;
  }
  return false;
}

// One "quantity unit" pair: 三天, 两个月, 一个半小时, 一个多月, 半个小时, 一年半, 十几天, 好几天.
bool ParsePair(TimeCursor& c, Span& span) {
  const size_t start = c.pos();
  bool vague = false;
  if (c.Eat(U"好几") || c.Eat(U"几")) {
    vague = true;
  }
  int64_t halves = 0;
  bool approx = false;
  if (!vague) {
    if (c.Eat(U"半")) {
      halves = 1;
    } else {
      auto n = c.Number(/*allow_approx=*/true);
      if (!n) {
        c.set_pos(start);
        return false;
      }
      if (n->micros > 100000 * kMicros) {  // no caller means 100000 units; keeps dates in range
        c.set_pos(start);
        return false;
      }
      if (n->vague) vague = true;
      approx = n->approx;
      halves = n->micros / kMicros * 2;
    }
  }
  const bool ge = c.Eat(U"个");
  if (ge && c.Eat(U"半")) halves += 1;    // 一个半小时
  if (ge && c.Eat(U"多")) approx = true;  // 一个多月
  auto unit = EatUnit(c, ge);
  if (!unit) {
    c.set_pos(start);
    return false;
  }
  if (c.Eat(U"半")) halves += 1;    // 一年半, 两天半
  if (c.Eat(U"多")) approx = true;  // 三天多
  if (vague) {
    span.vague = true;
    return true;
  }
  if (!Add(span, *unit, halves)) {
    span.vague = true;
    return true;
  }
  span.approx |= approx;
  return true;
}

}  // namespace

std::optional<Span> ParseSpan(TimeCursor& c) {
  Span span;
  const size_t start = c.pos();
  if (!ParsePair(c, span)) return std::nullopt;
  while (ParsePair(c, span)) {
  }
  if (c.pos() == start) return std::nullopt;
  return span;
}

std::string FormatDuration(const Span& s) {
  std::string out = "P";
  int64_t days = s.days;
  const bool weeks_only = s.weeks && !s.years && !s.months && !s.days && !s.clock();
  if (!weeks_only) days += 7 * s.weeks;
  if (s.years) out += std::to_string(s.years) + "Y";
  if (s.months) out += std::to_string(s.months) + "M";
  if (weeks_only) out += std::to_string(s.weeks) + "W";
  if (days) out += std::to_string(days) + "D";
  if (s.clock()) {
    out += "T";
    if (s.hours) out += std::to_string(s.hours) + "H";
    if (s.minutes) out += std::to_string(s.minutes) + "M";
    if (s.seconds) out += std::to_string(s.seconds) + "S";
  }
  if (out == "P") out = "PT0S";
  return out;
}

}  // namespace hotline::nlu::internal
