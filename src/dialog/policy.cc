#include "dialog/policy.h"

#include <algorithm>
#include <ctime>
#include <regex>

#include "base/error.h"
#include "nlu/normalize/normalize.h"

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
                                    "是",   "叫",     "，",   ",",    " ",    "。"};
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
  if (type == "address") {
    return ends({"路", "街", "巷", "道", "号", "小区", "栋", "楼", "村", "苑", "园", "大厦", "广场",
                 "单元", "室", "社区", "门口", "路口"});
  }
  return false;
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

size_t CodePoints(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
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

}  // namespace

bool Policy::IsBusiness(const std::string& intent) const {
  const auto kind = KindOf(intent);
  return kind == "answer" || kind == "dispatch" || intent == "order_status" ||
         intent == "order_urge";
}

std::string Policy::KindOf(const std::string& intent) const {
  const auto* info = taxonomy_.FindIntent(intent);
  return info ? info->kind : "";
}

std::string Policy::DeptOf(const std::string& intent) const {
  const auto* info = taxonomy_.FindIntent(intent);
  return info ? info->dept : "";
}

std::vector<std::string> Policy::RequiredSlots(const std::string& intent) const {
  if (const auto* topic = kb_.Find(intent)) return topic->requires_slots;
  const auto* info = taxonomy_.FindIntent(intent);
  return info ? info->required_slots : std::vector<std::string>{};
}

std::vector<Policy::TurnSlot> Policy::TurnSlots(const Session& s, const std::string& text,
                                                const nlu::Understanding& u, bool bare_value_ok,
                                                const std::string& bare_type) const {
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
    // Pieces of an order id the text itself gave (the model breaks it at the dash).
    if (!order_id.empty() && order_text.find(slot.value) != std::string::npos) continue;
    auto same = std::find_if(out.begin(), out.end(),
                             [&](const TurnSlot& t) { return t.fill.type == slot.type; });
    if (same != out.end()) {
      const size_t i = static_cast<size_t>(same - out.begin());
      if (slot.type == "address" && ends[i] == slot.start) {
        same->fill.value += slot.value;  // one address the model split into adjacent pieces
        same->fill.normalized.clear();
      } else {
        // "不是天河区，是海珠区": the value said last is the one meant.
        *same = {{slot.type, slot.value, slot.normalized}, slot.valid};
      }
      ends[i] = slot.end;
      continue;
    }
    out.push_back({{slot.type, slot.value, slot.normalized}, slot.valid});
    ends.push_back(slot.end);
  }
  if (out.size() == 1 && IsFreeText(out[0].fill.type) && out[0].fill.normalized.empty()) {
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
    if (whole.size() > v.size() && CodePoints(whole) <= 20 && (tail || inside) &&
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
    return RequiredSlots(s.main_intent);
  }
  return {};
}

bool Policy::AnswersPending(const Session& s, const std::string& text,
                            const nlu::Understanding& u) const {
  const std::vector<std::string> pending = PendingSlots(s);
  if (pending.empty()) return false;
  const int said = int(CodePoints(StripBareValue(text)));
  for (const auto& slot : u.slots) {
    if (std::find(pending.begin(), pending.end(), slot.type) == pending.end()) continue;
    // At most a few characters around the value ("叫", "是", "就是", "对"): nothing else said.
    if (said - int(CodePoints(slot.value)) <= 3) return true;
  }
  return false;
}

Vars Policy::SlotVars(const Session& s) const {
  Vars v;
  for (const auto& slot : s.slots) v[slot.type] = slot.value;
  if (!s.main_intent.empty()) {
    auto dept = taxonomy_.departments.find(DeptOf(s.main_intent));
    if (dept != taxonomy_.departments.end()) v["department"] = dept->second;
    auto issue = texts_.issues.find(s.main_intent);
    const auto* info = taxonomy_.FindIntent(s.main_intent);
    v["issue"] = issue != texts_.issues.end() ? issue->second : (info ? info->zh : "");
  }
  return v;
}

void Policy::StartMain(Session& s, const std::string& intent, bool keep_slots) const {
  if (!keep_slots) {
    s.slots.clear();
    s.slot_valid.clear();
  }
  s.main_intent = intent;
  s.stage = Stage::kFilling;
  s.asking_slot.clear();
  s.order_misses = 0;
  s.caller_texts.clear();
}

TurnReply Policy::Simple(const std::string& reply, Action action) const {
  TurnReply r;
  r.reply = reply;
  r.action = action;
  return r;
}

void Policy::Finish(const Session& s, TurnReply& r) const {
  r.intent = s.main_intent;
  r.department = s.main_intent.empty() ? "" : DeptOf(s.main_intent);
  r.slots = s.slots;
}

TurnReply Policy::Handoff(Session& s, const std::string& reply_key) const {
  s.stage = Stage::kHandedOff;
  s.handed_off = true;
  s.asking_slot.clear();
  TurnReply r = Simple(texts_.Reply(reply_key), Action::kHandoff);
  r.done = true;
  return r;
}

TurnReply Policy::Turn(Session& s, const std::string& text, const nlu::Understanding& u,
                       std::chrono::system_clock::time_point now) const {
  TurnReply r = [&]() -> TurnReply {
    ++s.turns;
    s.all_texts.push_back(text);
    if (s.stage == Stage::kHandedOff) {
      TurnReply h = Simple(texts_.Reply("after_handoff"), Action::kHandoff);
      h.done = true;
      return h;
    }
    if (s.turns > config_.max_turns) return Handoff(s, "handoff_turns");

    const bool confident =
        u.confidence >= config_.min_confidence && taxonomy_.FindIntent(u.intent) != nullptr;
    const std::string& intent = u.intent;
    if (confident && intent == "human_agent") return Handoff(s, "handoff_request");

    const bool finished = s.stage == Stage::kFinished || s.stage == Stage::kEnded;
    // A reply to a pending question that looks like the value asked for is that value, whatever
    // intent the model gives the phrase on its own.
    const std::string bare_type = BareValueType(s, text, u);
    const bool answers_pending = AnswersPending(s, text, u);
    // The main intent: set, switched, or kept.
    bool switched = false;
    if (confident && IsBusiness(intent) && intent != s.main_intent && bare_type.empty() &&
        !answers_pending) {
      if (s.main_intent.empty() || s.stage == Stage::kOpen) {
        StartMain(s, intent, /*keep_slots=*/true);  // slots said before the problem stay
        switched = true;
      } else if (finished) {
        StartMain(s, intent, /*keep_slots=*/false);  // a new problem in the same call
        switched = true;
      } else if (u.confidence >= config_.switch_confidence) {
        StartMain(s, intent, /*keep_slots=*/true);  // "not the loan, I meant withdrawal"
        switched = true;
      }
    } else if (confident && IsBusiness(intent) && finished) {
      StartMain(s, intent, /*keep_slots=*/false);  // the same question again, or a second one
      switched = true;
    }
    s.caller_texts.push_back(text);

    // Slots: fill or correct the main intent's slots.
    const bool bare_ok = !confident || intent == "provide_info" || intent == "out_of_scope";
    bool changed = false;
    const auto turn_slots =
        TurnSlots(s, text, u, bare_ok && !switched, switched ? std::string() : bare_type);
    for (const auto& t : turn_slots) {
      const SlotFill* old = s.FindSlot(t.fill.type);
      if (!old || old->value != t.fill.value || old->normalized != t.fill.normalized)
        changed = true;
      s.SetSlot(t.fill, t.valid);
    }

    // Two turns in a row that gave neither a confident intent nor a slot: hand off.
    if (!confident && turn_slots.empty()) {
      if (++s.low_confidence_streak >= 2) return Handoff(s, "handoff_unclear");
      std::string again = texts_.Reply("clarify");
      Action action = Action::kClarify;
      if (!s.asking_slot.empty()) {
        auto p = texts_.prompts.find(s.asking_slot);
        if (p != texts_.prompts.end()) again += p->second;
      } else if (s.stage == Stage::kConfirming) {
        again += ReadBack(s).reply;
      }
      return Simple(again, action);
    }
    s.low_confidence_streak = 0;

    if (switched) return Advance(s, changed, u, now);

    if (confident && intent == "goodbye") {
      s.stage = Stage::kEnded;
      s.asking_slot.clear();
      TurnReply e = Simple(texts_.Reply("goodbye"), Action::kEnd);
      e.done = true;
      return e;
    }
    const bool in_progress = !s.main_intent.empty() && !finished && s.stage != Stage::kOpen;
    if (!in_progress) {
      if (confident && intent == "greeting") {
        return Simple(texts_.Reply(s.turns == 1 ? "greet" : "greet_again"), Action::kGreet);
      }
      // Thanks and out-of-scope questions are served calls: they count as answered.
      if (confident && intent == "praise") {
        s.answered = true;
        return Simple(texts_.Reply("praise"), Action::kAnswer);
      }
      if (confident && intent == "out_of_scope" && turn_slots.empty()) {
        s.answered = true;
        return Simple(texts_.Reply("out_of_scope"), Action::kAnswer);
      }
      if (finished && confident && intent == "deny" && turn_slots.empty()) {
        // "还有其他问题吗？" "没有了": the call ends.
        s.stage = Stage::kEnded;
        TurnReply e = Simple(texts_.Reply("goodbye"), Action::kEnd);
        e.done = true;
        return e;
      }
      if (!turn_slots.empty()) return Simple(texts_.Reply("ask_issue"), Action::kClarify);
      return Simple(texts_.Reply(finished ? "greet_again" : "greet"),
                    finished ? Action::kClarify : Action::kGreet);
    }
    return Advance(s, changed, u, now);
  }();
  Finish(s, r);
  return r;
}

TurnReply Policy::Advance(Session& s, bool slots_changed, const nlu::Understanding& u,
                          std::chrono::system_clock::time_point now) const {
  const bool confident = u.confidence >= config_.min_confidence;
  if (s.stage == Stage::kConfirming) {
    if (slots_changed) return ReadBack(s);
    if (confident && u.intent == "affirm") return Dispatch(s, now);
    if (confident && u.intent == "deny") {
      s.stage = Stage::kCorrecting;
      s.asking_slot.clear();
      return Simple(texts_.Reply("ask_correction"), Action::kAskSlot);
    }
    TurnReply r = ReadBack(s);
    r.reply = texts_.Reply("confirm_again") + r.reply;
    return r;
  }
  if (s.stage == Stage::kCorrecting) {
    if (slots_changed) return ReadBack(s);
    if (confident && u.intent == "affirm") return ReadBack(s);
    TurnReply r = Simple(texts_.Reply("ask_correction"), Action::kAskSlot);
    r.slots_reasked = 1;
    return r;
  }
  // Filling: the first missing or rejected required slot.
  const bool is_order = s.main_intent == "order_status" || s.main_intent == "order_urge";
  for (const auto& slot : RequiredSlots(s.main_intent)) {
    if (is_order && slot == "order_id" && !s.FindSlot("order_id") && !s.work_order_id.empty())
      continue;  // the call's own order
    const SlotFill* have = s.FindSlot(slot);
    if (!have) return AskSlot(s, slot, false);
    const size_t i = static_cast<size_t>(have - s.slots.data());
    if (!s.slot_valid[i]) return AskSlot(s, slot, true);
  }
  s.asking_slot.clear();
  if (is_order) return Order(s, now);
  const std::string kind = KindOf(s.main_intent);
  if (kind == "dispatch") return ReadBack(s);
  return Answer(s);
}

TurnReply Policy::AskSlot(Session& s, const std::string& slot, bool invalid) const {
  TurnReply r;
  r.action = Action::kAskSlot;
  if (Contains(s.asked_slots, slot)) {
    r.slots_reasked = 1;
  } else {
    s.asked_slots.push_back(slot);
  }
  auto inv = texts_.invalid_prompts.find(slot);
  if (invalid && inv != texts_.invalid_prompts.end()) {
    r.reply = inv->second;
  } else {
    auto p = texts_.prompts.find(slot);
    r.reply = p != texts_.prompts.end() ? p->second : texts_.Reply("clarify");
  }
  s.stage = Stage::kFilling;
  s.asking_slot = slot;
  return r;
}

TurnReply Policy::ReadBack(Session& s) const {
  s.stage = Stage::kConfirming;
  s.asking_slot.clear();
  std::string tmpl;
  if (auto it = texts_.confirm_by_intent.find(s.main_intent);
      it != texts_.confirm_by_intent.end()) {
    tmpl = it->second;
  } else {
    const auto required = RequiredSlots(s.main_intent);
    auto it2 = required.empty() ? texts_.confirm.end() : texts_.confirm.find(required.front());
    tmpl = it2 != texts_.confirm.end() ? it2->second : texts_.confirm.at("default");
  }
  return Simple(Render(tmpl, SlotVars(s)), Action::kConfirm);
}

TurnReply Policy::Dispatch(Session& s, std::chrono::system_clock::time_point now) const {
  WorkOrder order;
  order.call_id = s.call_id;
  order.department = DeptOf(s.main_intent);
  order.intent = s.main_intent;
  for (size_t i = 0; i < s.all_texts.size(); ++i)
    order.caller_text += (i ? "\n" : "") + s.all_texts[i];
  order.slots = s.slots;
  // Committed (WAL, synchronous=FULL) before the reply announcing it is returned.
  const WorkOrder stored = orders_.Create(std::move(order), now);
  s.work_order_id = stored.id;
  s.dispatched = true;
  s.stage = Stage::kFinished;
  Vars v = SlotVars(s);
  v["order_id"] = stored.id;
  TurnReply r = Simple(Render(texts_.Reply("dispatched"), v), Action::kDispatch);
  r.work_order_id = stored.id;
  r.done = true;
  return r;
}

TurnReply Policy::Answer(Session& s) const {
  const AnswerTopic* topic = kb_.Find(s.main_intent);
  if (!topic)
    throw Error("no answer configured for intent '" + s.main_intent + "'", Code::kInternal);
  std::string words;
  for (const auto& t : s.caller_texts) words += t + "\n";
  const Vars vars = SlotVars(s);
  const AnswerEntry& e = kb_.Choose(*topic, vars, words);
  s.answered = true;
  s.stage = Stage::kFinished;
  return Simple(Render(e.text, vars) + texts_.Reply("anything_else"), Action::kAnswer);
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
  auto issue = texts_.issues.find(order->intent);
  const auto* info = taxonomy_.FindIntent(order->intent);
  v["issue"] = issue != texts_.issues.end() ? issue->second : (info ? info->zh : order->intent);
  s.answered = true;
  s.stage = Stage::kFinished;
  return Simple(
      Render(texts_.Reply(urge ? "order_urge" : "order_status"), v) + texts_.Reply("anything_else"),
      Action::kAnswer);
}

CallSummary Policy::Summarize(const Session& s) const {
  CallSummary c;
  c.call_id = s.call_id;
  c.outcome = s.dispatched   ? "dispatch"
              : s.handed_off ? "human"
              : s.answered   ? "answer"
                             : "abandoned";
  c.intent = s.main_intent;
  c.department = s.main_intent.empty() ? "" : DeptOf(s.main_intent);
  c.slots = s.slots;
  if (s.dispatched) {
    // A call that created an order is summarised by it, even when the caller asked something
    // else afterwards (e.g. how long it will take).
    if (auto order = orders_.Get(s.work_order_id)) {
      c.intent = order->intent;
      c.department = order->department;
      c.slots = order->slots;
    }
  }
  c.work_order_id = s.work_order_id;
  c.turns = s.turns;
  return c;
}

}  // namespace hotline::dialog
