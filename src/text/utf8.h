// UTF-8 decoding with validation, and encoding. Code points are char32_t.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hotline::text {

// Decodes `s` into code points. Throws hotline::Error(kInvalidArgument) naming the byte offset on
// invalid UTF-8 (bad lead or continuation bytes, overlong forms, surrogates, > U+10FFFF, cut off).
void DecodeUtf8(std::string_view s, std::vector<char32_t>* out);
std::vector<char32_t> DecodeUtf8(std::string_view s);
// Returns an empty string when `s` is valid UTF-8, else a message naming the first bad byte.
std::string Utf8Problem(std::string_view s);

void AppendUtf8(char32_t cp, std::string* out);
std::string EncodeUtf8(const std::vector<char32_t>& cps);

// Byte offset of each code point in valid UTF-8 `s`, plus s.size() at the end (size n + 1), so
// code points [a, b) are bytes [offsets[a], offsets[b]).
std::vector<size_t> CodePointByteOffsets(std::string_view s);

}  // namespace hotline::text
