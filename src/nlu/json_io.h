// JSON forms of NLU results, shared by `hotline predict`, `hotline eval` and the frontends.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "nlu/pipeline.h"

namespace hotline::nlu {

// {"intent", "confidence", "department", "business_line", "category", "category_name",
//  "slots": [{"type", "start", "end", "value", "normalized", "valid"}],
//  "top_k": [{"intent", "probability"}], "truncated", "num_tokens"}
// A classifier's answer (Understanding::heads, e.g. heads department and category):
// {"department", "department_score", "top_k": [{"department", "score"}], "category",
//  "category_score", "category_top_k": [{"category", "score"}], "truncated", "num_tokens"}
// (the first head's list is "top_k", the others' "<head>_top_k").
nlohmann::json ToJson(const Understanding& u);

// "2026-11-28T22:00:00+08:00", "...Z" or "2026-11-28 22:00:00" (taken as +08:00, the hotline's
// time zone). std::nullopt when the text is not one of these.
std::optional<std::chrono::system_clock::time_point> ParseIsoTime(const std::string& s);

}  // namespace hotline::nlu
