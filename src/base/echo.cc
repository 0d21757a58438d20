#include "base/echo.h"

#include "base/pii.h"

namespace hotline {
namespace {

// Byte offset just after the first `n` code points of `s`: a lead byte with up to 3
// continuation bytes is one; any other byte (a stray continuation byte included) is one.
size_t PrefixBytes(std::string_view s, size_t n) {
  size_t i = 0;
  for (size_t cp = 0; cp < n && i < s.size(); ++cp) {
    const bool lead = (static_cast<unsigned char>(s[i]) & 0xC0) == 0xC0;
    ++i;
    for (int k = 0; lead && k < 3 && i < s.size() &&
                    (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80;
         ++k) {
      ++i;
    }
  }
  return i;
}

}  // namespace

std::string EchoInput(std::string_view input, size_t max_code_points) {
  // Mask a bounded prefix, with slack so a number straddling the cut is still seen whole; the
  // masked text is cut again (masking changes lengths).
  const size_t slack = PrefixBytes(input, max_code_points + 64);
  const std::string masked = MaskPii(input.substr(0, slack));
  const size_t cut = PrefixBytes(masked, max_code_points);
  if (cut == masked.size() && slack == input.size()) return masked;
  return masked.substr(0, cut) + "\u2026 (" + std::to_string(input.size()) + " bytes)";
}

}  // namespace hotline
