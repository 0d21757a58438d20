// Internal helpers shared by the normalisers: UTF-8, width folding, spoken digits, Chinese
// numerals. Not part of the public API (normalize.h is).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/spoken_digits.h"
#include "nlu/normalize/normalize.h"

namespace hotline::nlu::internal {

// Decodes UTF-8 (rejecting overlongs, surrogates, > U+10FFFF); nullopt on invalid input.
std::optional<std::u32string> DecodeUtf8(std::string_view text);
std::string EncodeUtf8(std::u32string_view text);

// Full-width ASCII (U+FF01..U+FF5E) → ASCII, ideographic space U+3000 → ' '; others unchanged.
char32_t FoldWidth(char32_t c);
bool IsSpace(char32_t c);  // after folding: ASCII whitespace, NBSP, U+2000..U+200B
bool IsDash(char32_t c);   // after folding: - ‐ ‑ ‒ – — ― −
char32_t ToUpperAscii(char32_t c);

// 0-9 for ASCII digits and the spoken digits 零〇洞 0, 一幺 1, 二两 2, 三…九; -1 otherwise.
// See base/spoken_digits.h (full-width digits are folded by Prepare() before this is used).
inline int SpokenDigit(char32_t c) { return ::hotline::SpokenDigit(c); }

// Decodes, folds width and trims surrounding whitespace. nullopt on invalid UTF-8.
std::optional<std::u32string> Prepare(std::string_view text);

// Raw text trimmed of surrounding ASCII/ideographic whitespace (for invalid results).
std::string TrimmedRaw(std::string_view text);

Normalized Invalid(std::string value, std::string error);

// Chinese or Arabic numeral at s[pos...]. Values are fixed point in millionths (1e-6) so amounts
// with decimals stay exact.
struct Numeral {
  int64_t micros = 0;   // value * 1e6
  size_t length = 0;    // code points consumed
  bool approx = false;  // 十几, 三千多, 十来: value is the lower bound
  bool vague = false;   // 几百, 好几, 三四百: no usable value
};
struct NumeralOptions {
  bool decimals = false;      // 3.5, 1,200.50 (commas only before groups of exactly 3 digits)
  bool big_units = false;     // 万 亿
  bool abbreviation = false;  // 一百八 = 180, 一万二 = 12000, 三千五 = 3500
  bool financial = false;     // 壹贰叁肆伍陆柒捌玖拾佰仟
  bool approx_words = false;  // 几 多 来 余 after a number
};
// nullopt when no numeral starts at pos or it overflows. A run of digits with no unit characters is
// read digit by digit (二〇二六 = 2026).
std::optional<Numeral> ParseNumeral(std::u32string_view s, size_t pos, const NumeralOptions& opt);

inline constexpr int64_t kMicros = 1000000;

// Starts-with test on a u32 string at pos for a UTF-8 literal.
bool MatchAt(std::u32string_view s, size_t pos, std::u32string_view word);

}  // namespace hotline::nlu::internal
