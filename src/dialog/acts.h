// Dialog acts read from the caller's words by rule, independent of the NLU model: agreement,
// denial, thanks, goodbye, cancelling, corrections ("不是X，是Y", "X说错了，是Y", "改成Y",
// "最后一位是五"), "I don't know", "same place as before", "there is one more thing", noise.
// A turn may carry several ("对的，谢谢，再见"). Pure functions; no configuration.
#pragma once

#include <string>
#include <vector>

namespace hotline::dialog {

struct Correction {
  std::string old_value;  // what was wrong, when named ("不是电子二路…" -> 电子二路); "" otherwise
  std::string new_value;  // the right value, stripped of the correction words
  // "" for a whole value; "last" when only the last character was corrected ("最后一位是五":
  // new_value is that one character, spoken digits already read as a digit).
  std::string part;
  // The words just before the correction in the same clause ("门牌号改一下，是18号" -> 门牌号):
  // they may name the slot.
  std::string before;
};

struct TurnActs {
  bool affirm = false;       // 对 / 好 / 行 / 就这样 / 麻烦快点处理 ...
  bool weak_affirm = false;  // "嗯" alone: agreement only when nothing else was said
  bool urge = false;         // 麻烦快点处理 / 尽快 (also counts as agreement to a read-back)
  bool deny = false;         // 不对 / 不是 / 错了
  bool thanks = false, goodbye = false, greeting = false;
  bool cancel = false;     // 算了 / 不用了 / 没事了
  bool no_more = false;    // 没有了 / 没别的了 (to "anything else?")
  bool dont_know = false;  // 不知道 / 记不清
  bool human = false;      // 转人工
  bool same_place = false; // 同一个地方 / 地址一样
  bool more = false;       // 还有 / 另外 / 对了: a further problem follows
  bool switch_marker = false;  // 其实 / 我是说: what follows replaces what was said
  std::vector<Correction> corrections;
  // The words left when act phrases, fillers and punctuation are taken out ("" for a turn of
  // acts only).
  std::string content;
  // Nothing but fillers, interjections ("嗯" included), punctuation or garbage: no words at all.
  bool noise = false;
};

TurnActs ReadActs(const std::string& text);

// Text without ASCII/CJK punctuation and spaces.
std::string StripPunct(const std::string& text);
// Code points of a UTF-8 string.
size_t CodePoints(const std::string& s);
// Code points [start, end) of a UTF-8 string (clamped to its length).
std::string CpSubstr(const std::string& s, size_t start, size_t end);
// Whether every code point is a CJK ideograph.
bool AllCjk(const std::string& s);
// Where a keyword occurs in text (byte offset), npos when it does not. "A*B" matches A followed by
// B with at most 4 characters between them ("电梯*坏" finds 电梯坏了 and 电梯也坏了).
size_t FindWord(const std::string& text, const std::string& word);
// The first keyword of `words` found in text (FindWord), "" when none.
std::string FindAny(const std::string& text, const std::vector<std::string>& words);
// Runs of digits in the text, spoken Chinese digits and full-width digits read as ASCII ones
// ("幺三八" -> 138); an X/x/叉 right after 17 digits is kept (ID check character) and ends the
// run. Separators (spaces, dashes) inside a run are skipped.
std::vector<std::string> DigitRuns(const std::string& text);

}  // namespace hotline::dialog
