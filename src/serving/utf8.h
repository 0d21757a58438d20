// UTF-8 checks done at the service edge, before a text can reach a batch shared with other
// callers' requests.
#pragma once

#include <cstddef>
#include <string_view>

namespace hotline::serving {

// True when `s` is well-formed UTF-8 (no overlongs, surrogates or code points above U+10FFFF).
// On failure *bad_offset (when given) is the byte offset of the first ill-formed sequence.
bool IsValidUtf8(std::string_view s, size_t* bad_offset = nullptr);
// Code points in a valid UTF-8 string (lead bytes counted; garbage counts one per byte).
size_t CountCodePoints(std::string_view s);

}  // namespace hotline::serving
