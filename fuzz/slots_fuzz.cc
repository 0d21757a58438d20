// libFuzzer target: the slot parsers a caller's words go through, on arbitrary bytes: the
// normalisers (phone, ID number, time, amount, plate, order id), the dialog's act reader
// (corrections, digit runs), the address splitter (district, street, house number) and the RFC 3339
// reader. The first 4 bytes shift the reference time (so relative times and ID birth dates move);
// the rest is the text. Nothing may throw; the invariants below must hold for every input.
#include <cctype>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "base/pii.h"
#include "dialog/acts.h"
#include "dialog/operations.h"
#include "nlu/normalize/normalize.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant broken: %s\n", what);
    std::abort();
  }
}

bool AllOf(std::string_view s, const char* chars) {
  return s.find_first_not_of(chars) == std::string_view::npos;
}

constexpr const char* kDigits = "0123456789";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t shift;
  std::memcpy(&shift, data, 4);
  const std::string text(reinterpret_cast<const char*>(data + 4), size - 4);
  // 2026-12-01T08:00:00Z plus up to ~136 years.
  const auto ref = std::chrono::system_clock::from_time_t(1796112000) + std::chrono::seconds(shift);

  using namespace hotline::nlu;
  for (const char* type : {"phone", "id_number", "time", "amount", "plate_number", "order_id"}) {
    const Normalized n = NormalizeSlot(type, text, ref);
    if (!n.valid) {
      Check(!n.error.empty(), "an invalid value says why");
      // Errors go to logs and callers: no phone, ID number or plate in clear.
      Check(hotline::MaskPii(n.error) == n.error, "error carries no PII");
      continue;
    }
    Check(n.error.empty(), "a valid value has no error");
    const std::string_view t = type;
    if (t == "phone") Check(!n.value.empty() && AllOf(n.value, kDigits), "phone: digits");
    if (t == "id_number") {
      Check(n.value.size() == 18 && AllOf(n.value.substr(0, 17), kDigits) &&
                (std::isdigit(static_cast<unsigned char>(n.value[17])) || n.value[17] == 'X'),
            "id_number: 17 digits and a digit or X");
    }
    if (t == "amount") {
      Check(!n.value.empty() && AllOf(n.value, "0123456789.") &&
                n.value.find('.') == n.value.rfind('.') && n.value.front() != '.' &&
                n.value.back() != '.',
            "amount: a decimal number");
    }
    if (t == "order_id") {
      Check(n.value.size() >= 4 && n.value.size() <= 32 &&
                AllOf(n.value, "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
            "order_id: 4-32 upper-case letters and digits");
    }
    if (t == "plate_number") {
      Check(n.value.find_first_of(" -·abcdefghijklmnopqrstuvwxyz") == std::string::npos,
            "plate: upper case, no separators");
    }
  }

  using namespace hotline::dialog;
  const TurnActs acts = ReadActs(text);
  for (const Correction& c : acts.corrections) {
    Check(c.part.empty() || c.part == "last", "correction part");
  }
  for (const std::string& run : DigitRuns(text)) {
    Check(!run.empty(), "a digit run is not empty");
    Check(AllOf(run.substr(0, run.size() - 1), kDigits) &&
              (std::isdigit(static_cast<unsigned char>(run.back())) || run.back() == 'X' ||
               run.back() == 'x'),
          "a digit run holds digits (and an ID check character)");
  }
  (void)CpSubstr(text, shift % 64, shift % 64 + (shift >> 8) % 64);

  const OrderPlace place = ParseAddress(text);
  Check(AllOf(place.number, kDigits), "house number: digits");
  Check(place.number.empty() || !place.street.empty(), "a house number follows a street");

  std::chrono::system_clock::time_point when;
  if (ParseRfc3339(text, &when)) Check(text.size() >= 20, "RFC 3339 is at least 20 bytes");
  return 0;
}
