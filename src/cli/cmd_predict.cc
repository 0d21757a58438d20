// hotline predict --model DIR [--text T ...] [--precision P] [--backend B] [--batch N] [--top-k K]
// Text lines, or JSON lines with "text" (and optionally "reference_time": ISO-8601), on stdin, or
// the --text values; one JSON line per input on stdout (nlu/json_io.h):
//   {"intent", "confidence", "department", "business_line", "category", "category_name",
//    "slots": [{"type", "start", "end", "value", "normalized", "valid"}],
//    "top_k": [{"intent", "probability"}], "truncated", "num_tokens"}
// or, for a classifier folder (kind: classifier; --top-k default: model.yaml's top_k, 5):
//   {"department", "department_score", "top_k": [{"department", "score"}], "category",
//    "category_score", "category_top_k": [{"category", "score"}], "truncated", "num_tokens"}
// The model folder's plan for the precision (default: model.yaml's) and backend is built and
// cached when missing. A bad line (invalid UTF-8, JSON without "text") gets {"error": "..."} and
// the command goes on; the exit code is then 1.
#ifdef HOTLINE_HAVE_NLU
#include <chrono>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "base/error.h"
#include "cli/command.h"
#include "nlu/json_io.h"
#include "nlu/int8_folder.h"
#include "nlu/pipeline.h"

namespace {

struct Options {
  std::string model, precision, backend = "cpu";
  int batch = 1, top_k = 3;
  std::vector<std::string> texts;  // --text: instead of stdin
};

struct Input {
  std::string text, error;
  std::chrono::system_clock::time_point ref;
};

Input Parse(const std::string& line, std::chrono::system_clock::time_point now) {
  Input in{line, "", now};
  if (line.empty() || line[0] != '{') return in;
  try {
    auto j = nlohmann::json::parse(line);
    if (!j.contains("text") || !j["text"].is_string()) {
      in.error = "JSON input line needs a \"text\" string";
      return in;
    }
    in.text = j["text"].get<std::string>();
    if (j.contains("reference_time")) {
      auto t = j["reference_time"].is_string()
                   ? hotline::nlu::ParseIsoTime(j["reference_time"].get<std::string>())
                   : std::nullopt;
      if (!t) in.error = "reference_time must be ISO-8601 like 2026-11-28T22:00:00+08:00";
      else in.ref = *t;
    }
  } catch (const nlohmann::json::exception&) {
    in.text = line;  // not JSON after all: a text line that starts with '{'
  }
  return in;
}

hotline::cli::Registrar reg(
    "predict", "Intent, slots and department (or a classifier's labels) for texts (JSON lines)",
    [](CLI::App& app) {
      auto o = std::make_shared<Options>();
      app.add_option("--model", o->model, "model folder (model.yaml, vocab, labels, ONNX)")
          ->required();
      app.add_option("--precision", o->precision,
                     "auto|fp32|fp16|bf16|int8|fp8 (default: model's; int8 reads the folder's "
                     "int8_calibration.json, from `hotline calibrate`)");
      app.add_option("--backend", o->backend, "cpu|cuda");
      app.add_option("--batch", o->batch, "lines per engine run (waits for that many lines)")
          ->check(CLI::Range(1, 4096));
      CLI::Option* top_k = app.add_option("--top-k", o->top_k,
                                          "intents (classifier: labels per head) listed in top_k")
                               ->check(CLI::Range(1, 100));
      app.add_option("--text", o->texts, "a text to answer (repeatable); default: stdin lines");
      return [o, top_k]() -> int {
        namespace nlu = hotline::nlu;
        nlu::PipelineOptions popts;
        popts.backend = hotline::engine::ParseBackend(o->backend);
        popts.precision =
            nlu::ResolvePrecision(o->precision, nlu::ModelConfig::Load(o->model), popts.backend);
        popts.top_k = o->top_k;
        if (top_k->count() > 0) popts.head_top_k = o->top_k;
        auto pipeline = nlu::Pipeline::Open(o->model, popts);
        std::ios::sync_with_stdio(false);
        int rc = 0;
        std::vector<Input> inputs;
        auto flush = [&] {
          // Texts that failed to parse are answered alone; the rest go in one batch, and a text
          // the pipeline rejects (invalid UTF-8) is retried alone to name it.
          std::vector<std::string> texts;
          for (const auto& in : inputs)
            if (in.error.empty()) texts.push_back(in.text);
          std::vector<nlu::Understanding> results;
          bool batch_ok = true;
          try {
            // One reference time per batch: the first line's (lines normally share "now").
            if (!texts.empty()) results = pipeline->Understand(texts, inputs.front().ref);
          } catch (const hotline::Error&) {
            batch_ok = false;
          }
          size_t r = 0;
          for (const auto& in : inputs) {
            nlohmann::json out;
            if (!in.error.empty()) {
              out = {{"error", in.error}};
            } else {
              try {
                out = nlu::ToJson(batch_ok ? results[r] : pipeline->Understand({in.text}, in.ref)[0]);
              } catch (const hotline::Error& e) {
                out = {{"error", e.what()}};
              }
              ++r;
            }
            if (out.contains("error")) rc = 1;
            std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
          }
          std::cout.flush();
          inputs.clear();
        };
        std::string line;
        for (const std::string& text : o->texts) {
          inputs.push_back({text, "", std::chrono::system_clock::now()});
          if (int(inputs.size()) >= o->batch) flush();
        }
        while (o->texts.empty() && std::getline(std::cin, line)) {
          if (!line.empty() && line.back() == '\r') line.pop_back();
          inputs.push_back(Parse(line, std::chrono::system_clock::now()));
          if (int(inputs.size()) >= o->batch) flush();
        }
        if (!inputs.empty()) flush();
        return rc;
      };
    });

}  // namespace
#endif  // HOTLINE_HAVE_NLU
