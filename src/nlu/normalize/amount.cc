// Amounts of money → yuan as a decimal string ("3500", "3.5", "0.05").
#include <string>

#include "nlu/normalize/normalize.h"
#include "nlu/normalize/text_util.h"

namespace hotline::nlu {
namespace {

using internal::Invalid;
using internal::kMicros;
using internal::MatchAt;

std::string FormatYuan(int64_t micros) {
  std::string out = std::to_string(micros / kMicros);
  int64_t frac = micros % kMicros;
  if (frac != 0) {
    std::string f = std::to_string(frac);
    f.insert(0, 6 - f.size(), '0');
    while (!f.empty() && f.back() == '0') f.pop_back();
    out += "." + f;
  }
  return out;
}

bool ConsumeAny(std::u32string_view s, size_t* pos,
                std::initializer_list<std::u32string_view> words,
                std::u32string_view* matched = nullptr) {
  for (auto w : words) {
    if (MatchAt(s, *pos, w)) {
      *pos += w.size();
      if (matched) *matched = w;
      return true;
    }
  }
  return false;
}

bool IsYuanUnit(char32_t c) { return c == U'元' || c == U'块' || c == U'圆' || c == U'塊'; }
bool IsJiaoUnit(char32_t c) { return c == U'角' || c == U'毛'; }

// A single sub-unit digit (角 or 分 count): 0-9 as Arabic, Chinese or financial numeral.
std::optional<internal::Numeral> SubDigit(std::u32string_view s, size_t pos) {
  internal::NumeralOptions opt;
  opt.financial = true;
  auto n = internal::ParseNumeral(s, pos, opt);
  if (!n || n->micros % kMicros != 0 || n->micros > 9 * kMicros) return std::nullopt;
  return n;
}

}  // namespace

Normalized NormalizeAmount(std::string_view text) {
  auto prepared = internal::Prepare(text);
  if (!prepared) return Invalid(std::string(text), "amount is not valid UTF-8");
  std::u32string s;
  for (char32_t c : *prepared) {
    if (!internal::IsSpace(c)) s.push_back(internal::ToUpperAscii(c));
  }
  const std::string raw = internal::TrimmedRaw(text);
  if (s.empty()) return Invalid("", "empty amount");
  for (std::u32string_view foreign : {U"美元", U"美金", U"欧元", U"日元", U"英镑", U"港币", U"港元",
                                      U"韩元", U"USD", U"$", U"€", U"£"}) {
    if (s.find(foreign) != std::u32string::npos) return Invalid(raw, "amount is not in yuan");
  }
  bool approx = false;
  size_t pos = 0;
  std::u32string_view word;
  while (ConsumeAny(s, &pos,
                    {U"人民币", U"RMB", U"CNY", U"¥", U"￥", U"大约", U"大概", U"差不多", U"将近",
                     U"约", U"一共", U"总共", U"共", U"合计"},
                    &word)) {
    if (word == U"大约" || word == U"大概" || word == U"差不多" || word == U"将近" ||
        word == U"约") {
      approx = true;
    }
  }
  internal::NumeralOptions opt;
  opt.decimals = opt.big_units = opt.abbreviation = opt.financial = opt.approx_words = true;
  auto main = internal::ParseNumeral(s, pos, opt);
  const bool has_ji = s.find(U'几') != std::u32string::npos;
  if (!main) {
    if (has_ji) return Invalid(raw, "vague amount");
    const bool digit = pos < s.size() && internal::SpokenDigit(s[pos]) >= 0;
    return Invalid(raw, digit ? "amount is too large" : "no number in amount");
  }
  if (main->vague) return Invalid(raw, "vague amount");
  approx |= main->approx;
  int64_t total = main->micros;
  pos += main->length;
  auto add_sub = [&](const internal::Numeral& n, int64_t divisor) { total += n.micros / divisor; };
  if (pos < s.size() && IsYuanUnit(s[pos])) {
    ++pos;
    ConsumeAny(s, &pos, {U"钱"});
    // 三块五 (= 3.5), 三块五毛二, 三元五角二分, 三块零五 (= 3.05), 三块零五分.
    const bool zero = pos < s.size() && (s[pos] == U'零' || s[pos] == U'0');
    if (auto jiao = SubDigit(s, pos)) {
      const size_t after = pos + jiao->length;
      if (after < s.size() && IsJiaoUnit(s[after])) {
        add_sub(*jiao, 10);
        pos = after + 1;
        if (auto fen = SubDigit(s, pos)) {
          add_sub(*fen, 100);
          pos += fen->length;
          if (pos < s.size() && s[pos] == U'分') ++pos;
        }
      } else if (after < s.size() && s[after] == U'分') {
        add_sub(*jiao, 100);
        pos = after + 1;
      } else {
        add_sub(*jiao, zero ? 100 : 10);
        pos = after;
      }
    }
  } else if (pos < s.size() && IsJiaoUnit(s[pos])) {
    if (main->micros % kMicros != 0 || main->micros > 9 * kMicros) {
      return Invalid(raw, "角/毛 count must be a single digit");
    }
    total = main->micros / 10;
    ++pos;
    if (auto fen = SubDigit(s, pos)) {
      add_sub(*fen, 100);
      pos += fen->length;
      if (pos < s.size() && s[pos] == U'分') ++pos;
    }
  } else if (pos < s.size() && s[pos] == U'分') {
    if (main->micros % kMicros != 0 || main->micros > 9 * kMicros) {
      return Invalid(raw, "分 count must be a single digit");
    }
    total = main->micros / 100;
    ++pos;
  }
  while (ConsumeAny(s, &pos,
                    {U"钱", U"整", U"左右", U"上下", U"多", U"来", U"余", U"人民币", U"的样子"},
                    &word)) {
    if (word != U"钱" && word != U"整" && word != U"人民币") approx = true;
  }
  if (pos != s.size()) return Invalid(raw, "unexpected text in amount");
  Normalized n;
  n.value = FormatYuan(total);
  if (approx) n.extra["approx"] = "true";
  return n;
}

}  // namespace hotline::nlu
