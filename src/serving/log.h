// Structured JSON logs, one object per line: {"ts", "level", "event", ...fields}. Callers pass
// anything a caller supplied (request ids, messages that may quote input) through RedactPii()
// first: logs never hold an ID card or phone number in clear.
#pragma once

#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace hotline::serving {

// Masks ID-card and phone numbers (base/pii.h's MaskPii when it is built in; otherwise every run
// of 6 or more digits, which covers both).
std::string RedactPii(std::string_view text);

class Logger {
 public:
  using Sink = std::function<void(const std::string& line)>;
  // Without a sink, lines go to stderr.
  explicit Logger(Sink sink = nullptr, bool enabled = true);
  void Info(std::string_view event, nlohmann::json fields = nlohmann::json::object());
  void Warn(std::string_view event, nlohmann::json fields = nlohmann::json::object());
  void Error(std::string_view event, nlohmann::json fields = nlohmann::json::object());

 private:
  void Write(std::string_view level, std::string_view event, nlohmann::json fields);
  Sink sink_;
  bool enabled_;
  std::mutex mu_;  // serialises whole lines
};

}  // namespace hotline::serving
