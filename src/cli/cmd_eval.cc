// hotline eval --model DIR --data FILE.jsonl [--json] [--precision P] [--backend B]
// Scores the model on labelled utterances (config/taxonomy/README.md's JSON Lines format: text,
// intent, slots [{type, start, end, value}], optionally reference_time). Intent accuracy; slot
// precision, recall and F1 on exact (type, start, end); per-intent table (n, correct, accuracy =
// recall, precision, f1); the most frequent confusion pairs. --json prints one object:
//   {"n", "intent_accuracy", "slot_precision", "slot_recall", "slot_f1", "slot_tp",
//    "slot_predicted", "slot_gold", "per_intent": {id: {...}}, "per_slot": {type: {...}},
//    "confusions": [{"gold", "predicted", "count"}], "seconds"}
#ifdef HOTLINE_HAVE_NLU
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>

#include "base/error.h"
#include "cli/command.h"
#include "nlu/json_io.h"
#include "nlu/pipeline.h"

namespace {

struct Options {
  std::string model, data, precision, backend = "cpu";
  bool json = false;
  int batch = 32;
};

struct Example {
  std::string text, intent;
  std::set<std::tuple<std::string, int, int>> slots;
  std::chrono::system_clock::time_point ref;
};

std::vector<Example> ReadData(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw hotline::Error("cannot open data file '" + path + "'", hotline::Code::kNotFound);
  std::vector<Example> out;
  std::string line;
  int no = 0;
  const auto now = std::chrono::system_clock::now();
  while (std::getline(in, line)) {
    ++no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      auto j = nlohmann::json::parse(line);
      Example e;
      e.text = j.at("text").get<std::string>();
      e.intent = j.at("intent").get<std::string>();
      e.ref = now;
      if (j.contains("reference_time")) {
        auto t = hotline::nlu::ParseIsoTime(j["reference_time"].get<std::string>());
        if (!t) throw hotline::Error("reference_time is not ISO-8601");
        e.ref = *t;
      }
      if (j.contains("slots"))
        for (const auto& s : j["slots"])
          e.slots.insert({s.at("type").get<std::string>(), s.at("start").get<int>(),
                          s.at("end").get<int>()});
      out.push_back(std::move(e));
    } catch (const std::exception& ex) {
      throw hotline::Error(path + ":" + std::to_string(no) +
                           ": expected {\"text\", \"intent\", \"slots\": [{type, start, end}]}: " +
                           ex.what());
    }
  }
  return out;
}

double Ratio(double a, double b) { return b > 0 ? a / b : 0.0; }
double F1(double p, double r) { return p + r > 0 ? 2 * p * r / (p + r) : 0.0; }

hotline::cli::Registrar reg(
    "eval", "Score a model on labelled utterances (intent accuracy, slot F1)", [](CLI::App& app) {
      auto o = std::make_shared<Options>();
      app.add_option("--model", o->model, "model folder")->required();
      app.add_option("--data", o->data, "JSON Lines with text, intent, slots")->required();
      app.add_flag("--json", o->json, "print one JSON object");
      app.add_option("--precision", o->precision, "fp32|fp16|bf16|int8|fp8 (default: model's)");
      app.add_option("--backend", o->backend, "cpu|cuda");
      app.add_option("--batch", o->batch, "texts per engine run")->check(CLI::Range(1, 4096));
      return [o]() -> int {
        namespace nlu = hotline::nlu;
        const auto data = ReadData(o->data);
        nlu::PipelineOptions popts;
        popts.precision = hotline::engine::ParsePrecision(
            o->precision.empty() ? nlu::ModelConfig::Load(o->model).precision : o->precision);
        popts.backend = hotline::engine::ParseBackend(o->backend);
        auto pipeline = nlu::Pipeline::Open(o->model, popts);

        const auto t0 = std::chrono::steady_clock::now();
        struct IntentStats { int n = 0, correct = 0, predicted = 0; };
        struct SlotStats { int tp = 0, pred = 0, gold = 0; };
        std::map<std::string, IntentStats> per_intent;
        std::map<std::string, SlotStats> per_slot;
        std::map<std::pair<std::string, std::string>, int> confusions;
        int correct = 0, tp = 0, n_pred = 0, n_gold = 0;
        for (size_t a = 0; a < data.size(); a += o->batch) {
          const size_t b = std::min(data.size(), a + size_t(o->batch));
          std::vector<std::string> texts;
          for (size_t i = a; i < b; ++i) texts.push_back(data[i].text);
          const auto results = pipeline->Understand(texts, data[a].ref);
          for (size_t i = a; i < b; ++i) {
            const Example& e = data[i];
            const nlu::Understanding& u = results[i - a];
            per_intent[e.intent].n++;
            per_intent[u.intent].predicted++;
            if (u.intent == e.intent) {
              ++correct;
              per_intent[e.intent].correct++;
            } else {
              confusions[{e.intent, u.intent}]++;
            }
            for (const auto& s : e.slots) per_slot[std::get<0>(s)].gold++;
            n_gold += int(e.slots.size());
            for (const nlu::Slot& s : u.slots) {
              ++n_pred;
              per_slot[s.type].pred++;
              if (e.slots.count({s.type, s.start, s.end})) {
                ++tp;
                per_slot[s.type].tp++;
              }
            }
          }
        }
        const double secs =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double p = Ratio(tp, n_pred), r = Ratio(tp, n_gold);
        nlohmann::json j = {{"n", data.size()},
                            {"intent_accuracy", Ratio(correct, double(data.size()))},
                            {"slot_precision", p},
                            {"slot_recall", r},
                            {"slot_f1", F1(p, r)},
                            {"slot_tp", tp},
                            {"slot_predicted", n_pred},
                            {"slot_gold", n_gold},
                            {"seconds", secs}};
        j["per_intent"] = nlohmann::json::object();
        for (const auto& [id, s] : per_intent) {
          const double ip = Ratio(s.correct, s.predicted), ir = Ratio(s.correct, s.n);
          j["per_intent"][id] = {{"n", s.n},         {"correct", s.correct},
                                 {"predicted", s.predicted}, {"accuracy", ir},
                                 {"precision", ip},  {"f1", F1(ip, ir)}};
        }
        j["per_slot"] = nlohmann::json::object();
        for (const auto& [type, s] : per_slot) {
          const double sp = Ratio(s.tp, s.pred), sr = Ratio(s.tp, s.gold);
          j["per_slot"][type] = {{"gold", s.gold}, {"predicted", s.pred}, {"tp", s.tp},
                                 {"precision", sp}, {"recall", sr},     {"f1", F1(sp, sr)}};
        }
        std::vector<std::pair<int, std::pair<std::string, std::string>>> conf;
        for (const auto& [k, c] : confusions) conf.push_back({c, k});
        std::sort(conf.begin(), conf.end(),
                  [](const auto& x, const auto& y) { return x.first > y.first ||
                                                            (x.first == y.first && x.second < y.second); });
        if (conf.size() > 20) conf.resize(20);
        j["confusions"] = nlohmann::json::array();
        for (const auto& [c, k] : conf)
          j["confusions"].push_back({{"gold", k.first}, {"predicted", k.second}, {"count", c}});

        if (o->json) {
          std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
          return 0;
        }
        std::printf("n=%zu  intent accuracy %.4f  slots P %.4f R %.4f F1 %.4f  (%.1f s)\n\n",
                    data.size(), j["intent_accuracy"].get<double>(), p, r, F1(p, r), secs);
        std::printf("%-28s %6s %8s %9s %6s\n", "intent", "n", "accuracy", "precision", "f1");
        for (const auto& [id, s] : j["per_intent"].items())
          if (s["n"].get<int>() > 0)
            std::printf("%-28s %6d %8.4f %9.4f %6.4f\n", id.c_str(), s["n"].get<int>(),
                        s["accuracy"].get<double>(), s["precision"].get<double>(),
                        s["f1"].get<double>());
        std::printf("\n%-16s %6s %6s %9s %6s %6s\n", "slot", "gold", "pred", "precision", "recall",
                    "f1");
        for (const auto& [type, s] : j["per_slot"].items())
          std::printf("%-16s %6d %6d %9.4f %6.4f %6.4f\n", type.c_str(), s["gold"].get<int>(),
                      s["predicted"].get<int>(), s["precision"].get<double>(),
                      s["recall"].get<double>(), s["f1"].get<double>());
        if (!conf.empty()) {
          std::printf("\nconfusions (gold -> predicted: count)\n");
          for (const auto& [c, k] : conf)
            std::printf("  %s -> %s: %d\n", k.first.c_str(), k.second.c_str(), c);
        }
        return 0;
      };
    });

}  // namespace
#endif  // HOTLINE_HAVE_NLU
