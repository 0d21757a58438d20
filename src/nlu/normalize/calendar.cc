#include "nlu/normalize/calendar.h"

#include <cstdio>

#include "nlu/normalize/normalize.h"

namespace hotline::nlu::internal {

// Howard Hinnant's days_from_civil / civil_from_days.
int64_t DaysFromCivil(int year, int month, int day) {
  const int64_t y = static_cast<int64_t>(year) - (month <= 2 ? 1 : 0);
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

CivilDate CivilFromDays(int64_t z) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const int64_t doe = z - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t y = yoe + era * 400;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  const int64_t d = doy - (153 * mp + 2) / 5 + 1;
  const int64_t m = mp < 10 ? mp + 3 : mp - 9;
  return {static_cast<int>(y + (m <= 2 ? 1 : 0)), static_cast<int>(m), static_cast<int>(d)};
}

int DaysInMonth(int year, int month) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (month == 2) {
    const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    return leap ? 29 : 28;
  }
  return kDays[month - 1];
}

bool IsValidDate(int year, int month, int day) {
  return year >= 1 && year <= 9999 && month >= 1 && month <= 12 && day >= 1 &&
         day <= DaysInMonth(year, month);
}

std::pair<int, int> AddMonths(int year, int month, int64_t months) {
  const int64_t m = year * 12LL + (month - 1) + months;
  int64_t y = m / 12, mo = m % 12;
  if (mo < 0) mo += 12, y -= 1;
  return {static_cast<int>(y), static_cast<int>(mo) + 1};
}

int IsoWeekday(int64_t days) {
  // 1970-01-01 was a Thursday (4).
  int64_t w = (days + 3) % 7;
  if (w < 0) w += 7;
  return static_cast<int>(w) + 1;
}

int64_t ShanghaiLocalSeconds(std::chrono::system_clock::time_point t) {
  const int64_t utc = std::chrono::floor<std::chrono::seconds>(t.time_since_epoch()).count();
  return utc + kShanghaiUtcOffsetSeconds;
}

static int64_t FloorDiv(int64_t a, int64_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
}

std::string FormatDate(int64_t days) {
  const CivilDate c = CivilFromDays(days);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02d", c.year, c.month, c.day);
  return buf;
}

std::string FormatDateTime(int64_t local_seconds) {
  const int64_t days = FloorDiv(local_seconds, 86400);
  const int64_t sod = local_seconds - days * 86400;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%sT%02d:%02d:%02d+08:00", FormatDate(days).c_str(),
                static_cast<int>(sod / 3600), static_cast<int>(sod / 60 % 60),
                static_cast<int>(sod % 60));
  return buf;
}

std::string FormatMonth(int year, int month) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04d-%02d", year, month);
  return buf;
}

std::string FormatIsoWeek(int64_t days) {
  // The ISO year is the year of the week's Thursday.
  const int64_t thursday = days - IsoWeekday(days) + 4;
  const CivilDate c = CivilFromDays(thursday);
  const int64_t week = (thursday - DaysFromCivil(c.year, 1, 1)) / 7 + 1;
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04d-W%02d", c.year, static_cast<int>(week));
  return buf;
}

}  // namespace hotline::nlu::internal
