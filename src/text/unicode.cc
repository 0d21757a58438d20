#include "text/unicode.h"

#include <algorithm>
#include <unordered_map>

#include "text/unicode_tables.h"

namespace hotline::text {
namespace {

using namespace tables;  // NOLINT: generated table names only

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount;
constexpr int kSCount = kLCount * kNCount;

bool IsHangulSyllable(char32_t cp) { return cp >= kSBase && cp < kSBase + kSCount; }

struct AsciiClasses {
  CharClass cls[128];
  AsciiClasses() {
    for (int c = 0; c < 128; ++c) {
      cls[c] = CharClass::kOther;
      if (c < 32 || c == 127) cls[c] = CharClass::kControl;
      if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
          (c >= 123 && c <= 126))
        cls[c] = CharClass::kPunct;
    }
    cls[' '] = cls['\t'] = cls['\n'] = cls['\r'] = CharClass::kSpace;
  }
};

const Decomposition* FindDecomposition(char32_t cp) {
  const Decomposition* end = kDecompositions + kNumDecompositions;
  const Decomposition* it = std::lower_bound(
      kDecompositions, end, cp, [](const Decomposition& d, char32_t c) { return d.cp < c; });
  return it != end && it->cp == cp ? it : nullptr;
}

// (first << 21 | second) → composite, for primary composites; plus the set of code points that
// can be the second half of a composition (for MayNormalize).
struct Compositions {
  std::unordered_map<uint64_t, char32_t> pairs;
  std::vector<char32_t> seconds;  // sorted
  Compositions() {
    for (int i = 0; i < kNumDecompositions; ++i) {
      const Decomposition& d = kDecompositions[i];
      if (!d.composable) continue;
      pairs.emplace((uint64_t(d.a) << 21) | d.b, d.cp);
      seconds.push_back(d.b);
    }
    std::sort(seconds.begin(), seconds.end());
    seconds.erase(std::unique(seconds.begin(), seconds.end()), seconds.end());
  }
};

const Compositions& GetCompositions() {
  static const Compositions c;
  return c;
}

char32_t Compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (IsHangulSyllable(a) && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto& pairs = GetCompositions().pairs;
  auto it = pairs.find((uint64_t(a) << 21) | b);
  return it == pairs.end() ? 0 : it->second;
}

void Decompose(const Char& c, std::vector<Char>* out) {
  if (IsHangulSyllable(c.cp)) {
    const int s = int(c.cp - kSBase);
    out->push_back({kLBase + s / kNCount, c.start, c.end});
    out->push_back({kVBase + (s % kNCount) / kTCount, c.start, c.end});
    if (s % kTCount) out->push_back({kTBase + s % kTCount, c.start, c.end});
    return;
  }
  const Decomposition* d = c.cp >= 0xC0 ? FindDecomposition(c.cp) : nullptr;
  if (!d) {
    out->push_back(c);
    return;
  }
  Decompose({d->a, c.start, c.end}, out);
  if (d->b) Decompose({d->b, c.start, c.end}, out);
}

void DecomposeAndOrder(std::vector<Char>* chars) {
  std::vector<Char> out;
  out.reserve(chars->size() + 8);
  for (const Char& c : *chars) Decompose(c, &out);
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < out.size();) {
    if (CombiningClass(out[i].cp) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < out.size() && CombiningClass(out[j].cp) != 0) ++j;
    std::stable_sort(out.begin() + i, out.begin() + j, [](const Char& x, const Char& y) {
      return CombiningClass(x.cp) < CombiningClass(y.cp);
    });
    i = j;
  }
  chars->swap(out);
}

}  // namespace

CharClass Classify(char32_t cp) {
  static const AsciiClasses ascii;
  if (cp < 128) return ascii.cls[cp];
  if (cp >= 0x4E00 && cp <= 0x9FFF) return CharClass::kOther;  // CJK unified ideographs
  const ClassRange* end = kClassRanges + kNumClassRanges;
  const ClassRange* it = std::upper_bound(
      kClassRanges, end, cp, [](char32_t c, const ClassRange& r) { return c < r.start; });
  return static_cast<CharClass>((it - 1)->cls);
}

int Lower(char32_t cp, char32_t out[2]) {
  if (cp < 128) {
    out[0] = (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    return 1;
  }
  if (cp == 0x130) {
    out[0] = 'i';
    out[1] = 0x307;
    return 2;
  }
  const LowerRun* end = kLowerRuns + kNumLowerRuns;
  const LowerRun* it = std::upper_bound(
      kLowerRuns, end, cp, [](char32_t c, const LowerRun& r) { return c < r.start; });
  out[0] = cp;
  if (it != kLowerRuns) {
    const LowerRun& r = *(it - 1);
    if (cp <= r.end && (cp - r.start) % r.stride == 0) out[0] = char32_t(int32_t(cp) + r.delta);
  }
  return 1;
}

uint8_t CombiningClass(char32_t cp) {
  if (cp < 0x300) return 0;
  const CccRange* end = kCccRanges + kNumCccRanges;
  const CccRange* it = std::upper_bound(
      kCccRanges, end, cp, [](char32_t c, const CccRange& r) { return c < r.start; });
  if (it == kCccRanges) return 0;
  const CccRange& r = *(it - 1);
  return cp <= r.end ? r.ccc : 0;
}

bool MayNormalize(char32_t cp) {
  if (cp < 0xC0 || (cp >= 0x4E00 && cp <= 0x9FFF)) return false;
  if (IsHangulSyllable(cp) || (cp >= kLBase && cp < kTBase + kTCount)) return true;
  if (CombiningClass(cp) != 0 || FindDecomposition(cp)) return true;
  const auto& seconds = GetCompositions().seconds;
  return std::binary_search(seconds.begin(), seconds.end(), cp);
}

void ToNfd(std::vector<Char>* chars) { DecomposeAndOrder(chars); }

void ToNfc(std::vector<Char>* chars) {
  DecomposeAndOrder(chars);
  std::vector<Char>& s = *chars;
  if (s.empty()) return;
  // Canonical composition (the Unicode standard's reference algorithm).
  size_t starter = 0;
  int last_class = CombiningClass(s[0].cp);
  bool have_starter = last_class == 0;  // text starting with non-starters: they compose with nothing
  size_t out = 1;
  for (size_t i = 1; i < s.size(); ++i) {
    const Char c = s[i];
    const int cls = CombiningClass(c.cp);
    const char32_t composite = have_starter ? Compose(s[starter].cp, c.cp) : 0;
    if (composite && (last_class < cls || last_class == 0)) {
      s[starter].cp = composite;
      s[starter].start = std::min(s[starter].start, c.start);
      s[starter].end = std::max(s[starter].end, c.end);
      continue;
    }
    if (cls == 0) {
      starter = out;
      have_starter = true;
    }
    last_class = cls;
    s[out++] = c;
  }
  s.resize(out);
}

}  // namespace hotline::text
