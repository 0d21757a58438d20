// Internal: proleptic Gregorian calendar arithmetic on day numbers (days since 1970-01-01) and the
// Asia/Shanghai (UTC+8) civil time of a system_clock time point.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

namespace hotline::nlu::internal {

struct CivilDate {
  int year = 1970, month = 1, day = 1;
};

int64_t DaysFromCivil(int year, int month, int day);
CivilDate CivilFromDays(int64_t days);
int DaysInMonth(int year, int month);
bool IsValidDate(int year, int month, int day);
// (year, month) moved by `months` (may be negative), floor-correct before year 0.
std::pair<int, int> AddMonths(int year, int month, int64_t months);
// 1 = Monday ... 7 = Sunday.
int IsoWeekday(int64_t days);

// Local (UTC+8) seconds since 1970-01-01T00:00:00+08:00.
int64_t ShanghaiLocalSeconds(std::chrono::system_clock::time_point t);

std::string FormatDate(int64_t days);               // 2026-11-30
std::string FormatDateTime(int64_t local_seconds);  // 2026-11-30T22:00:00+08:00
std::string FormatMonth(int year, int month);       // 2026-11
std::string FormatIsoWeek(int64_t days);            // 2026-W48 (ISO week of `days`)

}  // namespace hotline::nlu::internal
