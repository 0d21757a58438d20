// Digits as a speech recogniser writes them, shared by PII masking and the slot normalisers.
#pragma once

namespace hotline {

// 0-9 for an ASCII or full-width digit or a spoken Chinese digit (零〇洞 0, 一幺 1, 二两 2,
// 三…九); -1 for anything else.
int SpokenDigit(char32_t c);

}  // namespace hotline
