// Internal: the time normaliser's cursor and its quantity/duration grammar (time_duration.cc),
// shared with the point-in-time grammar (time.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "nlu/normalize/text_util.h"

namespace hotline::nlu::internal {

// A cursor over the prepared (width-folded, trimmed) text. Spaces between components are skipped.
class TimeCursor {
 public:
  explicit TimeCursor(std::u32string_view s) : s_(s) {}
  size_t pos() const { return pos_; }
  void set_pos(size_t p) { pos_ = p; }
  bool done() {
    SkipSpace();
    return pos_ >= s_.size();
  }
  char32_t peek() {
    SkipSpace();
    return pos_ < s_.size() ? s_[pos_] : 0;
  }
  bool Eat(std::u32string_view word);
  // A numeral (Arabic or Chinese, digit strings like 二〇二六 included); approx words (十几,
  // 二十多) are read when allow_approx.
  std::optional<Numeral> Number(bool allow_approx);
  std::u32string_view text() const { return s_; }
  void SkipSpace();

 private:
  std::u32string_view s_;
  size_t pos_ = 0;
};

// Calendar and clock components of a duration or a relative offset (三天, 一个半小时, 两年).
struct Span {
  int64_t years = 0, months = 0, weeks = 0, days = 0, hours = 0, minutes = 0, seconds = 0;
  bool approx = false;
  bool vague = false;  // 好几天, 几个月
  bool clock() const { return hours || minutes || seconds; }
};

// Reads one or more "quantity unit" pairs at the cursor; nullopt (cursor unchanged) when the text
// there is not a quantity.
std::optional<Span> ParseSpan(TimeCursor& c);
std::string FormatDuration(const Span& span);  // ISO-8601: P3D, PT1H30M, P1Y6M, P2W

}  // namespace hotline::nlu::internal
