#include "text/utf8.h"

#include <cstdio>

#include "base/error.h"

namespace hotline::text {
namespace {

// Decodes one code point at s[i]; returns its byte length or 0 when invalid (why in *why).
int DecodeOne(std::string_view s, size_t i, char32_t* cp, const char** why) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  int len;
  char32_t min;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, min = 0x80, *cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, min = 0x800, *cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, min = 0x10000, *cp = b0 & 0x07;
  } else {
    *why = (b0 & 0xC0) == 0x80 ? "unexpected continuation byte" : "invalid lead byte";
    return 0;
  }
  if (i + len > s.size()) {
    *why = "sequence cut off at the end of the text";
    return 0;
  }
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) {
      *why = "missing continuation byte";
      return 0;
    }
    *cp = (*cp << 6) | (b & 0x3F);
  }
  if (*cp < min) {
    *why = "overlong encoding";
    return 0;
  }
  if (*cp >= 0xD800 && *cp <= 0xDFFF) {
    *why = "encoded surrogate";
    return 0;
  }
  if (*cp > 0x10FFFF) {
    *why = "code point above U+10FFFF";
    return 0;
  }
  return len;
}

std::string Problem(std::string_view s, size_t i, const char* why) {
  char hex[8];
  std::snprintf(hex, sizeof(hex), "0x%02X", static_cast<unsigned char>(s[i]));
  return "invalid UTF-8 at byte " + std::to_string(i) + " (" + hex + "): " + why;
}

}  // namespace

void DecodeUtf8(std::string_view s, std::vector<char32_t>* out) {
  out->clear();
  out->reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    if (b0 < 0x80) {  // ASCII fast path
      out->push_back(b0);
      ++i;
      continue;
    }
    char32_t cp;
    const char* why = "";
    const int n = DecodeOne(s, i, &cp, &why);
    if (n == 0) throw Error(Problem(s, i, why), Code::kInvalidArgument);
    out->push_back(cp);
    i += n;
  }
}

std::vector<char32_t> DecodeUtf8(std::string_view s) {
  std::vector<char32_t> out;
  DecodeUtf8(s, &out);
  return out;
}

std::string Utf8Problem(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    char32_t cp;
    const char* why = "";
    const int n = DecodeOne(s, i, &cp, &why);
    if (n == 0) return Problem(s, i, why);
    i += n;
  }
  return {};
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string EncodeUtf8(const std::vector<char32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) AppendUtf8(cp, &out);
  return out;
}

std::vector<size_t> CodePointByteOffsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) offsets.push_back(i);
  }
  offsets.push_back(s.size());
  return offsets;
}

}  // namespace hotline::text
