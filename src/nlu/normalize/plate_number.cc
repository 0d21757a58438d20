// Licence plates (GA 36): province abbreviation, issuing-authority letter, then 5 characters
// (regular), 6 (new energy) or 4 plus a special suffix (学 警 挂 领 使 港 澳).
#include <string>

#include "nlu/normalize/normalize.h"
#include "nlu/normalize/text_util.h"

namespace hotline::nlu {
namespace {

using internal::Invalid;

// The 31 provincial-level divisions of the mainland.
constexpr std::u32string_view kProvinces =
    U"京津沪渝冀豫云辽黑湘皖鲁新苏浙赣鄂桂甘晋蒙陕吉闽贵粤青藏川宁琼";
constexpr std::u32string_view kSpecialSuffixes = U"学警挂领使港澳";

bool IsLetter(char32_t c) { return c >= U'A' && c <= U'Z'; }
bool IsDigit(char32_t c) { return c >= U'0' && c <= U'9'; }
bool IsAlnum(char32_t c) { return IsLetter(c) || IsDigit(c); }
bool IsSeparator(char32_t c) {
  return internal::IsSpace(c) || internal::IsDash(c) || c == U'·' || c == U'•' || c == U'.' ||
         c == U'・' || c == U'‧' || c == U'。';
}

}  // namespace

Normalized NormalizePlateNumber(std::string_view text) {
  auto prepared = internal::Prepare(text);
  if (!prepared) return Invalid(std::string(text), "plate number is not valid UTF-8");
  std::u32string p;
  for (char32_t c : *prepared) {
    if (IsSeparator(c)) continue;
    const int d = internal::SpokenDigit(c);
    if (d >= 0) {
      p.push_back(U'0' + d);
    } else if ((c >= U'a' && c <= U'z') || IsLetter(c)) {
      p.push_back(internal::ToUpperAscii(c));
    } else if (p.empty() ? (c >= 0x4E00 && c <= 0x9FFF)  // checked against kProvinces below
                         : kSpecialSuffixes.find(c) != std::u32string_view::npos) {
      p.push_back(c);
    } else {
      return Invalid(internal::TrimmedRaw(text), "unexpected character in plate number");
    }
  }
  const std::string value = internal::EncodeUtf8(p);
  if (p.empty()) return Invalid("", "empty plate number");
  if (kProvinces.find(p[0]) == std::u32string_view::npos) {
    return Invalid(value, "plate number must start with a province abbreviation (京, 粤, ...)");
  }
  if (p.size() < 2 || !IsLetter(p[1])) {
    return Invalid(value, "the second character of a plate must be the authority letter A-Z");
  }
  const std::u32string_view rest = std::u32string_view(p).substr(2);
  for (char32_t c : rest) {
    if (c == U'I' || c == U'O') return Invalid(value, "plates do not use the letters I and O");
  }
  auto all = [](std::u32string_view v, bool (*pred)(char32_t)) {
    for (char32_t c : v) {
      if (!pred(c)) return false;
    }
    return true;
  };
  Normalized n;
  n.value = value;
  if (rest.size() == 5 && all(rest, IsAlnum)) {
    n.extra["kind"] = "regular";
    return n;
  }
  if (rest.size() == 5 && all(rest.substr(0, 4), IsAlnum) &&
      kSpecialSuffixes.find(rest[4]) != std::u32string_view::npos) {
    n.extra["kind"] = "special";
    return n;
  }
  if (!all(rest, IsAlnum)) return Invalid(value, "special plate suffix in the wrong place");
  if (rest.size() == 6) {
    // Small new-energy: energy letter (A-K without I; D/F the classic ones), then one letter or
    // digit, then 4 digits. Large new-energy: 5 digits then D or F.
    const bool small =
        std::u32string_view(U"ABCDEFGHJK").find(rest[0]) != std::u32string_view::npos &&
        IsAlnum(rest[1]) && all(rest.substr(2), IsDigit);
    const bool large = all(rest.substr(0, 5), IsDigit) && (rest[5] == U'D' || rest[5] == U'F');
    if (small || large) {
      n.extra["kind"] = "new_energy";
      return n;
    }
    return Invalid(value,
                   "an 8-character (new-energy) plate needs D/F-type energy letter and digits");
  }
  return Invalid(
      value, "expected 7 characters (8 for new-energy plates), got " + std::to_string(p.size()));
}

}  // namespace hotline::nlu
