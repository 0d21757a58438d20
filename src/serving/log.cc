#include "serving/log.h"

#include <chrono>
#include <cstdio>
#include <ctime>

#if __has_include("base/pii.h")
#include "base/pii.h"
#define HOTLINE_HAVE_PII 1
#endif

namespace hotline::serving {

std::string RedactPii(std::string_view text) {
#ifdef HOTLINE_HAVE_PII
  return MaskPii(text);
#else
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    while (j < text.size() &&
           ((text[j] >= '0' && text[j] <= '9') || text[j] == 'X' || text[j] == 'x')) {
      ++j;
    }
    if (j - i >= 6) {
      out.append(j - i, '*');
      i = j;
    } else if (j > i) {
      out.append(text.substr(i, j - i));
      i = j;
    } else {
      out += text[i++];
    }
  }
  return out;
#endif
}

Logger::Logger(Sink sink, bool enabled) : sink_(std::move(sink)), enabled_(enabled) {}

void Logger::Info(std::string_view event, nlohmann::json fields) {
  Write("info", event, std::move(fields));
}
void Logger::Warn(std::string_view event, nlohmann::json fields) {
  Write("warn", event, std::move(fields));
}
void Logger::Error(std::string_view event, nlohmann::json fields) {
  Write("error", event, std::move(fields));
}

void Logger::Write(std::string_view level, std::string_view event, nlohmann::json fields) {
  if (!enabled_) return;
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const int ms = int(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char ts[64];
  std::snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  nlohmann::json line = {{"ts", ts}, {"level", level}, {"event", event}};
  if (fields.is_object()) {
    for (auto& [k, v] : fields.items()) line[k] = std::move(v);
  }
  // Replace invalid UTF-8 instead of throwing: a log line must never take a request down.
  const std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::lock_guard<std::mutex> lock(mu_);
  if (sink_) {
    sink_(text);
  } else {
    std::fprintf(stderr, "%s\n", text.c_str());
  }
}

}  // namespace hotline::serving
