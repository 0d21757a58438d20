// Caller input quoted back in error messages: bounded in size and PII-masked, so an error for a
// 4 MiB field does not carry the 4 MiB (nor a phone or ID number in clear).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace hotline {

inline constexpr size_t kEchoMaxCodePoints = 64;

// `input` masked (MaskPii) and cut at a code-point boundary after `max_code_points` code points;
// a cut one ends in "…" and its full size: "abc… (4194304 bytes)". Invalid UTF-8 bytes count one
// code point each and pass through.
std::string EchoInput(std::string_view input, size_t max_code_points = kEchoMaxCodePoints);

}  // namespace hotline
