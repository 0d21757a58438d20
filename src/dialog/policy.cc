#include "dialog/policy.h"

#include <algorithm>
#include <ctime>
#include <map>
#include <regex>

#include "base/error.h"
#include "base/pii.h"
#include "nlu/normalize/normalize.h"
#include "text/utf8.h"

namespace hotline::dialog {
namespace {

bool Contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// Free-text slot types a caller may answer with a bare phrase the model does not span.
bool IsFreeText(const std::string& type) {
  return type == "address" || type == "organization" || type == "item" || type == "person_name";
}

// Strips what a caller says around a bare value: fillers and "是/在" in front, particles and
// punctuation behind. Returns "" when nothing is left.
std::string StripBareValue(std::string t) {
  static const char* kPrefixes[] = {"嗯",   "呃",     "啊",   "哦",   "那个", "这个",
                                    "就是", "我们家", "我家", "我们", "我",   "在",
                                    "是",   "叫",     "那家", "这家", "，",   ",",
                                    " ",    "。"};
  static const char* kSuffixes[] = {"。", "，", ",",  "？", "?",    "！",   "!",    " ",   "的",
                                    "啊", "嘛", "呢", "吧", "这边", "那边", "这里", "那里"};
  for (bool changed = true; changed;) {
    changed = false;
    for (const char* p : kPrefixes) {
      const std::string ps(p);
      if (t.size() >= ps.size() && t.compare(0, ps.size(), ps) == 0) {
        t.erase(0, ps.size());
        changed = true;
      }
    }
    for (const char* p : kSuffixes) {
      const std::string ps(p);
      if (t.size() >= ps.size() && t.compare(t.size() - ps.size(), ps.size(), ps) == 0) {
        t.erase(t.size() - ps.size());
        changed = true;
      }
    }
  }
  return t;
}

// Whether a bare phrase plausibly is a value of this free-text type: an organisation ends like
// one (公司, 餐厅, 超市, ...), an address like one (路, 号, 小区, ...). Used to read a reply to a
// pending question as that value even when the model, which sees the phrase alone, files it
// under some business intent (e.g. "好味道餐厅" read as air pollution).
bool LooksLike(const std::string& type, const std::string& v) {
  auto ends = [&](std::initializer_list<const char*> suffixes) {
    for (const char* x : suffixes) {
      const std::string sx(x);
      if (v.size() > sx.size() && v.compare(v.size() - sx.size(), sx.size(), sx) == 0) return true;
    }
    return false;
  };
  if (type == "organization") {
    return ends({"公司", "餐厅", "饭店", "酒店",   "酒楼", "超市", "商场", "店", "医院",
                 "诊所", "门诊", "学校", "幼儿园", "中心", "集团", "厂",   "馆", "银行",
                 "物业", "机构", "健身", "培训",   "药房", "局",   "院",   "所"});
  }
  if (type == "district") return ends({"区", "县", "市", "新区"}) && CodePoints(v) <= 6;
  if (type == "address") {
    return ends({"路", "街", "巷", "道", "号", "小区", "栋", "楼", "村", "苑", "园", "大厦", "广场",
                 "单元", "室", "社区", "门口", "路口"});
  }
  return false;
}

// Whether a place or organisation value only points at one without naming it: "一家店",
// "这个小区", "那家公司", "某超市". Such a value is no answer to "which one?", so it is not taken.
bool IsVagueReference(const std::string& type, const std::string& v) {
  if (type != "organization" && type != "address") return false;
  const std::vector<char32_t> cps = text::DecodeUtf8(v);
  const std::u32string t(cps.begin(), cps.end());
  static const std::u32string kPointers = U"一这那某哪有个";
  static const std::u32string kMeasures = U"家个间所座条栋处";
  size_t i = 0;
  if (i < t.size() && kPointers.find(t[i]) != std::u32string::npos) ++i;
  else return false;
  while (i < t.size() && kMeasures.find(t[i]) != std::u32string::npos) ++i;
  static const std::vector<std::u32string> kGeneric = {
      U"店", U"商店", U"小店", U"公司", U"超市", U"单位", U"厂", U"工厂", U"饭店", U"餐馆", U"餐厅",
      U"小区", U"地方", U"学校", U"医院", U"药店", U"商场", U"酒店", U"路", U"街", U"门店",
      U"网店", U"培训机构", U"机构", U"楼", U"诊所", U"企业", U"工地", U"市场"};
  const std::u32string rest = t.substr(i);
  return std::find(kGeneric.begin(), kGeneric.end(), rest) != kGeneric.end();
}

// A work-order id in the caller's words: "WO20261201-000123", "wo 20261201 000123", digits only.
// The model's spans tend to break at the dash, so the text itself is read. Returns the id as the
// order_id normaliser writes it (upper case, no dash), "" when there is none.
std::string OrderIdInText(const std::string& text, std::string* matched) {
  static const std::regex re("([Ww][Oo])?\\s*([0-9]{8})\\s*(?:-|_|－|—|杠)?\\s*([0-9]{6})");
  std::smatch m;
  if (!std::regex_search(text, m, re)) return "";
  *matched = m[0].str();
  return "WO" + m[2].str() + m[3].str();
}

// "12月1日10:00" in Asia/Shanghai, for a created_at in RFC 3339 UTC ("" when unreadable).
std::string SpokenTime(const std::string& rfc3339) {
  std::tm tm{};
  if (!strptime(rfc3339.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm)) return rfc3339;
  std::time_t t = timegm(&tm) + nlu::kShanghaiUtcOffsetSeconds;
  gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%d月%d日%02d:%02d", tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                tm.tm_min);
  return buf;
}

bool StartsWith(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}

// How a slot type is named to the caller and in the handler's text.
std::string SlotZh(const std::string& type) {
  static const std::map<std::string, std::string> kNames = {
      {"address", "具体地址"},   {"organization", "单位名称"}, {"bus_line", "公交线路"},
      {"plate_number", "车牌号"}, {"id_number", "身份证号"},    {"order_id", "工单编号"},
      {"district", "所在区"},     {"phone", "联系电话"},        {"person_name", "姓名"},
      {"time", "发生时间"},       {"amount", "金额"},           {"item", "事项"}};
  auto it = kNames.find(type);
  return it == kNames.end() ? type : it->second;
}

}  // namespace

std::vector<std::string> Policy::RuleIntents(const nlu::Taxonomy& taxonomy,
                                             const DialogRules& rules) {
  std::vector<std::string> out;
  for (const auto& i : taxonomy.intents) {
    bool rule = StartsWith(i.id, "emergency");
    for (const auto& e : rules.emergencies) rule = rule || Contains(e.intents, i.id);
    for (const auto& p : rules.legal_intent_prefixes) rule = rule || StartsWith(i.id, p);
    if (rule) out.push_back(i.id);
  }
  return out;
}

bool Policy::IsBusiness(const std::string& intent) const {
  if (intent.empty()) return false;
  const auto kind = KindOf(intent);
  return kind == "answer" || kind == "dispatch" || kind == "order";
}

std::string Policy::KindOf(const std::string& intent) const {
  if (intent == "order_status" || intent == "order_urge") return "order";
  if (const auto* info = taxonomy_.FindIntent(intent)) {
    if (StartsWith(intent, "emergency")) return "emergency";
    for (const auto& p : texts_.rules.legal_intent_prefixes)
      if (StartsWith(intent, p)) return "legal";
    return info->kind;
  }
  for (const auto& r : texts_.rules.reroutes)
    if (r.intent == intent) return r.kind;
  return "";
}

std::string Policy::DeptOf(const std::string& intent) const {
  if (const auto* info = taxonomy_.FindIntent(intent)) return info->dept;
  for (const auto& r : texts_.rules.reroutes)
    if (r.intent == intent) return r.department;
  return "";
}

std::string Policy::IssueText(const std::string& intent) const {
  if (auto it = texts_.issues.find(intent); it != texts_.issues.end()) return it->second;
  for (const auto& r : texts_.rules.reroutes)
    if (r.intent == intent && !r.issue.empty()) return r.issue;
  if (const auto* info = taxonomy_.FindIntent(intent)) return info->zh;
  return intent;
}

std::vector<std::string> Policy::RequiredSlots(const Session& s) const {
  const std::string& intent = s.main_intent;
  if (const auto* topic = kb_.Find(intent)) {
    // Answers ask only what they use: the file's `requires`, then the chosen answer's slots.
    Vars vars;
    for (const auto& slot : s.slots) vars[slot.type] = slot.value;
    std::string words;
    for (const auto& t : s.caller_texts) words += t + "\n";
    const auto used = KnowledgeBase::SlotsUsed(kb_.Choose(*topic, vars, words), taxonomy_);
    // The taxonomy's required slots that the chosen answer uses, then the file's `requires`
    // (other slots an answer uses are optional: "到{district}社保窗口" reads well without).
    std::vector<std::string> out;
    if (const auto* info = taxonomy_.FindIntent(intent))
      for (const auto& slot : info->required_slots)
        if (Contains(used, slot)) out.push_back(slot);
    for (const auto& slot : topic->requires_slots)
      if (!Contains(out, slot)) out.push_back(slot);
    return out;
  }
  if (const auto* info = taxonomy_.FindIntent(intent)) return info->required_slots;
  for (const auto& r : texts_.rules.reroutes)
    if (r.intent == intent) return r.required_slots;
  return {};
}

const EmergencyRule* Policy::EmergencyIn(const std::string& text, const std::string& model) const {
  const auto& rules = texts_.rules.emergencies;
  for (const auto& e : rules)
    if (!model.empty() && Contains(e.intents, model)) return &e;
  for (const auto& e : rules) {
    std::string words = text;  // without the look-alikes ("打不着火" is no fire)
    for (const auto& x : e.except)
      for (size_t at; (at = words.find(x)) != std::string::npos;) words.replace(at, x.size(), "，");
    // Something past or a claim about it ("上个月出了车祸，理赔…") is no emergency now.
    if (!FindAny(words, e.keywords).empty() && FindAny(text, e.unless).empty()) return &e;
  }
  if (StartsWith(model, "emergency")) {
    // An emergency intent of a newer taxonomy that no rule names: by the category in its id.
    for (const auto& e : rules)
      if (model.find(e.category) != std::string::npos) return &e;
    if (!rules.empty()) return &rules.front();
  }
  return nullptr;
}

bool Policy::NamesProblem(const std::string& text) const {
  for (const auto& [intent, words] : texts_.rules.problem_keywords)
    if (!FindAny(text, words).empty()) return true;
  for (const auto& r : texts_.rules.reroutes)
    if (!FindAny(text, r.keywords).empty()) return true;
  return false;
}

bool Policy::IsLegal(const std::string& text, const std::string& model) const {
  for (const auto& p : texts_.rules.legal_intent_prefixes)
    if (!model.empty() && StartsWith(model, p)) return true;
  return !FindAny(text, texts_.rules.legal_keywords).empty();
}

std::vector<std::string> Policy::ProblemsIn(const std::string& text, const std::string& model,
                                            float confidence, bool in_progress) const {
  // Problems named by keyword (problem_keywords, and reroutes such as 路灯), in the order said.
  std::vector<std::pair<size_t, std::string>> named;
  auto name = [&](const std::string& intent, const std::vector<std::string>& words) {
    size_t first = std::string::npos;
    for (const auto& w : words) {
      const size_t at = FindWord(text, w);
      if (at != std::string::npos) first = std::min(first, at);
    }
    if (first != std::string::npos) named.push_back({first, intent});
  };
  for (const auto& [intent, words] : texts_.rules.problem_keywords) name(intent, words);
  for (const auto& r : texts_.rules.reroutes) name(r.intent, r.keywords);
  std::sort(named.begin(), named.end());
  auto is_named = [&](const std::string& intent) {
    for (const auto& n : named)
      if (n.second == intent) return true;
    return false;
  };
  std::string primary = IsBusiness(model) &&
                                (!in_progress || confidence >= config_.switch_confidence)
                            ? model
                            : "";
  // A problem the model files under another dispatch intent that the words do not name (路灯
  // read as a traffic-signal fault): the words' reroute wins.
  if (!primary.empty() && KindOf(primary) == "dispatch" && !is_named(primary)) {
    for (const auto& r : texts_.rules.reroutes)
      if (is_named(r.intent)) primary = r.intent;
  }
  // The model's problem has words of its own configured and none was said, while another
  // problem's were: the words win (垃圾站没人清理 read as air pollution).
  if (!primary.empty() && KindOf(primary) == "dispatch" && !is_named(primary) &&
      texts_.rules.problem_keywords.count(primary)) {
    for (const auto& [at, intent] : named) {
      if (KindOf(intent) == "dispatch") {
        primary = intent;
        break;
      }
    }
  }
  std::vector<std::string> out;
  if (primary.empty() && !named.empty()) primary = named.front().second;
  if (primary.empty()) return out;
  if (!is_named(primary)) {
    // A question, and problems named besides after "还有/另外" ("公积金怎么提取，还有我家停电
    // 了"): all of them.
    out.push_back(primary);
    if (KindOf(primary) == "answer" && ReadActs(text).more)
      for (const auto& [at, intent] : named)
        if (KindOf(intent) == "dispatch" && !Contains(out, intent)) out.push_back(intent);
    return out;
  }
  // Every problem named, in the order said (the first said is the main one).
  for (const auto& [at, intent] : named)
    if ((intent == primary || KindOf(intent) == "dispatch") && !Contains(out, intent))
      out.push_back(intent);
  return out;
}

std::vector<Policy::TurnSlot> Policy::TurnSlots(const Session& s, const std::string& text,
                                                const nlu::Understanding& u, bool bare_value_ok,
                                                const std::string& bare_type, bool widen) const {
  std::vector<TurnSlot> out;
  std::vector<int> ends;  // code-point end of each out entry's last piece
  std::string order_text;
  const bool order_context = s.main_intent == "order_status" || s.main_intent == "order_urge" ||
                             s.asking_slot == "order_id";
  const std::string order_id = order_context ? OrderIdInText(text, &order_text) : "";
  if (!order_id.empty()) {
    out.push_back({{"order_id", order_text, order_id}, true});
    ends.push_back(-1);
  }
  for (const auto& slot : u.slots) {
    if (!taxonomy_.HasSlot(slot.type) || slot.value.empty()) continue;
    if (IsVagueReference(slot.type, slot.value)) continue;
    // Pieces of an order id the text itself gave (the model breaks it at the dash).
    if (!order_id.empty() && order_text.find(slot.value) != std::string::npos) continue;
    auto same = std::find_if(out.begin(), out.end(),
                             [&](const TurnSlot& t) { return t.fill.type == slot.type; });
    if (same != out.end()) {
      const size_t i = static_cast<size_t>(same - out.begin());
      // One address the model split into pieces: adjacent, or a few characters it missed
      // between them ("同和街" + "石东路8号" out of 同和街蟾蜍石东路8号).
      const std::string gap = ends[i] >= 0 && slot.start >= ends[i] && slot.start - ends[i] <= 4
                                  ? CpSubstr(text, size_t(ends[i]), size_t(slot.start))
                                  : std::string("-");
      const bool filler_gap = !gap.empty() && widen && AllCjk(gap) &&
                              FindAny(gap, {"是", "不", "在", "和", "跟", "还有", "也"}).empty();
      if (slot.type == "address" && (gap.empty() || filler_gap)) {
        same->fill.value += gap + slot.value;
        same->fill.normalized.clear();
      } else {
        // "不是天河区，是海珠区": the value said last is the one meant.
        *same = {{slot.type, slot.value, slot.normalized}, slot.valid};
      }
      ends[i] = slot.end;
      continue;
    }
    std::string value = slot.value;
    if (slot.type == "address") {
      // "越秀区寺右新马路19号" spanned as 越秀区 + 新马路19号: the few characters between a
      // district and the address belong to the address.
      for (const auto& d : u.slots) {
        if (d.type != "district" || d.end > slot.start || slot.start - d.end > 6) continue;
        const std::string gap = StripBareValue(CpSubstr(text, size_t(d.end), size_t(slot.start)));
        if (CodePoints(gap) >= 1 && CodePoints(gap) <= 4 && AllCjk(gap) &&
            ReadActs(gap).content == gap)
          value = gap + value;
      }
    }
    out.push_back({{slot.type, value, value == slot.value ? slot.normalized : ""}, slot.valid});
    ends.push_back(slot.end);
  }
  if (widen && out.size() == 1 && IsFreeText(out[0].fill.type) && out[0].fill.normalized.empty()) {
    // A reply that is only the free-text value, of which the model spanned a part ("叫好味道餐厅"
    // -> "餐厅" or "味道"): the whole phrase is the value when it is shaped like one and ends
    // with the span, or holds it with at most 3 more characters (a span at the start of a longer
    // phrase, "好味道餐厅旁边那家店", stays as spanned).
    const std::string whole = StripBareValue(text);
    const std::string& v = out[0].fill.value;
    const bool tail = whole.size() > v.size() &&
                      whole.compare(whole.size() - v.size(), v.size(), v) == 0;
    const bool inside = whole.find(v) != std::string::npos &&
                        CodePoints(whole) <= CodePoints(v) + 3;
    // The reply to the question for this very slot, which looks like such a value as a whole
    // ("名剪造型理发店", spanned as 造型): the whole reply is the value.
    const bool answers_pending = s.asking_slot == out[0].fill.type &&
                                 whole.find(v) != std::string::npos;
    if (whole.size() > v.size() && CodePoints(whole) <= 20 && (tail || inside || answers_pending) &&
        LooksLike(out[0].fill.type, whole)) {
      out[0].fill.value = whole;
    }
  }
  if (!out.empty()) return out;
  // A bare answer to a pending question that the model did not span ("就是鑫源物业").
  const std::string value = StripBareValue(text);
  if (!bare_type.empty()) {
    out.push_back({{bare_type, value, ""}, true});
  } else if (bare_value_ok && IsFreeText(s.asking_slot) && CodePoints(value) >= 2 &&
             CodePoints(value) <= 30) {
    out.push_back({{s.asking_slot, value, ""}, true});
  }
  return out;
}

std::string Policy::BareValueType(const Session& s, const std::string& text,
                                  const nlu::Understanding& u) const {
  if (!u.slots.empty()) return "";
  const std::string value = StripBareValue(text);
  if (CodePoints(value) < 2 || CodePoints(value) > 20) return "";
  for (const auto& type : PendingSlots(s))
    if (IsFreeText(type) && LooksLike(type, value)) return type;
  return "";
}

std::vector<std::string> Policy::PendingSlots(const Session& s) const {
  if (!s.asking_slot.empty()) return {s.asking_slot};
  if (s.stage == Stage::kConfirming || s.stage == Stage::kCorrecting) {
    return RequiredSlots(s);
  }
  return {};
}

bool Policy::AnswersPending(const Session& s, const std::string& text,
                            const nlu::Understanding& u) const {
  const std::vector<std::string> pending = PendingSlots(s);
  if (pending.empty()) return false;
  const int said = int(CodePoints(StripBareValue(text)));
  bool any_pending = false;
  int spanned = 0;
  for (const auto& slot : u.slots) {
    any_pending = any_pending || Contains(pending, slot.type);
    spanned += int(CodePoints(slot.value));
  }
  // The slots (one of them pending) and at most a few characters around them ("叫", "是", "就是",
  // "对", a piece the model missed): nothing else said. "越秀区二沙岛烟雨路3号" is an address, even
  // when the model reads 烟 as cooking fumes.
  return any_pending && said - spanned <= 3;
}

Vars Policy::SlotVars(const Session& s) const {
  Vars v;
  for (const auto& slot : s.slots) v[slot.type] = slot.value;
  if (!s.main_intent.empty()) {
    auto dept = taxonomy_.departments.find(DeptOf(s.main_intent));
    if (dept != taxonomy_.departments.end()) v["department"] = dept->second;
    v["issue"] = IssueText(s.main_intent);
  }
  // An organisation the caller could not name is read back by the place given instead.
  if (!v.count("organization") && v.count("address"))
    v["organization"] = v["district"] + v["address"];
  return v;
}

bool Policy::SlotDone(const Session& s, const std::string& slot) const {
  if (Contains(s.unverified, slot)) return true;
  if (const SlotFill* have = s.FindSlot(slot))
    return s.slot_valid[static_cast<size_t>(have - s.slots.data())];
  for (const auto& alt : texts_.rules.Ladder(slot).alternatives) {
    if (const SlotFill* have = s.FindSlot(alt))
      if (s.slot_valid[static_cast<size_t>(have - s.slots.data())]) return true;
  }
  return false;
}

std::string Policy::ApplyCorrection(Session& s, const Correction& c, const nlu::Understanding& u,
                                    std::chrono::system_clock::time_point now) const {
  static const char* kDigitTypes[] = {"id_number", "phone", "plate_number", "order_id"};
  auto set = [&](const std::string& type, const std::string& value) {
    std::string normalized;
    bool valid = true;
    if (nlu::HasNormalizer(type)) {
      const nlu::Normalized n = nlu::NormalizeSlot(type, value, now);
      normalized = n.value;
      valid = n.valid;
    }
    s.SetSlot({type, value, normalized}, valid);
    return type;
  };
  if (c.part == "last") {
    std::string target;
    if (Contains(std::vector<std::string>(std::begin(kDigitTypes), std::end(kDigitTypes)),
                 s.asking_slot) &&
        s.FindSlot(s.asking_slot))
      target = s.asking_slot;
    for (const char* t : kDigitTypes) {
      if (!target.empty()) break;
      if (const SlotFill* f = s.FindSlot(t))
        if (!s.slot_valid[static_cast<size_t>(f - s.slots.data())]) target = t;
    }
    for (const char* t : kDigitTypes)
      if (target.empty() && s.FindSlot(t)) target = t;
    if (target.empty()) return "";
    const SlotFill* f = s.FindSlot(target);
    std::string digits = f->normalized.empty() ? f->value : f->normalized;
    if (digits.empty()) return "";
    // The last character, not byte: values may hold a Chinese province letter (plates).
    size_t last = digits.size() - 1;
    while (last > 0 && (static_cast<unsigned char>(digits[last]) & 0xC0) == 0x80) --last;
    return set(target, digits.substr(0, last) + c.new_value);
  }
  const std::string& v = c.new_value;
  // "门牌号说错了，是309号": a number with its unit replaces that part of the address.
  auto partial = [&](const std::string& type, const std::string& value) -> std::string {
    // Alternations, not a bracket class: std::regex reads bytes, and a class of multi-byte
    // characters would match single bytes of other characters.
    static const std::string digit = "(?:[0-9]|零|一|二|三|四|五|六|七|八|九|十|百)";
    static const std::regex unit_only("^" + digit + "+(号楼|号|栋|幢|楼|单元|室)$");
    const SlotFill* f = s.FindSlot(type);
    std::smatch m;
    if (type != "address" || !f || !std::regex_match(value, m, unit_only)) return value;
    const std::regex last(digit + "+" + m[1].str());
    std::string out = f->value;
    std::smatch found;
    size_t base = 0, at = std::string::npos, len = 0;
    for (std::string rest = out; std::regex_search(rest, found, last);) {
      at = base + static_cast<size_t>(found.position(0));
      len = static_cast<size_t>(found.length(0));
      base = at + len;
      rest = out.substr(base);
    }
    if (at == std::string::npos) return value;
    return out.replace(at, len, value);
  };
  // 0. The slot named just before ("门牌号改一下，是18号").
  if (c.old_value.empty() && !c.before.empty()) {
    for (const auto& [word, type] : texts_.rules.slot_names)
      if (c.before.find(word) != std::string::npos && (type != "address" || s.FindSlot(type)))
        return set(type, partial(type, v));
  }
  // A bare house number ("是18号") is part of the address, whatever the model spans it as.
  if (s.FindSlot("address") && partial("address", v) != v) return set("address", partial("address", v));
  // 1. The old value or the slot is named ("地址错了…", "不是天河区…").
  if (!c.old_value.empty()) {
    for (const auto& [word, type] : texts_.rules.slot_names)
      if (c.old_value.find(word) != std::string::npos && c.old_value.size() <= word.size() + 6)
        return set(type, partial(type, v));
    for (const auto& f : s.slots) {
      if (f.value.empty()) continue;
      const size_t at = f.value.find(c.old_value);
      if (at != std::string::npos) {
        // "不是天河区，是海珠区" about the district; "不是电子二路，是电子三路" inside an address
        // (the rest kept: 电子三路100号); "是赤岗北路70号，不是赤岗路" says the rest itself.
        const std::string head = f.value.substr(0, at);
        const std::string tail = f.value.substr(at + c.old_value.size());
        const bool says_tail = !tail.empty() && v.size() >= tail.size() &&
                               v.compare(v.size() - tail.size(), tail.size(), tail) == 0;
        const bool says_head = !head.empty() && StartsWith(v, head);
        const std::string type = f.type;
        return set(type, (says_head ? "" : head) + v + (says_tail ? "" : tail));
      }
      if (c.old_value.find(f.value) != std::string::npos) return set(f.type, v);
    }
  }
  // 2. The model's spans inside the new value: every slot it names there.
  std::string first;
  for (const auto& slot : u.slots) {
    if (!taxonomy_.HasSlot(slot.type) || slot.value.empty()) continue;
    if (v.find(slot.value) == std::string::npos) continue;
    std::string value = slot.value;
    // An address span shorter than the whole corrected value: the whole value when it is one.
    if (IsFreeText(slot.type) && value != v && LooksLike(slot.type, v) &&
        !(slot.type == "address" && v.find("区") != std::string::npos && s.FindSlot("district")))
      value = v;
    if (value == slot.value && nlu::HasNormalizer(slot.type)) {
      s.SetSlot({slot.type, slot.value, slot.normalized}, slot.valid);
    } else {
      set(slot.type, value);
    }
    if (first.empty()) first = slot.type;
  }
  if (!first.empty()) return first;
  // 3. By the value's form.
  const std::vector<std::string> runs = DigitRuns(v);
  const std::string digits = runs.size() == 1 ? runs[0] : "";
  if (digits.size() == 18 || (digits.size() == 15 && s.FindSlot("id_number")))
    return set("id_number", v);
  if (digits.size() == 11 && digits[0] == '1') return set("phone", v);
  if (nlu::NormalizePlateNumber(v).valid) return set("plate_number", v);
  for (const char* type : {"district", "address", "organization"})
    if (LooksLike(type, v) && (std::string(type) != "district" || s.FindSlot("district") ||
                               s.FindSlot("address")))
      return set(type, v);
  // 4. The slot being asked, or while a read-back is corrected its first required slot.
  if (!s.asking_slot.empty()) return set(s.asking_slot, partial(s.asking_slot, v));
  if (s.stage == Stage::kConfirming || s.stage == Stage::kCorrecting) {
    const auto required = RequiredSlots(s);
    if (!required.empty() && IsFreeText(required.front()))
      return set(required.front(), partial(required.front(), v));
  }
  return "";
}

bool Policy::TakeIdNumber(Session& s, const std::string& text,
                          std::chrono::system_clock::time_point now) const {
  const bool wanted = s.asking_slot == "id_number" || s.FindSlot("id_number") ||
                      Contains(RequiredSlots(s), "id_number");
  if (!wanted) return false;
  const SlotFill* cur = s.FindSlot("id_number");
  if (cur && s.slot_valid[static_cast<size_t>(cur - s.slots.data())]) return false;
  std::string invalid;
  for (const auto& run : DigitRuns(text)) {
    if (run.size() < 14 || run.size() > 20) continue;
    const nlu::Normalized n = nlu::NormalizeIdNumber(run, now);
    if (n.valid) {
      s.SetSlot({"id_number", run, n.value}, true);
      return true;
    }
    invalid = run;
  }
  if (!cur && !invalid.empty()) {
    s.SetSlot({"id_number", invalid, nlu::NormalizeIdNumber(invalid, now).value}, false);
    return true;
  }
  return false;
}

std::string Policy::IdProblem(const std::string& value) const {
  const auto& p = texts_.rules.id_problems;
  std::string digits;
  for (const auto& run : DigitRuns(value)) digits += run;
  if (digits.size() != 18 && digits.size() != 15) {
    Vars v;
    v["length"] = std::to_string(digits.size());
    return Render(p.at("length"), v);
  }
  const std::string error = nlu::NormalizeIdNumber(digits).error;
  if (error.find("check digit") != std::string::npos) return p.at("check_digit");
  if (error.find("birth") != std::string::npos) return p.at("birth_date");
  if (error.find("province") != std::string::npos) return p.at("province");
  auto inv = texts_.invalid_prompts.find("id_number");
  return inv != texts_.invalid_prompts.end() ? inv->second : texts_.prompts.at("id_number");
}

void Policy::StartMain(Session& s, const std::string& intent, bool keep_slots) const {
  if (!keep_slots) {
    s.slots.clear();
    s.slot_valid.clear();
  }
  s.main_intent = intent;
  s.queued.erase(std::remove_if(s.queued.begin(), s.queued.end(),
                                [&](const CallIssue& q) { return q.intent == intent; }),
                 s.queued.end());
  s.stage = Stage::kFilling;
  s.asking_slot.clear();
  s.order_misses = 0;
  s.caller_texts.clear();
  s.active_open = true;
  s.unverified.clear();
  s.asks.clear();
  s.no_match.clear();
  s.no_input.clear();
  s.confirm_misses = 0;
}

void Policy::Queue(Session& s, const std::vector<std::string>& intents,
                   const std::vector<TurnSlot>& slots, const std::string& said) const {
  for (const auto& intent : intents) {
    bool known = intent == s.main_intent;
    for (const auto& q : s.queued) known = known || q.intent == intent;
    if (known) continue;
    CallIssue i;
    i.intent = intent;
    i.kind = KindOf(intent);
    i.department = DeptOf(intent);
    for (const auto& t : slots)
      if (t.valid) i.slots.push_back(t.fill);
    i.said = said;
    s.queued.push_back(std::move(i));
  }
}

void Policy::Record(Session& s, const std::string& outcome, const std::string& order_id,
                    const std::string& transfer_to) const {
  if (!s.active_open) return;
  CallIssue i;
  i.intent = s.main_intent;
  i.kind = KindOf(s.main_intent);
  i.department = DeptOf(s.main_intent);
  i.outcome = outcome;
  i.work_order_id = order_id;
  i.transfer_to = transfer_to;
  i.slots = s.slots;
  s.issues.push_back(std::move(i));
  s.active_open = false;
  s.finished_turn = s.turns;
}

TurnReply Policy::Simple(const std::string& reply, Action action) const {
  TurnReply r;
  r.reply = reply;
  r.action = action;
  return r;
}

namespace {

// The main issue: its first work order, else the first emergency transferred, else the first
// question answered (out-of-scope ones last), else the first issue raised.
const CallIssue* MainOf(const std::vector<CallIssue>& all) {
  for (const auto& i : all)
    if (!i.work_order_id.empty()) return &i;
  for (const auto& i : all)
    if (i.outcome == "transferred") return &i;
  for (const auto& i : all)
    if (i.outcome == "answered" && i.kind != "out_of_scope") return &i;
  for (const auto& i : all)
    if (i.kind != "out_of_scope") return &i;
  return all.empty() ? nullptr : &all.front();
}

}  // namespace

void Policy::Finish(const Session& s, TurnReply& r) const {
  const CallSummary c = Summarize(s);
  r.intent = c.intent;
  r.department = c.department;
  r.slots = s.slots;
}

TurnReply Policy::Handoff(Session& s, const std::string& reply_key) const {
  Record(s, "handed_off");
  s.stage = Stage::kHandedOff;
  s.handed_off = true;
  s.asking_slot.clear();
  TurnReply r = Simple(texts_.Reply(reply_key), Action::kHandoff);
  r.done = true;
  return r;
}

TurnReply Policy::End(Session& s, const std::string& reply_key) const {
  Record(s, reply_key == "cancel" ? "cancelled" : "pending");
  s.stage = Stage::kEnded;
  s.asking_slot.clear();
  TurnReply r = Simple(texts_.Reply(reply_key), Action::kEnd);
  r.done = true;
  return r;
}

TurnReply Policy::Transfer(Session& s, const EmergencyRule& rule, const std::string& model) const {
  Record(s, "pending");
  CallIssue i;
  i.intent = StartsWith(model, "emergency") || (!model.empty() && Contains(rule.intents, model))
                 ? model
                 : "";
  i.kind = "emergency";
  // The emergency service's department: the intent's, else the rule's, when this taxonomy has it.
  i.department = texts_.rules.emergency_department;
  if (!i.intent.empty()) {
    i.department = DeptOf(i.intent);
  } else if (taxonomy_.departments.count(rule.department)) {
    i.department = rule.department;
  }
  i.outcome = "transferred";
  i.transfer_to = rule.number;
  s.issues.push_back(std::move(i));
  s.transferred = true;
  s.stage = Stage::kHandedOff;
  s.asking_slot.clear();
  Vars v;
  v["number"] = rule.number;
  v["service"] = rule.service;
  TurnReply r = Simple(Render(texts_.Reply("emergency"), v), Action::kTransfer);
  r.transfer_to = rule.number;
  r.transfer_category = rule.category;
  r.done = true;
  return r;
}

TurnReply Policy::Legal(Session& s, const std::string& model, const std::string& text) const {
  Record(s, "pending");
  CallIssue i;
  i.intent = KindOf(model) == "legal" ? model : "";
  i.kind = "legal";
  i.department = texts_.rules.legal_department;
  if (!i.intent.empty()) {
    i.department = DeptOf(i.intent);
  } else {
    for (const auto& route : texts_.rules.legal_routes) {
      if (!FindAny(text, route.keywords).empty() && taxonomy_.departments.count(route.reply)) {
        i.department = route.reply;
        break;
      }
    }
  }
  i.outcome = "answered";
  s.issues.push_back(std::move(i));
  s.answered = true;
  s.stage = Stage::kFinished;
  s.finished_turn = s.turns;
  s.asking_slot.clear();
  return Simple(texts_.Reply("legal") + texts_.Reply("anything_else"), Action::kAnswer);
}

TurnReply Policy::OutOfScope(Session& s, const std::string& text) const {
  std::string reply = texts_.Reply("out_of_scope");
  for (const auto& t : texts_.rules.out_of_scope_topics) {
    if (!FindAny(text, t.keywords).empty()) {
      reply = t.reply;
      break;
    }
  }
  CallIssue i;
  i.kind = "out_of_scope";
  i.outcome = "answered";
  s.issues.push_back(std::move(i));
  s.answered = true;
  if (s.stage == Stage::kOpen && s.main_intent.empty()) s.stage = Stage::kOpen;
  return Simple(reply, Action::kAnswer);
}

TurnReply Policy::Unclear(Session& s, bool noise) const {
  if (++s.low_confidence_streak >= config_.unclear_handoff_after)
    return Handoff(s, "handoff_unclear");
  return Simple(texts_.Reply(noise ? "noise" : "clarify"), Action::kClarify);
}
TurnReply Policy::Turn(Session& s, const std::string& text, const nlu::Understanding& u,
                       std::chrono::system_clock::time_point now) const {
  Reading rd;
  std::vector<std::string> corrected;
  bool informed = false, new_problem = false, out_of_scope = false, unclear = false;
  bool agreed = false;  // a read-back was agreed to (also by "嗯" alone)
  TurnReply r = [&]() -> TurnReply {
    ++s.turns;
    s.all_texts.push_back(text);
    rd.acts = ReadActs(text);
    const TurnActs& a = rd.acts;
    const bool confident =
        u.confidence >= config_.min_confidence && taxonomy_.FindIntent(u.intent) != nullptr;
    rd.model = confident ? u.intent : "";
    rd.deny = a.deny || (rd.model == "deny" && !a.affirm && !a.urge);
    rd.affirm = !rd.deny && (a.affirm || a.urge || (rd.model == "affirm" && !a.noise));
    // The model's praise counts as thanks only when the words hold nothing else ("真不知道" is
    // no thanks, whatever the model says).
    rd.thanks = a.thanks || (rd.model == "praise" && a.content.empty() && !a.dont_know);
    // Sounds alone ("呃呃呃", "嗯嗯啊啊") are neither a greeting nor a goodbye, whatever the
    // model makes of them.
    rd.goodbye = a.goodbye || (rd.model == "goodbye" && !a.noise);
    rd.greeting = a.greeting || (rd.model == "greeting" && !a.noise);

    if (s.stage == Stage::kHandedOff) {
      TurnReply h = Simple(texts_.Reply(s.transferred ? "after_transfer" : "after_handoff"),
                           s.transferred ? Action::kTransfer : Action::kHandoff);
      h.done = true;
      return h;
    }
    if (s.turns > config_.max_turns) return Handoff(s, "handoff_turns");
    if (const EmergencyRule* e = EmergencyIn(text, rd.model)) return Transfer(s, *e, rd.model);
    if (a.human) return Handoff(s, "handoff_request");
    if (IsLegal(text, rd.model)) return Legal(s, rd.model, text);
    if (rd.model == "human_agent") return Handoff(s, "handoff_request");

    const bool in_progress =
        !s.main_intent.empty() && s.active_open &&
        (s.stage == Stage::kFilling || s.stage == Stage::kConfirming ||
         s.stage == Stage::kCorrecting);
    // A reply to a pending question that looks like the value asked for is that value, whatever
    // intent the model gives the phrase on its own; not a turn of "不知道", no or a correction
    // ("就是不知道" is no street ending in 道).
    const bool plain = !a.dont_know && !a.cancel && !a.deny && a.corrections.empty() && !a.noise;
    const std::string bare_type = in_progress && plain ? BareValueType(s, text, u) : "";
    const bool answers_pending = in_progress && AnswersPending(s, text, u);
    // A turn of acts only ("麻烦快点处理", read by the model as urging an order) or of "不知道"
    // raises no problem of the model's.
    const std::string problem_model = a.content.empty() || a.dont_know ? "" : rd.model;
    if (bare_type.empty() && !answers_pending)
      rd.problems = ProblemsIn(text, problem_model, u.confidence, in_progress);
    // "我反映的问题到现在还没人处理" asks to hurry an order, not for its status, whatever the
    // model's order_status says.
    for (auto& p : rd.problems)
      if (p == "order_status" &&
          !FindAny(text, {"还没人处理", "没人处理", "还没处理", "没人管", "还没解决", "没有解决",
                          "还没人来", "催一下", "催办", "催促"}).empty())
        p = "order_urge";
    // An out-of-scope topic ("台风", "快递") outweighs a problem only the model saw, unsure.
    bool topic = false;
    for (const auto& t : texts_.rules.out_of_scope_topics)
      topic = topic || !FindAny(text, t.keywords).empty();
    if (topic && !rd.problems.empty() && !NamesProblem(text) &&
        u.confidence < config_.switch_confidence)
      rd.problems.clear();

    if (in_progress) {
      s.caller_texts.push_back(text);
      std::vector<std::string> fresh;
      for (const auto& p : rd.problems)
        if (p != s.main_intent) fresh.push_back(p);
      if (a.cancel && a.corrections.empty() && fresh.empty() && !rd.affirm) return End(s, "cancel");
      bool replaced = false;
      std::string prefix;
      // A bare phrase answers the question only when nothing else was said in the turn (no yes,
      // no, "快点", "不知道") and the model saw no business in it.
      const bool only_words = !a.affirm && !a.urge && !a.deny && !a.thanks && !a.goodbye &&
                              !a.cancel && !a.dont_know && !a.noise && a.corrections.empty();
      const bool bare_ok = only_words && (rd.model.empty() || rd.model == "provide_info" ||
                                          rd.model == "out_of_scope");
      // A correction turn's words are read by the correction rule, not widened into a value
      // ("不是电子二路，是电子三路" is no address); spans inside its values are its business.
      const bool correcting_words = !a.corrections.empty() || a.deny;
      std::vector<TurnSlot> turn_slots =
          TurnSlots(s, text, u, bare_ok, bare_type, /*widen=*/!correcting_words);
      if (!a.corrections.empty()) {
        std::vector<TurnSlot> kept;
        for (const auto& t : turn_slots) {
          bool inside = false;
          for (const auto& c : a.corrections)
            inside = inside || c.new_value.find(t.fill.value) != std::string::npos ||
                     (!c.old_value.empty() && c.old_value.find(t.fill.value) != std::string::npos);
          if (!inside) kept.push_back(t);
        }
        turn_slots = kept;
      }
      // A turn that answers the question asked ("就在垃圾站旁边那栋楼") raises no problem by its
      // words alone, unless the caller says there is another ("还有…"); one the model is sure of
      // stays ("好味道餐厅的油烟太大了").
      bool answers_asked = false;
      for (const auto& t : turn_slots) answers_asked = answers_asked || t.fill.type == s.asking_slot;
      if (answers_asked && !a.more) {
        const bool model_sure = u.confidence >= config_.switch_confidence;
        fresh.erase(std::remove_if(fresh.begin(), fresh.end(),
                                   [&](const std::string& p) { return !(model_sure && p == rd.model); }),
                    fresh.end());
      }
      if (!fresh.empty()) {
        new_problem = true;
        const bool named_more = a.more || text.find("也") != std::string::npos;
        const bool replace = !named_more && (rd.deny || a.switch_marker || s.slots.empty());
        if (replace) {
          // "哦不对，是停电了": the problem was misheard or misspoken; what was said stays.
          s.active_open = false;
          StartMain(s, fresh.front(), /*keep_slots=*/true);
          s.caller_texts.push_back(text);
          Queue(s, std::vector<std::string>(fresh.begin() + 1, fresh.end()), turn_slots, text);
          replaced = true;
        } else {
          Queue(s, fresh, turn_slots, text);
          Vars v;
          v["issue"] = IssueText(fresh.front());
          prefix = Render(texts_.Reply("queued_issue"), v);
          // What was said with the new problem is about it, unless it answers the question.
          if (!answers_asked) turn_slots.clear();
        }
      }
      bool changed = false;
      for (const auto& t : turn_slots) {
        const SlotFill* old = s.FindSlot(t.fill.type);
        if (!old || old->value != t.fill.value || old->normalized != t.fill.normalized)
          changed = true;
        s.SetSlot(t.fill, t.valid);
      }
      if (!turn_slots.empty()) informed = true;
      if (prefix.empty()) {
        for (const auto& c : a.corrections) {
          const std::string type = ApplyCorrection(s, c, u, now);
          if (!type.empty()) corrected.push_back(type);
        }
        if (TakeIdNumber(s, text, now)) changed = true;
        if (a.same_place && !s.issues.empty()) {
          for (const auto& f : s.issues.back().slots) {
            if ((f.type == "address" || f.type == "district" || f.type == "organization") &&
                !s.FindSlot(f.type)) {
              s.SetSlot(f, true);
              changed = true;
            }
          }
        }
      }
      if (!corrected.empty()) changed = true;
      if (changed) s.confirm_misses = 0;
      auto with_prefix = [&](TurnReply t) {
        t.reply = prefix + t.reply;
        return t;
      };
      if (replaced) return Advance(s, now);
      if (s.stage == Stage::kConfirming) {
        if (changed) return with_prefix(ReadBack(s));
        const bool weak = a.weak_affirm && a.content.empty() && !rd.deny;
        if (rd.affirm || weak || ((rd.thanks || rd.goodbye) && !rd.deny)) {
          agreed = true;
          return Dispatch(s, now);
        }
        if (rd.deny) {
          s.stage = Stage::kCorrecting;
          s.asking_slot.clear();
          return Simple(texts_.Reply("ask_correction"), Action::kAskSlot);
        }
        if (!prefix.empty()) return with_prefix(ReadBack(s));
        if (++s.confirm_misses >= 3) return Handoff(s, "handoff_unclear");
        TurnReply t = ReadBack(s);
        t.reply = texts_.Reply("confirm_again") + t.reply;
        return t;
      }
      if (s.stage == Stage::kCorrecting) {
        // A value said again as it was is the caller insisting: read back.
        if (changed || rd.affirm || !turn_slots.empty()) return ReadBack(s);
        if (!prefix.empty()) return with_prefix(Simple(texts_.Reply("ask_correction"), Action::kAskSlot));
        if (!rd.deny && ++s.confirm_misses >= 3) return Handoff(s, "handoff_unclear");
        TurnReply t = Simple(texts_.Reply("ask_correction"), Action::kAskSlot);
        t.slots_reasked = 1;
        return t;
      }
      // Filling.
      if (!prefix.empty()) return with_prefix(Advance(s, now));
      if (!s.asking_slot.empty() && !SlotDone(s, s.asking_slot)) {
        if (rd.goodbye && a.content.empty()) return End(s, "goodbye");
        return SlotMissed(s, a.noise || (a.content.empty() && !a.dont_know && !changed),
                          a.dont_know, now);
      }
      return Advance(s, now);
    }

    // No problem in progress.
    if (!rd.problems.empty()) {
      new_problem = true;
      // "哦不对，我其实是想问…" right after an answer: that answer was to a misheard question.
      if ((rd.deny || a.switch_marker) && s.finished_turn == s.turns - 1 && !s.issues.empty() &&
          s.issues.back().kind == "answer")
        s.issues.pop_back();
      const bool fresh_call = s.main_intent.empty() && s.stage == Stage::kOpen;
      StartMain(s, rd.problems.front(), /*keep_slots=*/fresh_call);
      s.caller_texts.push_back(text);
      const auto turn_slots = TurnSlots(s, text, u, false, "");
      for (const auto& t : turn_slots) s.SetSlot(t.fill, t.valid);
      if (!turn_slots.empty()) informed = true;
      TakeIdNumber(s, text, now);
      Queue(s, std::vector<std::string>(rd.problems.begin() + 1, rd.problems.end()), turn_slots,
            text);
      // "停水了，但具体地址我不知道": the first question already offers the alternative.
      if (a.dont_know) {
        for (const auto& slot : RequiredSlots(s))
          if (!SlotDone(s, slot)) {
            s.asks[slot] = std::max(s.asks[slot], 2);
            break;
          }
      }
      return Advance(s, now);
    }
    const bool served = !s.issues.empty();
    if (a.cancel && !rd.affirm) return End(s, served ? "goodbye" : "cancel");
    if (rd.goodbye || (a.no_more && served)) return End(s, "goodbye");
    if (rd.deny && served && a.content.empty()) return End(s, "goodbye");  // "还有吗？" "没有"
    if (rd.model == "praise" && !a.affirm) {
      s.answered = true;
      return Simple(texts_.Reply("praise"), Action::kAnswer);
    }
    if (rd.thanks) return Simple(texts_.Reply("thanks"), Action::kClarify);
    if (topic || (rd.model == "out_of_scope" && !a.noise && !rd.greeting)) {
      out_of_scope = true;
      return OutOfScope(s, text);
    }
    if (rd.greeting && a.content.empty())
      return Simple(texts_.Reply(s.turns == 1 ? "greet" : "greet_again"), Action::kGreet);
    const auto turn_slots = TurnSlots(s, text, u, false, "");
    bool place = false;
    for (const auto& t : turn_slots) {
      if (t.fill.type == "address" || t.fill.type == "organization" || t.fill.type == "district" ||
          t.fill.type == "plate_number" || t.fill.type == "bus_line") {
        place = true;
        s.SetSlot(t.fill, t.valid);
      }
    }
    if (place) {
      informed = true;
      return Simple(texts_.Reply("ask_issue_place"), Action::kClarify);
    }
    if ((rd.affirm || a.weak_affirm) && served) return Simple(texts_.Reply("anything_else"), Action::kClarify);
    if (rd.greeting) return Simple(texts_.Reply(s.turns == 1 ? "greet" : "greet_again"), Action::kGreet);
    unclear = true;
    return Unclear(s, a.noise);
  }();
  // Any turn but an unclear one breaks the streak of unclear ones.
  if (!unclear) s.low_confidence_streak = 0;
  const TurnActs& a = rd.acts;
  auto add = [&](bool on, const char* name) {
    if (on) r.acts.push_back(name);
  };
  add(rd.greeting, "greeting");
  add(rd.affirm || (agreed && a.weak_affirm), "affirm");
  add(rd.deny, "deny");
  add(!a.corrections.empty() || !corrected.empty(), "correction");
  add(informed || !corrected.empty(), "inform");
  add(new_problem, "new_problem");
  add(rd.thanks, "thanks");
  add(rd.goodbye, "goodbye");
  add(a.cancel, "cancel");
  add(a.dont_know, "dont_know");
  add(a.human || rd.model == "human_agent", "request_human");
  add(out_of_scope, "out_of_scope");
  add(a.noise, "noise");
  add(r.action == Action::kTransfer && !r.transfer_to.empty(), "emergency");
  add(r.reply.rfind(texts_.Reply("legal"), 0) == 0, "legal");
  r.corrected = corrected;
  Finish(s, r);
  return r;
}
TurnReply Policy::Advance(Session& s, std::chrono::system_clock::time_point now) const {
  const std::string kind = KindOf(s.main_intent);
  const bool is_order = kind == "order";
  for (const auto& slot : RequiredSlots(s)) {
    if (is_order && slot == "order_id" && !s.FindSlot("order_id") && !s.work_order_id.empty())
      continue;  // the call's own order
    if (SlotDone(s, slot)) continue;
    const SlotFill* have = s.FindSlot(slot);
    return AskSlot(s, slot, have != nullptr);
  }
  s.asking_slot.clear();
  if (is_order) return Order(s, now);
  if (kind == "dispatch") return ReadBack(s);
  return Answer(s, now);
}

TurnReply Policy::AskSlot(Session& s, const std::string& slot, bool invalid) const {
  TurnReply r;
  r.action = Action::kAskSlot;
  if (Contains(s.asked_slots, slot)) {
    r.slots_reasked = 1;
  } else {
    s.asked_slots.push_back(slot);
  }
  const int level = s.asks[slot]++;
  auto pick = [&](const std::map<std::string, std::string>& m) -> const std::string* {
    auto it = m.find(slot);
    return it == m.end() ? nullptr : &it->second;
  };
  const std::string* text = nullptr;
  std::string id_problem;
  if (invalid && slot == "id_number") {
    id_problem = IdProblem(s.FindSlot(slot)->normalized.empty() ? s.FindSlot(slot)->value
                                                                : s.FindSlot(slot)->normalized);
    text = &id_problem;
  } else if (invalid) {
    text = pick(texts_.invalid_prompts);
  }
  if (!text && level >= 2) text = pick(texts_.rules.example);
  if (!text && level >= 1) text = pick(texts_.rules.rephrase);
  if (!text) text = pick(texts_.prompts);
  r.reply = text ? *text : texts_.Reply("clarify");
  s.stage = Stage::kFilling;
  s.asking_slot = slot;
  return r;
}

TurnReply Policy::SlotMissed(Session& s, bool no_input, bool dont_know,
                             std::chrono::system_clock::time_point now) const {
  const std::string slot = s.asking_slot;
  const SlotLadder& ladder = texts_.rules.Ladder(slot);
  if (no_input) {
    ++s.no_input[slot];
  } else {
    ++s.no_match[slot];
  }
  // "不知道": straight to the example or alternative; if that was said already, no further ask.
  const bool give_up = dont_know && s.asks[slot] >= 3;
  if (dont_know && s.asks[slot] < 2) s.asks[slot] = 2;
  const bool unheard = s.no_input[slot] >= ladder.max_no_input;
  if (give_up || s.no_match[slot] >= ladder.max_no_match || unheard) {
    const std::string& then = unheard && !give_up ? ladder.on_no_input : ladder.on_exhausted;
    if (then == "handoff") return Handoff(s, unheard ? "handoff_unclear" : "handoff_slot");
    s.unverified.push_back(slot);
    Vars v;
    v["slot"] = SlotZh(slot);
    TurnReply next = Advance(s, now);
    next.reply = Render(texts_.Reply("unverified"), v) + next.reply;
    return next;
  }
  const SlotFill* have = s.FindSlot(slot);
  return AskSlot(s, slot, have != nullptr);
}

int Policy::DispatchIssueCount(const Session& s) const {
  int n = 0;
  for (const auto& i : s.issues) n += i.kind == "dispatch" && !i.work_order_id.empty();
  if (s.active_open && KindOf(s.main_intent) == "dispatch") ++n;
  for (const auto& i : s.queued) n += i.kind == "dispatch";
  return n;
}

TurnReply Policy::ReadBack(Session& s) const {
  s.stage = Stage::kConfirming;
  s.asking_slot.clear();
  std::string tmpl;
  if (auto it = texts_.confirm_by_intent.find(s.main_intent);
      it != texts_.confirm_by_intent.end()) {
    tmpl = it->second;
  } else {
    const auto required = RequiredSlots(s);
    auto it2 = required.empty() ? texts_.confirm.end() : texts_.confirm.find(required.front());
    tmpl = it2 != texts_.confirm.end() ? it2->second : texts_.confirm.at("default");
  }
  std::string prefix;
  if (const int n = DispatchIssueCount(s); n > 1) {
    int done = 0;
    for (const auto& i : s.issues) done += i.kind == "dispatch" && !i.work_order_id.empty();
    Vars v;
    v["count"] = std::to_string(n);
    v["index"] = std::to_string(done + 1);
    prefix = Render(texts_.Reply("issue_count"), v);
  }
  return Simple(prefix + Render(tmpl, SlotVars(s)), Action::kConfirm);
}

std::string Policy::WorkOrderText(const Session& s) const {
  Vars v = SlotVars(s);
  std::string where;
  if (auto it = v.find("address"); it != v.end()) where = v["district"] + it->second;
  else if (auto o = s.FindSlot("organization")) where = o->value;
  else if (auto p = s.FindSlot("plate_number")) where = "车牌号" + p->value + "的车辆";
  else if (auto b = s.FindSlot("bus_line")) where = b->value;
  else where = v["district"];
  if (s.FindSlot("organization") && s.FindSlot("address") && where.find(s.FindSlot("organization")->value) == std::string::npos)
    where += s.FindSlot("organization")->value;
  v["where"] = where;
  v["when"] = s.FindSlot("time") ? s.FindSlot("time")->value + "，" : "";
  // The caller's own description: the turns that said more than agreement or a bare value.
  std::string words;
  for (const auto& t : s.caller_texts) {
    const TurnActs a = ReadActs(t);
    // Acts, corrections and "不知道" are not the caller's description of the problem.
    if (CodePoints(a.content) < 4 || !a.corrections.empty() || a.dont_know) continue;
    std::string w = StripBareValue(t);
    // A turn that is only a place or a name ("天河区荷光路南一巷12号") says no more than the slots.
    if (LooksLike("address", w) || LooksLike("organization", w) || LooksLike("district", w))
      continue;
    bool bare = false;
    for (const auto& f : s.slots) bare = bare || StripBareValue(t) == f.value;
    if (bare) continue;
    while (!w.empty() && (w.back() == ' ')) w.pop_back();
    words += (words.empty() ? "" : "，") + w;
    if (CodePoints(words) > 120) break;
  }
  v["words"] = words.empty() ? "" : "来电人称：" + words + "。";
  std::string unverified;
  for (const auto& slot : s.unverified) unverified += (unverified.empty() ? "" : "、") + SlotZh(slot);
  v["unverified"] = unverified.empty() ? "" : unverified + "来电人未能提供，需核实。";
  std::string contact;
  if (auto p = s.FindSlot("phone")) contact += "联系电话：" + p->value + "。";
  if (auto n = s.FindSlot("person_name")) contact = "来电人：" + n->value + "。" + contact;
  v["contact"] = contact;
  return Render(texts_.Reply("work_order_text"), v);
}

namespace {

// The text with the values of personal slots masked (first character kept, then *), and every
// phone or ID number masked as base/pii.h does.
std::string MaskPersonal(std::string text, const std::vector<SlotFill>& slots) {
  for (const auto& f : slots) {
    if (f.type != "id_number" && f.type != "phone" && f.type != "plate_number" &&
        f.type != "person_name")
      continue;
    for (const std::string* v : {&f.value, &f.normalized}) {
      if (v->empty()) continue;
      size_t first = 1;
      while (first < v->size() && (static_cast<unsigned char>((*v)[first]) & 0xC0) == 0x80) ++first;
      const std::string masked = v->substr(0, first) + std::string(CodePoints(*v) - 1, '*');
      for (size_t at; (at = text.find(*v)) != std::string::npos;) text.replace(at, v->size(), masked);
    }
  }
  return MaskPii(text);
}

}  // namespace

TurnReply Policy::Dispatch(Session& s, std::chrono::system_clock::time_point now) const {
  // What makes a repeat report the same: the problem, and its place (address, organisation,
  // plate or line), as said.
  std::string place_key;
  for (const auto& slot : RequiredSlots(s)) {
    if (Contains(s.unverified, slot)) break;
    if (const SlotFill* f = s.FindSlot(slot))
      place_key = StripPunct(f->normalized.empty() ? f->value : f->normalized);
    break;
  }
  Vars v = SlotVars(s);
  TurnReply r;
  std::optional<WorkOrder> existing;
  if (config_.duplicate_window_h > 0 && !place_key.empty()) {
    existing = orders_.FindDuplicate(s.main_intent, place_key,
                                     now - std::chrono::hours(config_.duplicate_window_h));
    if (existing && existing->call_id == s.call_id) existing.reset();
  }
  if (existing) {
    // 并单: the open order of the same problem, same place, gets this call and an urging.
    const std::optional<WorkOrder> linked = orders_.Link(existing->id, s.call_id, now);
    const WorkOrder& o = linked ? *linked : *existing;
    v["order_id"] = o.id;
    v["created_at"] = SpokenTime(o.created_at);
    r = Simple(Render(texts_.Reply("merged"), v), Action::kDispatch);
    r.work_order_id = o.id;
    r.merged = true;
    r.work_order_summary = MaskPersonal(o.summary, o.slots);
    Record(s, "merged", o.id);
  } else {
    WorkOrder order;
    order.call_id = s.call_id;
    order.department = DeptOf(s.main_intent);
    order.intent = s.main_intent;
    for (size_t i = 0; i < s.all_texts.size(); ++i)
      order.caller_text += (i ? "\n" : "") + s.all_texts[i];
    order.slots = s.slots;
    order.unverified = s.unverified;
    order.place_key = place_key;
    order.summary = WorkOrderText(s);
    // Committed (WAL, synchronous=FULL) before the reply announcing it is returned.
    const WorkOrder stored = orders_.Create(std::move(order), now);
    v["order_id"] = stored.id;
    const bool more = !s.queued.empty() || DispatchIssueCount(s) > 1;
    r = Simple(Render(texts_.Reply(more ? "dispatched_one_of" : "dispatched"), v),
               Action::kDispatch);
    r.work_order_id = stored.id;
    r.work_order_summary = MaskPersonal(stored.summary, stored.slots);
    Record(s, "dispatched", stored.id);
  }
  s.work_order_id = r.work_order_id;
  s.dispatched = true;
  s.stage = Stage::kFinished;
  r.done = true;
  return NextQueued(s, r, now);
}

TurnReply Policy::NextQueued(Session& s, TurnReply done,
                             std::chrono::system_clock::time_point now) const {
  if (s.queued.empty()) return done;
  const CallIssue next = s.queued.front();
  s.queued.erase(s.queued.begin());
  StartMain(s, next.intent, /*keep_slots=*/false);
  for (const auto& f : next.slots) s.SetSlot(f, true);
  if (!next.said.empty()) s.caller_texts.push_back(next.said);
  // Problems said together most often share the place: the one just filed lends its address
  // (read back, so the caller can correct it).
  if (!s.issues.empty() && !s.FindSlot("address") && Contains(RequiredSlots(s), "address")) {
    for (const auto& f : s.issues.back().slots)
      if (f.type == "address" || f.type == "district") s.SetSlot(f, true);
  }
  Vars v;
  v["issue"] = IssueText(next.intent);
  const TurnReply then = Advance(s, now);
  done.reply += Render(texts_.Reply("next_issue"), v) + then.reply;
  done.done = then.done;
  if (done.work_order_id.empty()) {
    done.action = then.action;
    done.work_order_id = then.work_order_id;
    done.merged = then.merged;
    done.work_order_summary = then.work_order_summary;
  }
  return done;
}

TurnReply Policy::Answer(Session& s, std::chrono::system_clock::time_point now) const {
  const AnswerTopic* topic = kb_.Find(s.main_intent);
  if (!topic)
    throw Error("no answer configured for intent '" + s.main_intent + "'", Code::kInternal);
  std::string words;
  for (const auto& t : s.caller_texts) words += t + "\n";
  const Vars vars = SlotVars(s);
  const AnswerEntry& e = kb_.Choose(*topic, vars, words);
  s.answered = true;
  s.stage = Stage::kFinished;
  Record(s, "answered");
  TurnReply r = Simple(Render(e.text, vars), Action::kAnswer);
  if (s.queued.empty()) r.reply += texts_.Reply("anything_else");
  return NextQueued(s, r, now);
}
TurnReply Policy::Order(Session& s, std::chrono::system_clock::time_point now) const {
  const SlotFill* given = s.FindSlot("order_id");
  const std::string id =
      given ? (given->normalized.empty() ? given->value : given->normalized) : s.work_order_id;
  bool urge = s.main_intent == "order_urge";
  std::optional<WorkOrder> order = orders_.Get(id);
  // Urging an order this very call created minutes ago is a question about its progress (the
  // model cannot tell "when will it be done" from "hurry up" without the call's history).
  if (order && order->call_id == s.call_id) urge = false;
  if (order && urge) order = orders_.Urge(order->id, now);
  if (!order) {
    if (++s.order_misses >= 2) return Handoff(s, "handoff_order");
    Vars v;
    v["order_id"] = given ? given->value : id;
    // Forget the id that was not found and ask for it again.
    for (size_t i = 0; i < s.slots.size(); ++i) {
      if (s.slots[i].type == "order_id") {
        s.slots.erase(s.slots.begin() + static_cast<std::ptrdiff_t>(i));
        s.slot_valid.erase(s.slot_valid.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
    }
    s.stage = Stage::kFilling;
    s.asking_slot = "order_id";
    TurnReply r = Simple(Render(texts_.Reply("order_not_found"), v), Action::kAskSlot);
    r.slots_reasked = 1;
    return r;
  }
  s.order_misses = 0;
  Vars v;
  v["order_id"] = order->id;
  v["created_at"] = SpokenTime(order->created_at);
  v["urge_count"] = std::to_string(order->urged_at.size());
  auto dept = taxonomy_.departments.find(order->department);
  v["department"] = dept != taxonomy_.departments.end() ? dept->second : order->department;
  v["issue"] = IssueText(order->intent);
  s.answered = true;
  s.stage = Stage::kFinished;
  Record(s, "answered");
  TurnReply r = Simple(Render(texts_.Reply(urge ? "order_urge" : "order_status"), v), Action::kAnswer);
  if (s.queued.empty()) r.reply += texts_.Reply("anything_else");
  return NextQueued(s, r, now);
}

CallSummary Policy::Summarize(const Session& s) const {
  std::vector<CallIssue> all = s.issues;
  if (s.active_open && !s.main_intent.empty()) {
    CallIssue i;
    i.intent = s.main_intent;
    i.kind = KindOf(s.main_intent);
    i.department = DeptOf(s.main_intent);
    i.outcome = s.handed_off ? "handed_off" : "pending";
    i.slots = s.slots;
    all.push_back(std::move(i));
  }
  for (const auto& q : s.queued) all.push_back(q);
  CallSummary c;
  c.call_id = s.call_id;
  c.turns = s.turns;
  bool any_order = false;
  for (const auto& i : all) any_order = any_order || !i.work_order_id.empty();
  c.outcome = any_order       ? "dispatch"
              : s.transferred ? "transfer"
              : s.handed_off  ? "human"
              : s.answered    ? "answer"
                              : "abandoned";
  if (const CallIssue* main = MainOf(all)) {
    c.intent = main->intent;
    c.department = main->department;
    c.slots = main->slots;
    c.work_order_id = main->work_order_id;
    if (!main->work_order_id.empty()) {
      // A call that created or joined an order is summarised by it.
      if (auto order = orders_.Get(main->work_order_id)) {
        c.intent = order->intent;
        c.department = order->department;
        if (order->call_id == s.call_id) c.slots = order->slots;
      }
    }
  }
  if (const auto* info = taxonomy_.FindIntent(c.intent)) {
    c.category = info->category;
    c.category_name = taxonomy_.CategoryName(info->category);
  }
  c.issues = std::move(all);
  return c;
}

}  // namespace hotline::dialog
