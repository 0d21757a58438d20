// Resident ID numbers (GB 11643-1999): 6-digit region, 8-digit birth date, 3-digit sequence (odd:
// male), check digit (ISO 7064 MOD 11-2).
#include <string>
#include <vector>

#include "nlu/normalize/calendar.h"
#include "nlu/normalize/normalize.h"
#include "nlu/normalize/text_util.h"

namespace hotline::nlu {
namespace {

using internal::Invalid;

char CheckDigit(const std::string& first17) {
  static constexpr int kWeights[17] = {7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2};
  static constexpr char kCheck[11] = {'1', '0', 'X', '9', '8', '7', '6', '5', '4', '3', '2'};
  int sum = 0;
  for (int i = 0; i < 17; ++i) sum += (first17[i] - '0') * kWeights[i];
  return kCheck[sum % 11];
}

bool KnownProvince(int code) {
  static constexpr int kCodes[] = {11, 12, 13, 14, 15, 21, 22, 23, 31, 32, 33, 34,
                                   35, 36, 37, 41, 42, 43, 44, 45, 46, 50, 51, 52,
                                   53, 54, 61, 62, 63, 64, 65, 71, 81, 82, 83};
  for (int c : kCodes) {
    if (c == code) return true;
  }
  return false;
}

int Num(const std::string& s, size_t pos, size_t len) { return std::stoi(s.substr(pos, len)); }

}  // namespace

Normalized NormalizeIdNumber(std::string_view text,
                             std::optional<std::chrono::system_clock::time_point> reference_time) {
  auto prepared = internal::Prepare(text);
  if (!prepared) return Invalid(std::string(text), "ID number is not valid UTF-8");
  const std::u32string& s = *prepared;
  if (s.empty()) return Invalid("", "empty ID number");
  std::string id;
  for (char32_t c : s) {
    const int d = internal::SpokenDigit(c);
    if (d >= 0) {
      id.push_back(static_cast<char>('0' + d));
    } else if (c == U'X' || c == U'x' || c == U'叉') {
      id.push_back('X');
    } else if (internal::IsSpace(c) || internal::IsDash(c)) {
      continue;
    } else {
      return Invalid(internal::TrimmedRaw(text), "unexpected character in ID number");
    }
  }
  const size_t x = id.find('X');
  if (x != std::string::npos && x + 1 != id.size()) {
    return Invalid(id, "X may only be the last (check) character of an ID number");
  }
  Normalized n;
  if (id.size() == 15 && x == std::string::npos) {
    // First-generation number: YYMMDD birth date in the 1900s, no check digit. Upgrade it.
    std::string first17 = id.substr(0, 6) + "19" + id.substr(6);
    id = first17 + CheckDigit(first17);
    n.extra["legacy15"] = "true";
  } else if (id.size() != 18) {
    return Invalid(id, "expected 18 characters (17 digits and a check digit), got " +
                           std::to_string(id.size()));
  }
  n.value = id;
  std::vector<std::string> errors;
  if (!KnownProvince(Num(id, 0, 2))) errors.push_back("unknown province code");
  const int year = Num(id, 6, 4), month = Num(id, 10, 2), day = Num(id, 12, 2);
  if (year < 1900 || !internal::IsValidDate(year, month, day)) {
    errors.push_back("birth date is not a valid date");
  } else if (reference_time && internal::DaysFromCivil(year, month, day) >
                                   internal::ShanghaiLocalSeconds(*reference_time) / 86400) {
    errors.push_back("birth date is in the future");
  } else {
    n.extra["birth_date"] = internal::FormatDate(internal::DaysFromCivil(year, month, day));
  }
  n.extra["sex"] = (id[16] - '0') % 2 == 1 ? "male" : "female";
  if (CheckDigit(id.substr(0, 17)) != id[17]) errors.push_back("check digit mismatch");
  if (!errors.empty()) {
    n.valid = false;
    for (size_t i = 0; i < errors.size(); ++i) n.error += (i ? "; " : "") + errors[i];
  }
  return n;
}

}  // namespace hotline::nlu
