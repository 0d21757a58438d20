// What the work-order backends share: the JSON columns, the id format, the migrations' count.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dialog/dialog.h"

namespace hotline::dialog::internal {

std::string SlotsToJson(const std::vector<SlotFill>& slots);
// Throws hotline::Error(kDataLoss) naming `where` when the text is not the expected JSON.
std::vector<SlotFill> SlotsFromJson(const std::string& text, const std::string& where);
std::vector<std::string> StringsFromJson(const std::string& text, const std::string& where);
// "WO" + day + "-" + 6 digits.
std::string FormatOrderId(const std::string& day, long long seq);
// Statuses a repeat report may join (FindDuplicate).
inline constexpr const char* kJoinableStatuses = "('open', 'in_progress')";

}  // namespace hotline::dialog::internal
