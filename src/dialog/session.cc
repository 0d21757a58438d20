#include "dialog/session.h"

#include <array>

#include "base/error.h"

namespace hotline::dialog {
namespace {

constexpr std::array<std::pair<Stage, std::string_view>, 7> kStages = {{
    {Stage::kOpen, "open"},
    {Stage::kFilling, "filling"},
    {Stage::kConfirming, "confirming"},
    {Stage::kCorrecting, "correcting"},
    {Stage::kFinished, "finished"},
    {Stage::kHandedOff, "handed_off"},
    {Stage::kEnded, "ended"},
}};

Stage StageFromName(const std::string& name) {
  for (const auto& [stage, n] : kStages)
    if (n == name) return stage;
  throw Error("session JSON: unknown stage '" + name + "'", Code::kDataLoss);
}

}  // namespace

std::string_view StageName(Stage stage) {
  for (const auto& [s, n] : kStages)
    if (s == stage) return n;
  return "open";
}

const SlotFill* Session::FindSlot(const std::string& type) const {
  for (const auto& s : slots)
    if (s.type == type) return &s;
  return nullptr;
}

void Session::SetSlot(const SlotFill& fill, bool valid) {
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].type == fill.type) {
      slots[i] = fill;
      slot_valid[i] = valid;
      return;
    }
  }
  slots.push_back(fill);
  slot_valid.push_back(valid);
}

namespace {

nlohmann::json SlotsJson(const std::vector<SlotFill>& slots) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& f : slots) a.push_back({{"type", f.type}, {"value", f.value}, {"normalized", f.normalized}});
  return a;
}

std::vector<SlotFill> SlotsFrom(const nlohmann::json& a) {
  std::vector<SlotFill> out;
  for (const auto& x : a)
    out.push_back({x.at("type").get<std::string>(), x.at("value").get<std::string>(),
                   x.at("normalized").get<std::string>()});
  return out;
}

nlohmann::json IssuesJson(const std::vector<CallIssue>& v) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& i : v)
    a.push_back({{"intent", i.intent}, {"kind", i.kind}, {"department", i.department},
                 {"outcome", i.outcome}, {"work_order_id", i.work_order_id},
                 {"transfer_to", i.transfer_to}, {"slots", SlotsJson(i.slots)}, {"said", i.said}});
  return a;
}

std::vector<CallIssue> IssuesFrom(const nlohmann::json& a) {
  std::vector<CallIssue> out;
  for (const auto& x : a) {
    CallIssue i;
    i.intent = x.at("intent").get<std::string>();
    i.kind = x.at("kind").get<std::string>();
    i.department = x.at("department").get<std::string>();
    i.outcome = x.at("outcome").get<std::string>();
    i.work_order_id = x.at("work_order_id").get<std::string>();
    i.transfer_to = x.at("transfer_to").get<std::string>();
    i.slots = SlotsFrom(x.at("slots"));
    i.said = x.value("said", "");
    out.push_back(std::move(i));
  }
  return out;
}

}  // namespace

nlohmann::json SessionToJson(const Session& s) {
  nlohmann::json slots = nlohmann::json::array();
  for (size_t i = 0; i < s.slots.size(); ++i) {
    slots.push_back({{"type", s.slots[i].type},
                     {"value", s.slots[i].value},
                     {"normalized", s.slots[i].normalized},
                     {"valid", i < s.slot_valid.size() ? bool(s.slot_valid[i]) : true}});
  }
  return {{"version", s.version},
          {"call_id", s.call_id},
          {"main_intent", s.main_intent},
          {"stage", StageName(s.stage)},
          {"slots", slots},
          {"asking_slot", s.asking_slot},
          {"asked_slots", s.asked_slots},
          {"turns", s.turns},
          {"low_confidence_streak", s.low_confidence_streak},
          {"order_misses", s.order_misses},
          {"caller_texts", s.caller_texts},
          {"all_texts", s.all_texts},
          {"work_order_id", s.work_order_id},
          {"dispatched", s.dispatched},
          {"answered", s.answered},
          {"handed_off", s.handed_off},
          {"issues", IssuesJson(s.issues)},
          {"queued", IssuesJson(s.queued)},
          {"active_open", s.active_open},
          {"unverified", s.unverified},
          {"asks", s.asks},
          {"no_match", s.no_match},
          {"no_input", s.no_input},
          {"confirm_misses", s.confirm_misses},
          {"finished_turn", s.finished_turn},
          {"transferred", s.transferred}};
}

Session SessionFromJson(const nlohmann::json& j) {
  Session s;
  try {
    s.version = j.at("version").get<int>();
    if (s.version != 1) {
      throw Error("session JSON: layout version " + std::to_string(s.version) +
                      ", this build reads version 1",
                  Code::kDataLoss);
    }
    s.call_id = j.at("call_id").get<std::string>();
    s.main_intent = j.at("main_intent").get<std::string>();
    s.stage = StageFromName(j.at("stage").get<std::string>());
    for (const auto& x : j.at("slots")) {
      s.slots.push_back({x.at("type").get<std::string>(), x.at("value").get<std::string>(),
                         x.at("normalized").get<std::string>()});
      s.slot_valid.push_back(x.at("valid").get<bool>());
    }
    s.asking_slot = j.at("asking_slot").get<std::string>();
    s.asked_slots = j.at("asked_slots").get<std::vector<std::string>>();
    s.turns = j.at("turns").get<int>();
    s.low_confidence_streak = j.at("low_confidence_streak").get<int>();
    s.order_misses = j.at("order_misses").get<int>();
    s.caller_texts = j.at("caller_texts").get<std::vector<std::string>>();
    s.all_texts = j.at("all_texts").get<std::vector<std::string>>();
    s.work_order_id = j.at("work_order_id").get<std::string>();
    s.dispatched = j.at("dispatched").get<bool>();
    s.answered = j.at("answered").get<bool>();
    s.handed_off = j.at("handed_off").get<bool>();
    // Fields added later in layout 1: absent in sessions written by an older build.
    if (j.contains("issues")) {
      s.issues = IssuesFrom(j.at("issues"));
      s.queued = IssuesFrom(j.at("queued"));
      s.active_open = j.at("active_open").get<bool>();
      s.unverified = j.at("unverified").get<std::vector<std::string>>();
      s.asks = j.at("asks").get<std::map<std::string, int>>();
      s.no_match = j.at("no_match").get<std::map<std::string, int>>();
      s.no_input = j.at("no_input").get<std::map<std::string, int>>();
      s.confirm_misses = j.at("confirm_misses").get<int>();
      s.finished_turn = j.at("finished_turn").get<int>();
      s.transferred = j.at("transferred").get<bool>();
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("session JSON is not a dialog session: ") + e.what(), Code::kDataLoss);
  }
  return s;
}

}  // namespace hotline::dialog
