// PII masking for logs and error messages: every log line and error text that may carry caller
// input goes through MaskPii, so no phone or ID number is ever written in clear.
#pragma once

#include <string>
#include <string_view>

namespace hotline {

// Returns text with personal numbers and vehicle plates masked, the rest byte for byte unchanged:
//   11-digit mobiles 1[3-9]…           → first 3 and last 4 kept:  138****5678
//   18-character ID numbers (17 digits + digit or X) → first 6 and last 4 kept: 110105********1234
//   landlines with area code (0 + 10 or 11 digits) → first 3 and last 2 kept: 010******78
//   an ID number inside a longer digit run, when its check character is right (GB 11643)
//   vehicle plates (province, letter, 5 or 6 letters/digits with a digit) → 京A***45
// Numbers are found also when written with single spaces or dashes between digit groups
// (138 1234 5678, 010-12345678), in full-width digits, or as spoken Chinese digits
// (幺三八…, 零〇洞 0, 一幺 1, 二两 2, 三…九; 叉 as the ID check character); a masked number is
// written with ASCII digits and without its separators. A +86/86/0086 prefix stays.
// Matches start at a digit group (after a non-digit or a separator); shorter numbers (service
// numbers such as 12345, 7-8 digit local numbers, amounts, dates) and digit strings of other shapes
// stay unchanged. Invalid UTF-8 bytes are passed through. Erring on the side of masking: a 12-digit
// string that begins with a mobile number has its first 11 digits masked.
std::string MaskPii(std::string_view text);

}  // namespace hotline
