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

}  // namespace

std::string MaskPii(std::string_view text) {
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
      if (m.kind != Kind::kNone) {
        const size_t first_byte = cps[run[m.start].cp].begin;
        const size_t last_byte = cps[run[m.start + m.length - 1].cp].end;
        out.append(text.substr(copied, first_byte - copied));
        out += Masked(run, m);
        copied = last_byte;
        s = m.start + m.length;
        continue;
      }
      // Next group start.
      ++s;
      while (s < run.size() && run[s].group == run[s - 1].group) ++s;
    }
    i = j;
  }
  out.append(text.substr(copied));
  return out;
}

}  // namespace hotline
