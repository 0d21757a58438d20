#include "base/pii.h"

#include "base/spoken_digits.h"

#include <cstdint>
#include <vector>

namespace hotline {
namespace {

struct CodePoint {
  char32_t c;         // U+FFFD for an invalid byte
  size_t begin, end;  // byte range in the input
};

std::vector<CodePoint> DecodeLenient(std::string_view s) {
  std::vector<CodePoint> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    int n = b0 < 0x80             ? 1
            : (b0 & 0xE0) == 0xC0 ? 2
            : (b0 & 0xF0) == 0xE0 ? 3
            : (b0 & 0xF8) == 0xF0 ? 4
                                  : 0;
    char32_t c = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    bool ok = n > 0 && i + n <= s.size();
    for (int k = 1; ok && k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      ok = (b & 0xC0) == 0x80;
      c = (c << 6) | (b & 0x3F);
    }
    if (!ok) {
      out.push_back({0xFFFD, i, i + 1});
      ++i;
      continue;
    }
    out.push_back({c, i, i + n});
    i += n;
  }
  return out;
}

// 0-9 for ASCII, full-width and spoken Chinese digits; 10 for an ID check character X; else -1.
int DigitOf(char32_t c) {
  const int d = SpokenDigit(c);
  if (d >= 0) return d;
  switch (c) {
    case U'X':
    case U'x':
    case U'叉':
    case 0xFF38:
    case 0xFF58:
      return 10;
    default:
      return -1;
  }
}

bool IsSeparator(char32_t c) {
  return c == U' ' || c == U'-' || c == 0x3000 || c == 0xFF0D || c == 0x2010 || c == 0x2011 ||
         c == 0x2013 || c == 0x2014;
}

struct Element {
  int digit;  // 0-9, 10 = X
  size_t cp;  // index into the code points
  int group;  // digit groups are separated by one separator
};

enum class Kind { kNone, kMobile, kId, kLandline };

struct Match {
  Kind kind = Kind::kNone;
  size_t start = 0, length = 0;  // in elements
};

bool AllDigits(const std::vector<Element>& e, size_t from, size_t n) {
  if (from + n > e.size()) return false;
  for (size_t k = from; k < from + n; ++k) {
    if (e[k].digit > 9) return false;
  }
  return true;
}

// The best match starting exactly at element s: one that ends at a group boundary is preferred,
// then ID over landline over mobile.
Match MatchAt(const std::vector<Element>& e, size_t s) {
  auto ends_group = [&](size_t n) {
    return s + n == e.size() || e[s + n].group != e[s + n - 1].group;
  };
  Match best;
  bool best_clean = false;
  auto consider = [&](Kind kind, size_t n) {
    const bool clean = ends_group(n);
    if (best.kind == Kind::kNone || (clean && !best_clean)) {
      best = {kind, s, n};
      best_clean = clean;
    }
  };
  if (s + 18 <= e.size() && e[s].digit >= 1 && AllDigits(e, s, 17)) consider(Kind::kId, 18);
  if (s + 12 <= e.size() && e[s].digit == 0 && e[s + 1].digit >= 3 && AllDigits(e, s, 12)) {
    consider(Kind::kLandline, 12);  // 4-digit area code + 8 digits
  }
  if (s + 11 <= e.size() && AllDigits(e, s, 11)) {
    if (e[s].digit == 0 && e[s + 1].digit >= 1) consider(Kind::kLandline, 11);
    if (e[s].digit == 1 && e[s + 1].digit >= 3) consider(Kind::kMobile, 11);
  }
  return best;
}

// An 18-character ID number at element s whose check character is right (GB 11643, ISO 7064
// MOD 11-2): how an ID number inside a longer digit run is told from any 18 of its digits.
bool ValidIdAt(const std::vector<Element>& e, size_t s) {
  if (s + 18 > e.size() || e[s].digit < 1 || !AllDigits(e, s, 17)) return false;
  static const int kWeights[17] = {7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2};
  static const int kCheck[11] = {1, 0, 10, 9, 8, 7, 6, 5, 4, 3, 2};  // 10: X
  int sum = 0;
  for (int k = 0; k < 17; ++k) sum += kWeights[k] * e[s + size_t(k)].digit;
  return e[s + 17].digit == kCheck[sum % 11];
}

std::string Masked(const std::vector<Element>& e, const Match& m) {
  std::string d;
  for (size_t k = m.start; k < m.start + m.length; ++k) {
    d.push_back(e[k].digit == 10 ? 'X' : static_cast<char>('0' + e[k].digit));
  }
  switch (m.kind) {
    case Kind::kMobile:
      return d.substr(0, 3) + "****" + d.substr(7);
    case Kind::kId:
      return d.substr(0, 6) + "********" + d.substr(14);
    case Kind::kLandline:
      return d.substr(0, 3) + std::string(d.size() - 5, '*') + d.substr(d.size() - 2);
    case Kind::kNone:
      break;
  }
  return d;
}

bool IsProvince(char32_t c) {
  static const std::u32string kProvinces =
      U"京津沪渝冀豫云辽黑湘皖鲁新苏浙赣鄂桂甘晋蒙陕吉闽贵粤青藏川宁琼使领";
  return kProvinces.find(c) != std::u32string::npos;
}

// A plate character: ASCII or full-width A-Z / 0-9; 'A'..'Z' as such, digits as '0'..'9'.
char PlateChar(char32_t c) {
  if (c >= 0xFF21 && c <= 0xFF3A) c = c - 0xFF21 + U'A';
  if (c >= 0xFF10 && c <= 0xFF19) c = c - 0xFF10 + U'0';
  if ((c >= U'A' && c <= U'Z') || (c >= U'0' && c <= U'9')) return static_cast<char>(c);
  if (c >= U'a' && c <= U'z') return static_cast<char>(c - U'a' + U'A');
  return 0;
}

// Vehicle plates: a province character, a letter, an optional separator (· • - or a space) and
// 5 characters (6 for new-energy plates) of letters and digits with at least one digit, not
// followed by a further letter or digit. Kept: the province, the letter and the last 2.
std::string MaskPlates(std::string_view text) {
  const std::vector<CodePoint> cps = DecodeLenient(text);
  std::string out;
  size_t copied = 0;
  for (size_t i = 0; i + 6 < cps.size() + 1; ++i) {
    if (!IsProvince(cps[i].c) || i + 1 >= cps.size()) continue;
    const char letter = PlateChar(cps[i + 1].c);
    if (letter < 'A' || letter > 'Z') continue;
    size_t j = i + 2;
    if (j < cps.size() && (cps[j].c == 0xB7 || cps[j].c == 0x2022 || cps[j].c == U'-' ||
                           cps[j].c == U' ' || cps[j].c == 0x30FB)) {
      ++j;
    }
    size_t n = 0;
    bool digit = false;
    while (j + n < cps.size() && PlateChar(cps[j + n].c) != 0 && n < 7) {
      digit = digit || (PlateChar(cps[j + n].c) >= '0' && PlateChar(cps[j + n].c) <= '9');
      ++n;
    }
    if ((n != 5 && n != 6) || !digit) continue;
    out.append(text.substr(copied, cps[j].begin - copied));
    out += std::string(n - 2, '*');
    copied = cps[j + n - 2].begin;
    i = j + n - 1;
  }
  out.append(text.substr(copied));
  return out;
}

std::string MaskNumbers(std::string_view text);

}  // namespace

std::string MaskPii(std::string_view text) { return MaskPlates(MaskNumbers(text)); }

namespace {

std::string MaskNumbers(std::string_view text) {
  const std::vector<CodePoint> cps = DecodeLenient(text);
  std::string out;
  out.reserve(text.size());
  size_t copied = 0;  // bytes of text already written to out
  size_t i = 0;
  while (i < cps.size()) {
    if (DigitOf(cps[i].c) < 0 || DigitOf(cps[i].c) == 10) {
      ++i;
      continue;
    }
    // A run: digits with single separators between groups; an X ends it.
    std::vector<Element> run;
    int group = 0;
    size_t j = i;
    while (j < cps.size()) {
      const int d = DigitOf(cps[j].c);
      if (d >= 0) {
        run.push_back({d, j, group});
        ++j;
        if (d == 10) break;
      } else if (IsSeparator(cps[j].c) && j + 1 < cps.size() && DigitOf(cps[j + 1].c) >= 0 &&
                 DigitOf(cps[j + 1].c) <= 9) {
        ++group;
        ++j;
      } else {
        break;
      }
    }
    // Candidate starts: each group's first element, after a +86-style prefix, and right after a
    // previous match.
    size_t s = 0;
    while (s < run.size()) {
      Match m = MatchAt(run, s);
      const bool group_start = s == 0 || run[s].group != run[s - 1].group;
      if (m.kind == Kind::kNone && group_start) {
        for (size_t prefix : {2, 4}) {
          if (s + prefix >= run.size()) continue;
          const bool is86 = prefix == 2 ? (run[s].digit == 8 && run[s + 1].digit == 6)
                                        : (run[s].digit == 0 && run[s + 1].digit == 0 &&
                                           run[s + 2].digit == 8 && run[s + 3].digit == 6);
          if (!is86) continue;
          Match after = MatchAt(run, s + prefix);
          if (after.kind != Kind::kNone) {
            m = after;
            break;
          }
        }
      }
      // An ID number with a valid check character may begin inside this group, right after
      // other digits (an order number, a prefix): it wins over a match at the group's start
      // that does not end with the group.
      size_t next = s + 1;
      while (next < run.size() && run[next].group == run[next - 1].group) ++next;
      const size_t end = m.start + m.length;
      const bool clean =
          m.kind != Kind::kNone && (end == run.size() || run[end].group != run[end - 1].group);
      if (!clean) {
        size_t inner = s + 1;
        while (inner < next && !ValidIdAt(run, inner)) ++inner;
        if (inner < next) m = {Kind::kId, inner, 18};
      }
      if (m.kind != Kind::kNone) {
        const size_t first_byte = cps[run[m.start].cp].begin;
        const size_t last_byte = cps[run[m.start + m.length - 1].cp].end;
        out.append(text.substr(copied, first_byte - copied));
        out += Masked(run, m);
        copied = last_byte;
        s = m.start + m.length;
        continue;
      }
      s = next;
    }
    i = j;
  }
  out.append(text.substr(copied));
  return out;
}

}  // namespace
}  // namespace hotline
