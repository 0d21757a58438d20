#include "dialog/acts.h"

#include <algorithm>
#include <regex>

#include "base/spoken_digits.h"

namespace hotline::dialog {
namespace {

std::u32string U32(const std::string& s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    char32_t cp = c;
    int n = 1;
    if (c >= 0xF0 && i + 3 < s.size() + 0) n = 4, cp = c & 0x07;
    else if (c >= 0xE0) n = 3, cp = c & 0x0F;
    else if (c >= 0xC0) n = 2, cp = c & 0x1F;
    if (i + n > s.size()) n = 1, cp = c;
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

std::string U8(const std::u32string& s) {
  std::string out;
  for (char32_t c : s) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

bool IsPunct(char32_t c) {
  static const std::u32string kPunct = U"，。？！、,.?!;；：:“”\"'‘’～~…（）()【】[] \t\r\n　-—";
  return kPunct.find(c) != std::u32string::npos;
}

enum ActKind {
  kAffirm, kWeakAffirm, kUrge, kDeny, kThanks, kGoodbye, kGreeting, kCancel, kNoMore, kDontKnow,
  kHuman, kSamePlace, kMore, kSwitch, kFiller
};

struct Phrase {
  std::u32string text;
  ActKind kind;
  bool boundary;  // must stand alone: not glued to other words ("对" but not "对面")
};

const std::vector<Phrase>& Lexicon() {
  static const std::vector<Phrase> lex = [] {
    std::vector<Phrase> v;
    auto add = [&](ActKind k, bool boundary, std::initializer_list<const char*> words) {
      for (const char* w : words) v.push_back({U32(w), k, boundary});
    };
    add(kAffirm, false,
        {"对的", "对对对", "对对", "是的", "是滴", "没错", "没问题", "正确", "好的", "好嘞", "好滴",
         "确认", "就这样吧", "就这样", "就这么办", "就这么着", "那就这样", "对头", "要得", "可以的",
         "是这样", "没毛病", "嗯对", "嗯是的", "嗯好", "okay", "OK", "ok", "Ok", "对啊", "对呀",
         "是啊", "是呀", "好啊", "好吧", "行啊", "行吧", "行的", "中嘞", "是是是", "对呗", "是呗", "好呗",
         "行呗", "嗯呐", "嗯哪", "是嘞", "对嘞", "得嘞", "可以可以", "没错没错", "啱啊", "啱", "系啊",
         "系嘅", "冇错", "好啲", "晓得了", "知道了", "明白了", "好的呀", "对的呀", "对滴", "是咯",
         "对咯", "好咯", "那好", "那行", "那就这样"});
    add(kAffirm, true, {"对", "好", "行", "是", "可以", "中", "成", "系", "得"});
    add(kWeakAffirm, true, {"嗯嗯", "嗯", "噢", "哦"});
    add(kUrge, false,
        {"麻烦你们快点处理", "麻烦您快点处理", "麻烦快点处理", "麻烦尽快处理", "麻烦你们尽快处理",
         "麻烦尽快", "麻烦快点", "麻烦你们快点", "麻烦你们尽快", "请尽快处理", "尽快处理",
         "尽快解决", "快点处理", "赶紧处理", "赶快处理", "快点解决", "赶紧派人", "快点派人",
         "尽快派人", "快点来修", "赶紧来修", "尽快来修", "抓紧处理", "麻烦你们了", "麻烦您了",
         "麻烦了", "辛苦你们了", "辛苦了", "辛苦你了", "快点", "尽快", "赶紧"});
    add(kDeny, false,
        {"不对不对", "不对", "不是的", "不是不是", "说错了", "我说错了", "搞错了", "弄错了",
         "记错了", "不正确", "有误", "错了", "不太对", "不是这样"});
    add(kDeny, true, {"不是", "没有", "不"});
    add(kThanks, false,
        {"谢谢你们", "谢谢你", "谢谢您", "谢谢啦", "谢谢啊", "谢谢了", "谢谢", "多谢", "感谢",
         "感谢你们", "非常感谢", "太感谢了", "谢了"});
    add(kGoodbye, false, {"再见", "拜拜", "挂了", "我挂了", "先挂了", "先这样", "就先这样"});
    add(kGreeting, false,
        {"喂你好", "你好你好", "你好", "您好", "喂喂喂", "喂喂", "在吗", "有人吗", "喂"});
    add(kCancel, false,
        {"算了算了", "算了吧", "算了", "不用了", "没事了", "没事儿了", "不需要了", "不要了", "不办了",
         "不反映了", "不投诉了", "不问了", "取消", "先不弄了", "不弄了"});
    add(kNoMore, false,
        {"没有了", "没有别的了", "没别的了", "没其他问题了", "没有其他问题了", "没有其他的了",
         "没其他的了", "没什么了", "没啥了", "没其他事了", "没有其他事了", "就这些", "就这些了",
         "没有别的事了", "没别的事了"});
    add(kDontKnow, false,
        {"不知道", "不清楚", "不记得", "记不清", "记不得", "忘了", "不晓得", "说不上来", "没注意",
         "没看清", "搞不清", "不太清楚", "不太知道", "叫不上来", "想不起来"});
    add(kHuman, false,
        {"转人工", "人工服务", "人工客服", "找人工", "接人工", "真人", "人工坐席", "要人工",
         "人工台"});
    add(kSamePlace, false,
        {"同一个地方", "一样的地址", "地址一样", "地址是一样的", "也是那里", "也是那儿", "还是那个地址",
         "同一个地址", "就是那里", "同一个小区", "也在那", "同一个位置", "一样的地方", "也是这个地址",
         "就是刚才那个地址", "刚才那个地址", "同一栋楼", "也是那个地方", "就在那"});
    add(kMore, false,
        {"还有一个事", "还有个事", "还有一件事", "还有一个问题", "还有个问题", "另外还有", "另外",
         "还有就是", "还有", "对了", "顺便", "再反映一个", "再说一个", "另一个"});
    add(kSwitch, false, {"其实是", "其实", "我是说", "我的意思是", "我想问的是", "我是想问"});
    add(kFiller, false,
        {"那个", "这个", "就是", "呃", "啊", "额", "唉", "哎", "嘿", "哈", "呀", "吧", "啦", "嘛",
         "呢", "哦哦", "噢噢", "然后", "就是说", "那啥", "这边"});
    // Longest first, so "对的" wins over "对" and "不是的" over "不是".
    std::stable_sort(v.begin(), v.end(),
                     [](const Phrase& a, const Phrase& b) { return a.text.size() > b.text.size(); });
    return v;
  }();
  return lex;
}

bool MatchesAt(const std::u32string& t, size_t i, const std::u32string& w) {
  return t.compare(i, w.size(), w) == 0;
}

bool AnyPhraseAt(const std::u32string& t, size_t i) {
  for (const auto& p : Lexicon())
    if (!p.boundary && MatchesAt(t, i, p.text)) return true;
  return false;
}

// Whether the text holds nothing but act phrases, fillers and punctuation.
bool ActsOnly(const std::u32string& t) {
  bool prev_boundary = true, any = false;
  for (size_t i = 0; i < t.size();) {
    if (IsPunct(t[i])) {
      prev_boundary = true;
      ++i;
      continue;
    }
    const Phrase* best = nullptr;
    for (const auto& p : Lexicon()) {
      if (!MatchesAt(t, i, p.text)) continue;
      if (p.boundary) {
        const size_t j = i + p.text.size();
        if (!prev_boundary || !(j >= t.size() || IsPunct(t[j]) || AnyPhraseAt(t, j))) continue;
      }
      best = &p;
      break;
    }
    if (!best) return false;
    any = true;
    i += best->text.size();
    prev_boundary = true;
  }
  return any;
}

const char* kSep = "(?:，|,|。|、|！|!|？|\\?|：|:|\\s)*";

std::string Trim(std::string v) {
  static const char* kEdges[] = {"，", ",", "。", "、", "！", "!", "？", "?", " ", "：", ":",
                                 "的", "啊", "吧", "呢", "哈", "呀", "了", "嘛", "哦"};
  for (bool changed = true; changed;) {
    changed = false;
    for (const char* e : kEdges) {
      const std::string es(e);
      if (v.size() >= es.size() && v.compare(v.size() - es.size(), es.size(), es) == 0) {
        v.erase(v.size() - es.size());
        changed = true;
      }
      if (es != "的" && es != "了" && v.size() >= es.size() && v.compare(0, es.size(), es) == 0) {
        v.erase(0, es.size());
        changed = true;
      }
    }
  }
  return v;
}

// Words that are not a wrong value but part of the correction itself ("我说错了" -> "我").
bool IsCorrectionNoise(const std::string& v) {
  static const std::vector<std::string> kNoise = {
      "",     "我",       "刚才",     "我刚才", "刚才我", "不对",   "不对我", "不是",  "的",
      "这个", "那个",     "对不起",   "不好意思", "哦",   "啊",     "嗯",     "刚刚", "我刚刚",
      "抱歉", "不对不对", "不是不是", "错了",   "刚才说的", "我刚才说的"};
  std::string s = StripPunct(v);
  for (const char* w : {"不对", "我", "刚才", "刚刚", "不好意思", "对不起", "哦", "嗯", "啊", "看", "念", "听", "记"}) {
    for (size_t p; (p = s.find(w)) != std::string::npos;) s.erase(p, std::string(w).size());
  }
  return s.empty() || std::find(kNoise.begin(), kNoise.end(), s) != kNoise.end();
}

// The value part of a correction: up to the acts that follow it ("是电子三路，对吧" -> 电子三路).
std::string CorrectionValue(const std::string& raw) {
  const std::u32string t = U32(raw);
  size_t end = t.size();
  for (size_t i = 1; i < t.size(); ++i) {
    if (IsPunct(t[i]) && ActsOnly(t.substr(i))) {
      end = i;
      break;
    }
  }
  return Trim(U8(t.substr(0, end)));
}

}  // namespace

size_t CodePoints(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string CpSubstr(const std::string& s, size_t start, size_t end) {
  const std::u32string t = U32(s);
  start = std::min(start, t.size());
  end = std::min(std::max(end, start), t.size());
  return U8(t.substr(start, end - start));
}

bool AllCjk(const std::string& s) {
  for (char32_t c : U32(s))
    if (c < 0x4E00 || c > 0x9FFF) return false;
  return !s.empty();
}

std::string StripPunct(const std::string& text) {
  std::u32string out;
  for (char32_t c : U32(text))
    if (!IsPunct(c)) out.push_back(c);
  return U8(out);
}

size_t FindWord(const std::string& text, const std::string& word) {
  const size_t star = word.find('*');
  if (star == std::string::npos) return word.empty() ? std::string::npos : text.find(word);
  const std::string a = word.substr(0, star), b = word.substr(star + 1);
  for (size_t at = text.find(a); at != std::string::npos; at = text.find(a, at + 1)) {
    const size_t from = at + a.size();
    const size_t bt = text.find(b, from);
    if (bt != std::string::npos && CodePoints(text.substr(from, bt - from)) <= 4) return at;
  }
  return std::string::npos;
}

std::string FindAny(const std::string& text, const std::vector<std::string>& words) {
  for (const auto& w : words)
    if (FindWord(text, w) != std::string::npos) return w;
  return "";
}

std::vector<std::string> DigitRuns(const std::string& text) {
  std::vector<std::string> runs;
  std::string cur;
  const std::u32string t = U32(text);
  for (size_t i = 0; i < t.size(); ++i) {
    const char32_t c = t[i];
    int d = SpokenDigit(c);
    if (c >= U'０' && c <= U'９') d = static_cast<int>(c - U'０');
    if (d >= 0) {
      cur += static_cast<char>('0' + d);
      continue;
    }
    if ((c == U'X' || c == U'x' || c == U'叉' || c == U'Ｘ') && cur.size() == 17) {
      // The check character ends an ID number: digits after it (a phone said next) are a new run.
      runs.push_back(cur + 'X');
      cur.clear();
      continue;
    }
    if ((c == U' ' || c == U'-' || c == U'—' || c == U'　') && !cur.empty()) continue;
    if (!cur.empty()) runs.push_back(cur);
    cur.clear();
  }
  if (!cur.empty()) runs.push_back(cur);
  return runs;
}

TurnActs ReadActs(const std::string& raw_text) {
  TurnActs a;
  std::string text = raw_text;
  // Corrections first: their words must not be read as plain denials or agreement.
  struct Pattern {
    std::regex re;
    int old_group, new_group;
    const char* part;
    bool deny;  // the pattern itself says the earlier value was wrong
  };
  static const std::vector<Pattern> kPatterns = [] {
    const std::string sep = kSep;
    std::vector<Pattern> p;
    auto add = [&](const std::string& re, int o, int n, const char* part, bool deny) {
      p.push_back({std::regex(re), o, n, part, deny});
    };
    add("(?:最后一位|最后一个数字|最后一个数|最后一个字|末位|最后那位|最后那个数)(?:数字)?" + sep +
            "(?:应该|其实)?(?:是|为|改成|改为)" + sep + "(.+)",
        0, 1, "last", false);
    add("不是(.+?)" + sep + "(?:而|应该|其实|我说的)?是(.+)", 1, 2, "", true);
    // "是赤岗北路，不是赤岗路": the right value first.
    // Group 1 is what comes before 是/叫 ("车牌号是粤B12348不是粤B12347", "我叫张伟，不叫张卫"):
    // it may name the slot.
    add("(.*?)(?:是|叫)(.+?)" + sep + "(?:而)?不(?:是|叫)(.+)", 3, 2, "", true);
    add("(.+?)(?:说错了|搞错了|弄错了|记错了|看错了|听错了|念错了|说错|错了)" + sep + "(?:应该|其实|我说的)?是(.+)", 1, 2,
        "", true);
    add("(?:不对|错了)" + sep + "(?:应该|其实)?是(.+)", 0, 1, "", true);
    add("(?:改成|改为|换成|更正为|更正成|更正一下|改一下|正确的是|准确地说是|准确的是|应该是|"
        "应该叫|其实是|其实叫)" + sep + "(?:是|叫)?" + sep + "(.+)",
        0, 1, "", false);
    // "不对，叫华美超市": a name said again after no.
    add("(?:不对|不是)" + sep + "(?:应该|其实)?叫" + sep + "(.+)", 0, 1, "", true);
    return p;
  }();
  for (const auto& p : kPatterns) {
    std::smatch m;
    if (!std::regex_search(text, m, p.re)) continue;
    // "…是Y不是X": the 是 must not be the end of a 不是 ("不是X，是Y" is matched above).
    const bool right_first = p.old_group == 3;
    if (right_first) {
      const std::string head = m[1].str();
      if (head.size() >= 3 && head.compare(head.size() - 3, 3, "不") == 0) continue;
    }
    Correction c;
    c.part = p.part;
    c.old_value = p.old_group ? Trim(m[p.old_group].str()) : "";
    if (IsCorrectionNoise(c.old_value)) c.old_value.clear();
    const std::string raw_new = m[p.new_group].str();
    c.new_value = CorrectionValue(raw_new);
    std::string tail;
    if (const size_t at = raw_new.find(c.new_value);
        !c.new_value.empty() && at != std::string::npos)
      tail = raw_new.substr(at + c.new_value.size());
    if (c.part == std::string("last")) {
      const std::u32string v = U32(c.new_value);
      c.new_value.clear();
      for (char32_t ch : v) {
        int d = SpokenDigit(ch);
        if (ch >= U'０' && ch <= U'９') d = static_cast<int>(ch - U'０');
        if (d >= 0) {
          c.new_value = std::string(1, static_cast<char>('0' + d));
          break;
        }
        if (ch == U'X' || ch == U'x' || ch == U'叉' || ch == U'Ｘ') {
          c.new_value = "X";
          break;
        }
      }
    }
    if (c.new_value.empty()) continue;
    {
      // The clause before the correction words: from the last punctuation of the prefix on.
      const std::u32string pre = U32(m.prefix().str() + (right_first ? m[1].str() : ""));
      size_t from = pre.size();
      while (from > 0 && !IsPunct(pre[from - 1])) --from;
      c.before = Trim(U8(pre.substr(from)));
    }
    a.corrections.push_back(c);
    a.deny = a.deny || p.deny;
    // The rest of the turn (before the correction, and after its value) is read as usual.
    text = m.prefix().str() + " " + tail;
    break;
  }

  const std::u32string t = U32(text);
  std::u32string content;
  bool prev_boundary = true;  // start, punctuation, or right after a phrase
  for (size_t i = 0; i < t.size();) {
    if (IsPunct(t[i])) {
      if (!content.empty() && content.back() != U' ') content.push_back(U' ');
      prev_boundary = true;
      ++i;
      continue;
    }
    const Phrase* best = nullptr;
    for (const auto& p : Lexicon()) {
      if (!MatchesAt(t, i, p.text)) continue;
      if (p.boundary) {
        const size_t j = i + p.text.size();
        const bool next_ok = j >= t.size() || IsPunct(t[j]) || AnyPhraseAt(t, j);
        if (!prev_boundary || !next_ok) continue;
      }
      if (p.kind == kFiller && !prev_boundary) continue;  // "这个" inside "这个小区" is kept below
      best = &p;
      break;
    }
    if (!best) {
      content.push_back(t[i]);
      prev_boundary = false;
      ++i;
      continue;
    }
    switch (best->kind) {
      case kAffirm: a.affirm = true; break;
      case kWeakAffirm: a.weak_affirm = true; break;
      case kUrge: a.urge = true; break;
      case kDeny: a.deny = true; break;
      case kThanks: a.thanks = true; break;
      case kGoodbye: a.goodbye = true; break;
      case kGreeting: a.greeting = true; break;
      case kCancel: a.cancel = true; break;
      case kNoMore: a.no_more = true; break;
      case kDontKnow: a.dont_know = true; break;
      case kHuman: a.human = true; break;
      case kSamePlace: a.same_place = true; break;
      case kMore: a.more = true; break;
      case kSwitch: a.switch_marker = true; break;
      case kFiller: break;
    }
    i += best->text.size();
    prev_boundary = true;
    if (!content.empty() && content.back() != U' ') content.push_back(U' ');
  }
  while (!content.empty() && content.back() == U' ') content.pop_back();
  while (!content.empty() && content.front() == U' ') content.erase(content.begin());
  a.content = U8(content);
  for (const auto& c : a.corrections) a.content += (a.content.empty() ? "" : " ") + c.new_value;
  // Garbage: nothing but interjections, or no letter, digit or CJK character at all.
  static const std::u32string kInterjections = U"嗯啊呃哦额唉哎嘿哈呀吧喂嗷噢呜诶欸咦哟嘞 ";
  bool any_word = false, only_interjections = true;
  for (char32_t c : U32(a.content)) {
    if ((c >= U'a' && c <= U'z') || (c >= U'A' && c <= U'Z') || (c >= U'0' && c <= U'9') ||
        (c >= 0x4E00 && c <= 0x9FFF))
      any_word = true;
    if (kInterjections.find(c) == std::u32string::npos) only_interjections = false;
  }
  // "嗯" alone is no act here: it may be agreement or a sound (the policy decides by stage).
  const bool any_act = a.affirm || a.urge || a.deny || a.thanks || a.goodbye ||
                       a.greeting || a.cancel || a.no_more || a.dont_know || a.human ||
                       a.same_place || a.more || a.switch_marker || !a.corrections.empty();
  a.noise = !any_act && (!any_word || only_interjections);
  if (a.noise) a.content.clear();
  return a;
}

}  // namespace hotline::dialog
