#include "nlu/normalize/text_util.h"

#include <vector>

#include "base/spoken_digits.h"

namespace hotline::nlu::internal {

std::optional<std::u32string> DecodeUtf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const auto b0 = static_cast<unsigned char>(text[i]);
    int n = 0;
    char32_t c = 0;
    if (b0 < 0x80) {
      n = 1, c = b0;
    } else if ((b0 & 0xE0) == 0xC0) {
      n = 2, c = b0 & 0x1F;
    } else if ((b0 & 0xF0) == 0xE0) {
      n = 3, c = b0 & 0x0F;
    } else if ((b0 & 0xF8) == 0xF0) {
      n = 4, c = b0 & 0x07;
    } else {
      return std::nullopt;
    }
    if (i + n > text.size()) return std::nullopt;
    for (int k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(text[i + k]);
      if ((b & 0xC0) != 0x80) return std::nullopt;
      c = (c << 6) | (b & 0x3F);
    }
    static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < kMin[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return std::nullopt;
    out.push_back(c);
    i += n;
  }
  return out;
}

std::string EncodeUtf8(std::u32string_view text) {
  std::string out;
  for (char32_t c : text) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (c >> 12)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (c >> 18)));
      out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  return out;
}

char32_t FoldWidth(char32_t c) {
  if (c >= 0xFF01 && c <= 0xFF5E) return c - 0xFEE0;
  if (c == 0x3000) return U' ';
  return c;
}

bool IsSpace(char32_t c) {
  return c == U' ' || c == U'\t' || c == U'\n' || c == U'\r' || c == U'\f' || c == U'\v' ||
         c == 0xA0 || c == 0x3000 || (c >= 0x2000 && c <= 0x200B);
}

bool IsDash(char32_t c) {
  return c == U'-' || (c >= 0x2010 && c <= 0x2015) || c == 0x2212 || c == 0xFF0D;
}

char32_t ToUpperAscii(char32_t c) { return (c >= U'a' && c <= U'z') ? c - 32 : c; }

std::optional<std::u32string> Prepare(std::string_view text) {
  auto decoded = DecodeUtf8(text);
  if (!decoded) return std::nullopt;
  std::u32string& s = *decoded;
  for (char32_t& c : s) c = FoldWidth(c);
  size_t b = 0, e = s.size();
  while (b < e && IsSpace(s[b])) ++b;
  while (e > b && IsSpace(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::string TrimmedRaw(std::string_view text) {
  auto prepared = DecodeUtf8(text);
  if (!prepared) return std::string(text);
  std::u32string& s = *prepared;
  size_t b = 0, e = s.size();
  while (b < e && IsSpace(FoldWidth(s[b]))) ++b;
  while (e > b && IsSpace(FoldWidth(s[e - 1]))) --e;
  return EncodeUtf8(std::u32string_view(s).substr(b, e - b));
}

Normalized Invalid(std::string value, std::string error) {
  Normalized n;
  n.value = std::move(value);
  n.valid = false;
  n.error = std::move(error);
  return n;
}

bool MatchAt(std::u32string_view s, size_t pos, std::u32string_view word) {
  return pos <= s.size() && s.substr(pos).substr(0, word.size()) == word;
}

namespace {

// A Chinese digit for numerals: base/spoken_digits.h's table without the phone-only 幺/洞 and
// without Arabic digits (which callers parse themselves), plus the financial forms when asked.
int NumeralDigit(char32_t c, bool financial) {
  const bool arabic = (c >= U'0' && c <= U'9') || (c >= 0xFF10 && c <= 0xFF19);
  if (!arabic && c != U'幺' && c != U'洞') {
    const int d = SpokenDigit(c);
    if (d >= 0) return d;
  }
  if (!financial) return -1;
  switch (c) {
    case U'壹':
      return 1;
    case U'贰':
    case U'貳':
    case U'兩':
      return 2;
    case U'叁':
    case U'參':
      return 3;
    case U'肆':
      return 4;
    case U'伍':
      return 5;
    case U'陆':
    case U'陸':
      return 6;
    case U'柒':
      return 7;
    case U'捌':
      return 8;
    case U'玖':
      return 9;
    default:
      return -1;
  }
}

int64_t UnitValue(char32_t c, const NumeralOptions& opt) {
  switch (c) {
    case U'十':
      return 10;
    case U'百':
      return 100;
    case U'千':
      return 1000;
    default:
      break;
  }
  if (opt.financial) {
    if (c == U'拾') return 10;
    if (c == U'佰') return 100;
    if (c == U'仟') return 1000;
  }
  if (opt.big_units) {
    if (c == U'万' || c == U'萬') return 10000;
    if (c == U'亿' || c == U'億') return 100000000;
  }
  return 0;
}

bool IsAsciiDigit(char32_t c) { return c >= U'0' && c <= U'9'; }

bool MulOk(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }
bool AddOk(int64_t a, int64_t b, int64_t* out) { return !__builtin_add_overflow(a, b, out); }

// An Arabic number at s[i...]: returns micros and the length; integer digits are also appended to
// *digits for digit-by-digit reading.
std::optional<std::pair<int64_t, size_t>> ParseArabic(std::u32string_view s, size_t i,
                                                      const NumeralOptions& opt, bool* has_point) {
  size_t j = i;
  int64_t value = 0;
  auto push = [&](char32_t c) {
    return MulOk(value, 10, &value) && AddOk(value, c - U'0', &value);
  };
  while (j < s.size()) {
    if (IsAsciiDigit(s[j])) {
      if (!push(s[j])) return std::nullopt;
      ++j;
    } else if (opt.decimals && s[j] == U',' && j > i && j + 3 < s.size() &&
               IsAsciiDigit(s[j + 1]) && IsAsciiDigit(s[j + 2]) && IsAsciiDigit(s[j + 3]) &&
               (j + 4 >= s.size() || !IsAsciiDigit(s[j + 4]))) {
      ++j;  // thousands separator
    } else {
      break;
    }
  }
  int64_t micros = 0;
  if (!MulOk(value, kMicros, &micros)) return std::nullopt;
  *has_point = false;
  if (opt.decimals && j + 1 < s.size() && s[j] == U'.' && IsAsciiDigit(s[j + 1])) {
    *has_point = true;
    ++j;
    int64_t scale = kMicros / 10;
    while (j < s.size() && IsAsciiDigit(s[j])) {
      if (scale == 0 && s[j] != U'0') return std::nullopt;  // finer than 1e-6
      micros += (s[j] - U'0') * scale;
      scale /= 10;
      ++j;
    }
  }
  return std::make_pair(micros, j - i);
}

}  // namespace

std::optional<Numeral> ParseNumeral(std::u32string_view s, size_t pos, const NumeralOptions& opt) {
  int64_t yi = 0, wan = 0, section = 0;  // all in micros
  int64_t pending = 0;                   // the last digit token's value, when has_pending
  bool has_pending = false;
  bool pending_single = false;  // pending is one digit (for 一百八 = 180)
  int64_t last_unit = 0;
  bool zero_after_unit = false;
  bool any_unit = false, adjacent_digits = false, any_point = false;
  Numeral result;
  std::string digits;  // digit-by-digit reading when no unit appears
  int digit_tokens = 0;
  size_t i = pos;
  while (i < s.size()) {
    const char32_t c = s[i];
    if (IsAsciiDigit(c)) {
      bool point = false;
      auto arabic = ParseArabic(s, i, opt, &point);
      if (!arabic) return std::nullopt;
      if (has_pending) adjacent_digits = true;
      for (size_t k = i; k < i + arabic->second; ++k) {
        if (IsAsciiDigit(s[k])) digits.push_back(static_cast<char>(s[k]));
      }
      any_point |= point;
      pending = arabic->first;
      has_pending = true;
      pending_single = arabic->second == 1;
      i += arabic->second;
      ++digit_tokens;
      continue;
    }
    const int d = NumeralDigit(c, opt.financial);
    if (d >= 0) {
      digits.push_back(static_cast<char>('0' + d));
      ++digit_tokens;
      if (d == 0) {
        if (has_pending) adjacent_digits = true;
        zero_after_unit = last_unit != 0;
        ++i;
        continue;
      }
      if (has_pending) adjacent_digits = true;
      pending = d * kMicros;
      has_pending = true;
      pending_single = true;
      ++i;
      continue;
    }
    if (opt.approx_words && c == U'几') {
      if (digit_tokens == 0 && !any_unit) result.vague = true;  // 几百
      result.approx = true;
      if (has_pending) adjacent_digits = true;
      pending = 0;
      has_pending = true;
      pending_single = false;
      digits.push_back('0');
      ++digit_tokens;
      ++i;
      continue;
    }
    const int64_t unit = UnitValue(c, opt);
    if (unit == 0) break;
    if (!has_pending && unit >= 100 && digit_tokens == 0 && !any_unit)
      break;  // 百 alone is not a number
    any_unit = true;
    if (unit <= 1000) {
      int64_t add = 0;
      if (!MulOk(has_pending ? pending : kMicros, unit, &add) || !AddOk(section, add, &section)) {
        return std::nullopt;
      }
    } else if (unit == 10000) {
      int64_t v = 0;
      if (!AddOk(section, has_pending ? pending : 0, &v) || !AddOk(v, wan, &v)) return std::nullopt;
      if (v == 0) v = kMicros;  // 万 right after 亿 or at the start: one 万
      if (!MulOk(v, unit, &wan)) return std::nullopt;
      section = 0;
    } else {
      int64_t v = 0;
      if (!AddOk(section, has_pending ? pending : 0, &v) || !AddOk(v, wan, &v) ||
          !AddOk(v, yi, &v)) {
        return std::nullopt;
      }
      if (v == 0) v = kMicros;
      if (!MulOk(v, unit, &yi)) return std::nullopt;
      wan = 0;
      section = 0;
    }
    pending = 0;
    has_pending = false;
    pending_single = false;
    last_unit = unit;
    zero_after_unit = false;
    ++i;
  }
  if (i == pos) return std::nullopt;
  if (opt.approx_words && i < s.size() && (s[i] == U'多' || s[i] == U'来' || s[i] == U'余')) {
    result.approx = true;
    ++i;
  }
  result.length = i - pos;
  if (!any_unit) {
    if (digit_tokens == 1 || any_point) {
      if (adjacent_digits && any_point) return std::nullopt;
      result.micros = has_pending ? pending : 0;
      return result;
    }
    // Digit by digit: 二〇二六 → 2026.
    if (digits.size() > 18) return std::nullopt;
    int64_t v = 0;
    for (char ch : digits) v = v * 10 + (ch - '0');
    if (!MulOk(v, kMicros, &result.micros)) return std::nullopt;
    return result;
  }
  if (adjacent_digits) result.vague = true;  // 三四百
  int64_t tail = has_pending ? pending : 0;
  if (has_pending && opt.abbreviation && pending_single && !zero_after_unit && last_unit >= 100) {
    if (!MulOk(tail, last_unit / 10, &tail)) return std::nullopt;
  }
  int64_t total = 0;
  if (!AddOk(yi, wan, &total) || !AddOk(total, section, &total) || !AddOk(total, tail, &total)) {
    return std::nullopt;
  }
  result.micros = total;
  return result;
}

}  // namespace hotline::nlu::internal
