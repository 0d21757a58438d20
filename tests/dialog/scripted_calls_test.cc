// Runs the scripted calls (tests/dialog/*.jsonl, format in README.md) through the shipped default
// model (nlu::Pipeline, CPU fp32) and a DialogManager (in-memory sessions, a fresh SQLite file):
// every turn's text is understood by the real model, nothing is hand-fed. A failing call prints
// its transcript with what the model understood at each turn, so a reader can tell a model miss
// from a policy bug. The per-call results also go to <build>/dialog-test/scripted_calls.txt.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "base/error.h"
#include "dialog/dialog.h"
#include "nlu/pipeline.h"
#include "test_util.h"

namespace hotline::dialog {
namespace {

struct Call {
  std::string file, name;
  nlohmann::json j;
};

std::vector<Call> LoadCalls() {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(testing::SourcePath("tests/dialog")))
    if (e.path().extension() == ".jsonl") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<Call> calls;
  for (const auto& f : files) {
    std::ifstream in(f);
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      ++n;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      Call c;
      c.file = f.filename().string() + ":" + std::to_string(n);
      try {
        c.j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw Error(c.file + ": not JSON: " + e.what());
      }
      if (!c.j.contains("name") || !c.j.contains("turns") || !c.j.contains("expect") ||
          !c.j["expect"].contains("outcome"))
        throw Error(c.file + ": a call needs name, turns and expect.outcome");
      c.name = c.j["name"].get<std::string>();
      calls.push_back(std::move(c));
    }
  }
  return calls;
}

// RFC 3339 with Z or ±HH:MM.
std::chrono::system_clock::time_point ParseTime(const std::string& s) {
  std::tm tm{};
  const char* rest = strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!rest) throw Error("reference_time '" + s + "' is not RFC 3339");
  int64_t t = timegm(&tm);
  const std::string zone(rest);
  if (zone.size() == 6 && (zone[0] == '+' || zone[0] == '-')) {
    const int off = std::stoi(zone.substr(1, 2)) * 3600 + std::stoi(zone.substr(4, 2)) * 60;
    t -= zone[0] == '+' ? off : -off;
  } else if (zone != "Z") {
    throw Error("reference_time '" + s + "': unknown zone '" + zone + "'");
  }
  return std::chrono::system_clock::time_point(std::chrono::seconds(t));
}

std::string Describe(const nlu::Understanding& u) {
  std::ostringstream o;
  o << u.intent << " " << std::fixed;
  o.precision(2);
  o << u.confidence;
  for (const auto& s : u.slots) o << " " << s.type << "=" << s.value;
  return o.str();
}

TEST(ScriptedCallsTest, EveryCallThroughTheDefaultModel) {
  const std::vector<Call> calls = LoadCalls();
  ASSERT_GE(calls.size(), 30u);
  std::set<std::string> names;
  for (const auto& c : calls)
    ASSERT_TRUE(names.insert(c.name).second) << "duplicate name " << c.name;

  nlu::PipelineOptions opts;
  auto pipeline = nlu::Pipeline::Open(testing::SourcePath("models/default"), opts);
  DialogConfig config = testing::TestConfig("scripted");
  auto dm = DialogManager::Create(config, pipeline->taxonomy());

  std::map<std::string, std::string> orders;  // call name → work-order id it created
  std::ofstream report(std::filesystem::path(config.work_order_db).parent_path().parent_path() /
                       "scripted_calls.txt");
  int passed = 0;
  for (const auto& c : calls) {
    const nlohmann::json& ex = c.j["expect"];
    const auto now = c.j.contains("reference_time")
                         ? ParseTime(c.j["reference_time"].get<std::string>())
                         : std::chrono::system_clock::now();
    const std::string call_id = "script-" + std::to_string(&c - calls.data());
    std::ostringstream log;
    std::vector<std::string> problems;
    std::vector<TurnReply> replies;
    for (const auto& turn : c.j["turns"]) {
      std::string text = turn.get<std::string>();
      // {order:NAME} → the order the earlier call NAME created.
      std::smatch m;
      while (std::regex_search(text, m, std::regex("\\{order:([^}]+)\\}"))) {
        auto it = orders.find(m[1].str());
        if (it == orders.end()) {
          problems.push_back("{order:" + m[1].str() + "}: that call created no order");
          break;
        }
        text = m.prefix().str() + it->second + m.suffix().str();
      }
      const nlu::Understanding u = pipeline->Understand({text}, now).at(0);
      replies.push_back(dm->Turn(call_id, text, u, now));
      const TurnReply& r = replies.back();
      log << "  caller: " << text << "\n    nlu: " << Describe(u) << "\n    bot ["
          << ActionName(r.action) << "]: " << r.reply << "\n    acts:";
      for (const auto& a : r.acts) log << " " << a;
      log << "\n";
    }
    const CallSummary s = dm->EndCall(call_id);
    if (!s.work_order_id.empty()) orders[c.name] = s.work_order_id;
    auto check = [&](bool ok, const std::string& what) {
      if (!ok) problems.push_back(what);
    };
    // "outcome": one outcome, or a list of the acceptable ones.
    std::vector<std::string> outcomes;
    if (ex["outcome"].is_array())
      for (const auto& o : ex["outcome"]) outcomes.push_back(o.get<std::string>());
    else
      outcomes.push_back(ex["outcome"].get<std::string>());
    std::string expected;
    for (const auto& o : outcomes) expected += (expected.empty() ? "" : " or ") + o;
    check(std::find(outcomes.begin(), outcomes.end(), s.outcome) != outcomes.end(),
          "outcome " + s.outcome + ", expected " + expected);
    if (ex.contains("intent"))
      check(s.intent == ex["intent"].get<std::string>(),
            "intent " + s.intent + ", expected " + ex["intent"].get<std::string>());
    if (ex.contains("department"))
      check(s.department == ex["department"].get<std::string>(),
            "department " + s.department + ", expected " + ex["department"].get<std::string>());
    for (const char* field : {"slots", "normalized"}) {
      if (!ex.contains(field)) continue;
      for (const auto& [type, want] : ex[field].items()) {
        std::string got = "<none>";
        for (const auto& f : s.slots)
          if (f.type == type) got = std::string(field) == "slots" ? f.value : f.normalized;
        check(got == want.get<std::string>(), std::string(field) + "." + type + " '" + got +
                                                  "', expected '" + want.get<std::string>() + "'");
      }
    }
    if (ex.contains("work_order")) {
      const bool want = ex["work_order"].get<bool>();
      check(want == !s.work_order_id.empty(), want ? "no work order" : "unexpected work order");
      if (want && !s.work_order_id.empty()) {
        auto o = dm->GetWorkOrder(s.work_order_id);
        check(o && o->intent == s.intent && o->department == s.department,
              "work order not stored as summarised");
      }
    }
    if (ex.contains("done") && !replies.empty())
      check(replies.back().done == ex["done"].get<bool>(), "last turn's done differs");
    if (ex.contains("actions")) {
      const auto& actions = ex["actions"];
      check(actions.size() == replies.size(), "actions has a different length than turns");
      for (size_t i = 0; i < std::min(actions.size(), replies.size()); ++i) {
        if (actions[i].is_null()) continue;
        const std::string want = actions[i].get<std::string>();
        check(ActionName(replies[i].action) == want,
              "turn " + std::to_string(i + 1) + " action " +
                  std::string(ActionName(replies[i].action)) + ", expected " + want);
      }
    }
    if (ex.contains("acts")) {
      // Per turn: null (not checked) or the acts that turn must carry (others may come too).
      const auto& acts = ex["acts"];
      check(acts.size() == replies.size(), "acts has a different length than turns");
      for (size_t i = 0; i < std::min(acts.size(), replies.size()); ++i) {
        if (acts[i].is_null()) continue;
        for (const auto& want : acts[i]) {
          const auto& got = replies[i].acts;
          if (std::find(got.begin(), got.end(), want.get<std::string>()) == got.end()) {
            std::string all;
            for (const auto& g : got) all += g + " ";
            check(false, "turn " + std::to_string(i + 1) + " lacks act " +
                             want.get<std::string>() + " (has: " + all + ")");
          }
        }
      }
    }
    std::set<std::string> order_ids;
    bool merged = false;
    std::string transfer;
    for (const auto& i : s.issues) {
      if (!i.work_order_id.empty()) order_ids.insert(i.work_order_id);
      merged = merged || i.outcome == "merged";
      if (!i.transfer_to.empty()) transfer = i.transfer_to;
    }
    if (ex.contains("work_orders"))
      check(int(order_ids.size()) == ex["work_orders"].get<int>(),
            "work orders " + std::to_string(order_ids.size()) + ", expected " +
                std::to_string(ex["work_orders"].get<int>()));
    if (ex.contains("merged"))
      check(merged == ex["merged"].get<bool>(), merged ? "merged, expected not" : "not merged");
    if (ex.contains("transfer_to"))
      check(transfer == ex["transfer_to"].get<std::string>(),
            "transfer to '" + transfer + "', expected '" + ex["transfer_to"].get<std::string>() +
                "'");
    if (ex.contains("issues")) {
      // In order: each listed field of each issue must match.
      const auto& want = ex["issues"];
      check(want.size() == s.issues.size(), "issues " + std::to_string(s.issues.size()) +
                                                ", expected " + std::to_string(want.size()));
      for (size_t i = 0; i < std::min(want.size(), s.issues.size()); ++i) {
        const CallIssue& got = s.issues[i];
        for (const auto& [key, value] : want[i].items()) {
          const std::string v = value.get<std::string>();
          const std::string g = key == "intent"       ? got.intent
                                : key == "kind"       ? got.kind
                                : key == "department" ? got.department
                                : key == "outcome"    ? got.outcome
                                                      : "<unknown field " + key + ">";
          check(g == v, "issue " + std::to_string(i + 1) + " " + key + " '" + g + "', expected '" +
                            v + "'");
        }
      }
    }
    if (ex.contains("order_text_contains") && !s.work_order_id.empty()) {
      auto o = dm->GetWorkOrder(s.work_order_id);
      for (const auto& w : ex["order_text_contains"])
        check(o && o->summary.find(w.get<std::string>()) != std::string::npos,
              "work order text lacks '" + w.get<std::string>() + "': " + (o ? o->summary : ""));
    }
    if (ex.contains("reply_contains") && !replies.empty()) {
      const std::string want = ex["reply_contains"].get<std::string>();
      check(replies.back().reply.find(want) != std::string::npos,
            "last reply lacks '" + want + "'");
    }
    std::string verdict = problems.empty() ? "PASS" : "FAIL";
    report << verdict << " " << c.name << " (" << c.file << ")\n";
    for (const auto& p : problems) report << "  - " << p << "\n";
    report << log.str() << "  summary: " << s.outcome << " " << s.intent << " " << s.department;
    for (const auto& i : s.issues)
      report << " [" << i.kind << " " << i.intent << " " << i.outcome << " " << i.work_order_id
             << "]";
    report << "\n";
    if (problems.empty()) {
      ++passed;
    } else {
      std::string all;
      for (const auto& p : problems) all += "\n  - " + p;
      ADD_FAILURE() << "call " << c.name << " (" << c.file << "):" << all << "\n" << log.str();
    }
  }
  std::cout << "[scripted calls] " << passed << "/" << calls.size() << " passed\n";
}

}  // namespace
}  // namespace hotline::dialog
