#include "base/spoken_digits.h"

namespace hotline {

int SpokenDigit(char32_t c) {
  if (c >= U'0' && c <= U'9') return static_cast<int>(c - U'0');
  if (c >= 0xFF10 && c <= 0xFF19) return static_cast<int>(c - 0xFF10);
  switch (c) {
    case U'零':
    case U'〇':
    case U'洞':
      return 0;
    case U'一':
    case U'幺':
      return 1;
    case U'二':
    case U'两':
      return 2;
    case U'三':
      return 3;
    case U'四':
      return 4;
    case U'五':
      return 5;
    case U'六':
      return 6;
    case U'七':
      return 7;
    case U'八':
      return 8;
    case U'九':
      return 9;
    default:
      return -1;
  }
}

}  // namespace hotline
