// Phone numbers: spoken or written digits → digits only, classified as mobile, landline, service.
#include <string>

#include "nlu/normalize/normalize.h"
#include "nlu/normalize/text_util.h"

namespace hotline::nlu {
namespace {

using internal::Invalid;

bool IsServiceNumber(const std::string& d) {
  if (d.size() == 3) {
    return d == "110" || d == "112" || d == "114" || d == "119" || d == "120" || d == "122";
  }
  // 123xx government hotlines (12345, 12315, 12333, ...), 95xxx/96xxx enterprise service lines.
  if (d.size() == 5) return d.starts_with("123") || d.starts_with("95") || d.starts_with("96");
  if (d.size() == 10) return d.starts_with("400") || d.starts_with("800");
  return false;
}

Normalized Classify(const std::string& d) {
  Normalized n;
  n.value = d;
  const size_t len = d.size();
  if (len == 11 && d[0] == '1') {
    if (d[1] < '3') {
      n.valid = false;
      n.error = "11-digit mobile numbers start with 13 to 19";
      return n;
    }
    n.extra["kind"] = "mobile";
    return n;
  }
  if (IsServiceNumber(d)) {
    n.extra["kind"] = "service";
    return n;
  }
  if (len >= 2 && d[0] == '0') {
    n.extra["kind"] = "landline";
    if (d[1] == '0') {
      n.valid = false;
      n.error = "international numbers (00 prefix) other than +86 are not supported";
      return n;
    }
    // Area codes: 010 and 020-029 have 3 digits and 8-digit local numbers; all others 4 digits
    // with 7- or 8-digit local numbers.
    const bool short_code = d[1] == '1' || d[1] == '2';
    const size_t code_len = short_code ? 3 : 4;
    if (d[1] == '1' && len >= 3 && d[2] != '0') {
      n.valid = false;
      n.error = "unknown area code (01x other than 010)";
      return n;
    }
    if (len <= code_len) {
      n.valid = false;
      n.error = "landline has an area code but no local number";
      return n;
    }
    const size_t local = len - code_len;
    const bool local_ok = short_code ? local == 8 : (local == 7 || local == 8);
    if (!local_ok) {
      n.valid = false;
      n.error = std::string("a landline with a ") + (short_code ? "3" : "4") +
                "-digit area code needs a " + (short_code ? "8" : "7 or 8") +
                "-digit local number, got " + std::to_string(local) + " digits";
      return n;
    }
    if (d[code_len] == '0') {
      n.valid = false;
      n.error = "local landline numbers do not start with 0";
      return n;
    }
    n.extra["area_code"] = d.substr(0, code_len);
    return n;
  }
  if ((len == 7 || len == 8) && d[0] >= '2') {
    n.extra["kind"] = "local";
    n.valid = false;
    n.error = "local landline number without an area code";
    return n;
  }
  n.valid = false;
  n.error = "expected an 11-digit mobile or a landline with area code, got " + std::to_string(len) +
            " digits";
  return n;
}

}  // namespace

Normalized NormalizePhone(std::string_view text) {
  auto prepared = internal::Prepare(text);
  if (!prepared) return Invalid(std::string(text), "phone number is not valid UTF-8");
  const std::u32string& s = *prepared;
  if (s.empty()) return Invalid("", "empty phone number");
  std::string digits, extension;
  bool plus = false, in_extension = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char32_t c = s[i];
    const int d = internal::SpokenDigit(c);
    if (d >= 0) {
      (in_extension ? extension : digits).push_back(static_cast<char>('0' + d));
    } else if (c == U'+' && digits.empty() && !plus) {
      plus = true;
    } else if (internal::IsSpace(c) || internal::IsDash(c) || c == U'(' || c == U')') {
      continue;
    } else if (!in_extension && !digits.empty() &&
               (c == U'转' || internal::MatchAt(s, i, U"分机"))) {
      in_extension = true;
      if (c == U'分') ++i;
    } else {
      return Invalid(internal::TrimmedRaw(text), "unexpected character in phone number");
    }
  }
  if (digits.empty()) return Invalid(internal::TrimmedRaw(text), "no digits in phone number");
  if (in_extension && extension.empty()) {
    return Invalid(internal::TrimmedRaw(text), "extension (转) without digits");
  }
  bool country = false;
  if (plus) {
    if (!digits.starts_with("86")) {
      return Invalid(digits, "only Chinese numbers (+86) are supported");
    }
    digits.erase(0, 2);
    country = true;
  } else if (digits.starts_with("0086")) {
    digits.erase(0, 4);
    country = true;
  } else if (digits.size() == 13 && digits.starts_with("861") && digits[3] >= '3') {
    digits.erase(0, 2);  // 86 + an 11-digit mobile, said without the plus
  }
  if (country && !digits.empty() && digits[0] != '0' &&
      !(digits.size() == 11 && digits[0] == '1' && digits[1] >= '3')) {
    digits.insert(digits.begin(), '0');  // +86 10 1234 5678 → 010 1234 5678
  }
  Normalized n = Classify(digits);
  if (!extension.empty()) n.extra["extension"] = extension;
  return n;
}

}  // namespace hotline::nlu
