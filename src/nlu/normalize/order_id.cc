// Work-order ids: upper case, spoken digits, no whitespace or dashes (GD20261128001).
#include <string>

#include "nlu/normalize/normalize.h"
#include "nlu/normalize/text_util.h"

namespace hotline::nlu {

Normalized NormalizeOrderId(std::string_view text) {
  using internal::Invalid;
  auto prepared = internal::Prepare(text);
  if (!prepared) return Invalid(std::string(text), "order id is not valid UTF-8");
  std::string id;
  bool has_digit = false;
  for (char32_t c : *prepared) {
    if (internal::IsSpace(c) || internal::IsDash(c) || c == U'_') continue;
    const int d = internal::SpokenDigit(c);
    if (d >= 0) {
      id.push_back(static_cast<char>('0' + d));
      has_digit = true;
    } else if ((c >= U'a' && c <= U'z') || (c >= U'A' && c <= U'Z')) {
      id.push_back(static_cast<char>(internal::ToUpperAscii(c)));
    } else {
      return Invalid(internal::TrimmedRaw(text), "unexpected character in order id");
    }
  }
  if (id.empty()) return Invalid("", "empty order id");
  if (id.size() < 4 || id.size() > 32) {
    return Invalid(
        id, "order id must have 4 to 32 letters and digits, got " + std::to_string(id.size()));
  }
  if (!has_digit) return Invalid(id, "order id has no digits");
  Normalized n;
  n.value = id;
  return n;
}

}  // namespace hotline::nlu
