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
// A number for a random id: 1..999999 from the system's random source (getrandom), so ids
// issued before do not tell the next ones.
long long RandomOrderNumber();
// Free numbers tried before Create gives up on a day (it has then issued most of a million).
inline constexpr int kRandomIdTries = 64;
// Statuses a repeat report may join (FindDuplicate).
inline constexpr const char* kJoinableStatuses = "('open', 'in_progress')";

}  // namespace hotline::dialog::internal
