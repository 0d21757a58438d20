#include <gtest/gtest.h>

#include <vector>

#include "case_util.h"
#include "nlu/normalize/normalize.h"

namespace hotline::nlu {
namespace {

using testing::Case;
using testing::Shanghai;

// Reference: Tuesday 2026-12-01 16:23:45 in Shanghai. Its ISO week is 2026-W49 (Monday
// 2026-11-30 .. Sunday 2026-12-06); checked with `date -d 2026-12-01 +%a%V`.
const std::vector<Case>& TuesdayCases() {
  static const std::vector<Case> cases = {
      // Days.
      {"今天", "2026-12-01", true, {{"kind", "date"}}},
      {"明天", "2026-12-02", true, {{"kind", "date"}}},
      {"昨天", "2026-11-30", true, {{"kind", "date"}}},
      {"前天", "2026-11-29", true, {{"kind", "date"}}},
      {"大前天", "2026-11-28", true, {{"kind", "date"}}},
      {"后天", "2026-12-03", true, {{"kind", "date"}}},
      {"大后天", "2026-12-04", true, {{"kind", "date"}}},
      {"今日", "2026-12-01", true, {{"kind", "date"}}},
      {"昨儿", "2026-11-30", true, {{"kind", "date"}}},
      // Days with a vague period: representative time, approx.
      {"明早",
       "2026-12-02T08:00:00+08:00",
       true,
       {{"kind", "datetime"}, {"approx", "true"}, {"period", "morning"}}},
      {"明天上午", "2026-12-02T10:00:00+08:00", true, {{"approx", "true"}, {"period", "forenoon"}}},
      {"今晚", "2026-12-01T20:00:00+08:00", true, {{"approx", "true"}, {"period", "evening"}}},
      {"昨晚", "2026-11-30T20:00:00+08:00", true, {{"approx", "true"}}},
      {"中午", "2026-12-01T12:00:00+08:00", true, {{"approx", "true"}, {"period", "noon"}}},
      {"傍晚", "2026-12-01T18:00:00+08:00", true, {{"approx", "true"}, {"period", "dusk"}}},
      {"凌晨",
       "2026-12-01T03:00:00+08:00",
       true,
       {{"approx", "true"}, {"period", "early_morning"}}},
      {"昨天下午", "2026-11-30T15:00:00+08:00", true, {{"approx", "true"}}},
      // Days with a clock.
      {"昨天晚上十点", "2026-11-30T22:00:00+08:00", true, {{"kind", "datetime"}}},
      {"昨晚十点", "2026-11-30T22:00:00+08:00", true, {}},
      {"明早八点", "2026-12-02T08:00:00+08:00", true, {}},
      {"明天下午3点半", "2026-12-02T15:30:00+08:00", true, {}},
      {"前天凌晨四点", "2026-11-29T04:00:00+08:00", true, {}},
      {"昨天半夜两点", "2026-12-01T02:00:00+08:00", true, {}},
      {"今天晚上十二点", "2026-12-02T00:00:00+08:00", true, {}},
      // Clock only: on the reference day.
      {"凌晨两点半", "2026-12-01T02:30:00+08:00", true, {}},
      {"十点一刻", "2026-12-01T10:15:00+08:00", true, {}},
      {"十点三刻", "2026-12-01T10:45:00+08:00", true, {}},
      {"晚上8:30", "2026-12-01T20:30:00+08:00", true, {}},
      {"晚上８：３０", "2026-12-01T20:30:00+08:00", true, {}},
      {"下午4点", "2026-12-01T16:00:00+08:00", true, {}},
      {"早上8点", "2026-12-01T08:00:00+08:00", true, {}},
      {"上午十点半", "2026-12-01T10:30:00+08:00", true, {}},
      {"中午12点", "2026-12-01T12:00:00+08:00", true, {}},
      {"中午1点", "2026-12-01T13:00:00+08:00", true, {}},
      {"下午十二点", "2026-12-01T12:00:00+08:00", true, {}},
      {"傍晚六点", "2026-12-01T18:00:00+08:00", true, {}},
      {"晚上十二点", "2026-12-02T00:00:00+08:00", true, {}},
      {"凌晨十二点", "2026-12-01T00:00:00+08:00", true, {}},
      {"半夜两点", "2026-12-01T02:00:00+08:00", true, {}},
      {"半夜十一点", "2026-12-01T23:00:00+08:00", true, {}},
      {"十点", "2026-12-01T10:00:00+08:00", true, {}},
      {"10点", "2026-12-01T10:00:00+08:00", true, {}},
      {"10时30分", "2026-12-01T10:30:00+08:00", true, {}},
      {"八点零五分", "2026-12-01T08:05:00+08:00", true, {}},
      {"八点过五分", "2026-12-01T08:05:00+08:00", true, {}},
      {"八点二十", "2026-12-01T08:20:00+08:00", true, {}},
      {"八点整", "2026-12-01T08:00:00+08:00", true, {}},
      {"两点钟", "2026-12-01T02:00:00+08:00", true, {}},
      {"8:30:15", "2026-12-01T08:30:15+08:00", true, {}},
      {"20:05", "2026-12-01T20:05:00+08:00", true, {}},
      {"十点多", "2026-12-01T10:00:00+08:00", true, {{"approx", "true"}}},
      {"下午三点左右", "2026-12-01T15:00:00+08:00", true, {{"approx", "true"}}},
      {"大概晚上九点", "2026-12-01T21:00:00+08:00", true, {{"approx", "true"}}},
      // Weeks (Monday first).
      {"上周一", "2026-11-23", true, {{"kind", "date"}}},
      {"这周五下午三点", "2026-12-04T15:00:00+08:00", true, {}},
      {"下周三", "2026-12-09", true, {}},
      {"上周日", "2026-11-29", true, {}},
      {"上个星期天", "2026-11-29", true, {}},
      {"周五", "2026-12-04", true, {}},
      {"星期天", "2026-12-06", true, {}},
      {"礼拜六上午", "2026-12-05T10:00:00+08:00", true, {{"approx", "true"}}},
      {"本周二", "2026-12-01", true, {}},
      {"下下周一", "2026-12-14", true, {}},
      {"周末", "2026-12-05", true, {{"approx", "true"}}},
      {"上周", "2026-W48", true, {{"kind", "week"}}},
      {"上个礼拜三", "2026-11-25", true, {}},
      {"下周末", "2026-12-12", true, {{"approx", "true"}}},
      {"这周", "2026-W49", true, {{"kind", "week"}}},
      {"下个星期", "2026-W50", true, {{"kind", "week"}}},
      // Months and years.
      {"上个月", "2026-11", true, {{"kind", "month"}}},
      {"下个月", "2027-01", true, {{"kind", "month"}}},
      {"上上个月", "2026-10", true, {{"kind", "month"}}},
      {"本月", "2026-12", true, {{"kind", "month"}}},
      {"下个月三号", "2027-01-03", true, {{"kind", "date"}}},
      {"上个月三号", "2026-11-03", true, {}},
      {"这个月十号", "2026-12-10", true, {}},
      {"去年", "2025", true, {{"kind", "year"}}},
      {"今年三月", "2026-03", true, {{"kind", "month"}}},
      {"去年12月3号", "2025-12-03", true, {}},
      {"明年一月", "2027-01", true, {}},
      // Absolute dates.
      {"2026年11月28日", "2026-11-28", true, {{"kind", "date"}}},
      {"2026年11月28号", "2026-11-28", true, {}},
      {"二〇二六年十一月二十八日", "2026-11-28", true, {}},
      {"二零二五年三月一日", "2025-03-01", true, {}},
      {"26年5月", "2026-05", true, {{"kind", "month"}}},
      {"2025年", "2025", true, {{"kind", "year"}}},
      {"2026年11月", "2026-11", true, {{"kind", "month"}}},
      {"2026-11-28", "2026-11-28", true, {}},
      {"2026/11/28 10:30", "2026-11-28T10:30:00+08:00", true, {}},
      {"2026.3.5", "2026-03-05", true, {}},
      {"2024年2月29日", "2024-02-29", true, {}},
      {"11月28号下午4点", "2026-11-28T16:00:00+08:00", true, {}},
      {"十一月二十八号", "2026-11-28", true, {}},
      {"11月份", "2026-11", true, {{"kind", "month"}}},
      // No year: latest occurrence at most 61 days ahead.
      {"12月3号", "2026-12-03", true, {}},
      {"1月5号", "2027-01-05", true, {}},
      {"1月31号", "2027-01-31", true, {}},
      {"2月1号", "2026-02-01", true, {}},
      {"6月1日", "2026-06-01", true, {}},
      {"1月", "2027-01", true, {{"kind", "month"}}},
      {"2月", "2027-02", true, {}},
      {"3月", "2026-03", true, {}},
      // Day alone: latest at most 7 days ahead.
      {"28号", "2026-11-28", true, {}},
      {"3号", "2026-12-03", true, {}},
      {"8号", "2026-12-08", true, {}},
      {"9号", "2026-11-09", true, {}},
      {"31号", "2026-10-31", true, {}},
      {"十五号晚上七点", "2026-11-15T19:00:00+08:00", true, {}},
      // Relative offsets.
      {"三天前", "2026-11-28", true, {{"kind", "date"}}},
      {"三天后", "2026-12-04", true, {}},
      {"两天以前", "2026-11-29", true, {}},
      {"两周前", "2026-11-17", true, {}},
      {"一个星期之前", "2026-11-24", true, {}},
      {"一个月前", "2026-11-01", true, {}},
      {"三个月前", "2026-09-01", true, {}},
      {"一年前", "2025-12-01", true, {}},
      {"十几天前", "2026-11-21", true, {{"approx", "true"}}},
      {"一个多月前", "2026-11-01", true, {{"approx", "true"}}},
      {"两个小时前", "2026-12-01T14:23:45+08:00", true, {{"kind", "datetime"}}},
      {"半小时前", "2026-12-01T15:53:45+08:00", true, {}},
      {"半个小时前", "2026-12-01T15:53:45+08:00", true, {}},
      {"一个半小时前", "2026-12-01T14:53:45+08:00", true, {}},
      {"十分钟前", "2026-12-01T16:13:45+08:00", true, {}},
      {"五分钟后", "2026-12-01T16:28:45+08:00", true, {}},
      {"八个小时以后", "2026-12-02T00:23:45+08:00", true, {}},
      {"现在", "2026-12-01T16:23:45+08:00", true, {{"kind", "datetime"}}},
      {"刚才", "2026-12-01T16:23:45+08:00", true, {{"approx", "true"}}},
      // Durations.
      {"三天", "P3D", true, {{"kind", "duration"}}},
      {"两个月", "P2M", true, {{"kind", "duration"}}},
      {"半个小时", "PT30M", true, {}},
      {"半小时", "PT30M", true, {}},
      {"一个多月", "P1M", true, {{"approx", "true"}}},
      {"两个多小时", "PT2H", true, {{"approx", "true"}}},
      {"三天多", "P3D", true, {{"approx", "true"}}},
      {"两年", "P2Y", true, {}},
      {"一年半", "P1Y6M", true, {}},
      {"三个半月", "P3M15D", true, {}},
      {"两天半", "P2DT12H", true, {}},
      {"一个半小时", "PT1H30M", true, {}},
      {"十分钟", "PT10M", true, {}},
      {"三十秒", "PT30S", true, {}},
      {"两周", "P2W", true, {}},
      {"一个星期", "P1W", true, {}},
      {"十几天", "P10D", true, {{"approx", "true"}}},
      {"二十多天", "P20D", true, {{"approx", "true"}}},
      {"十来天", "P10D", true, {{"approx", "true"}}},
      {"三天以内", "P3D", true, {}},
      {"半年", "P6M", true, {}},
      {"半天", "PT12H", true, {{"approx", "true"}}},
      {"两年三个月", "P2Y3M", true, {}},
      {"一周三天", "P10D", true, {}},
      {"三小时二十分钟", "PT3H20M", true, {}},
      // Vague or unresolvable: raw text kept.
      {"好几天", "好几天", false, {}, "vague"},
      {"几天", "几天", false, {}, "vague"},
      {"几个月", "几个月", false, {}, "vague"},
      {"前几天", "前几天", false, {}, "vague"},
      {"最近", "最近", false, {}, "vague"},
      {"那天", "那天", false, {}, "vague"},
      {"以前", "以前", false, {}, "vague"},
      {"下雨天", "下雨天", false, {}, "could not resolve"},
      {"abc", "abc", false, {}, "could not resolve"},
      {"", "", false, {}, "empty"},
      {" 昨天 ", "2026-11-30", true, {}},
      {"昨天的", "2026-11-30", true, {}},
      {"2026-11-28 13:00", "2026-11-28T13:00:00+08:00", true, {}},
      {"今天下午两点到三点", "今天下午两点到三点", false, {}, "could not resolve"},
      {"25点", "25点", false, {}, "no such date"},
      {"十点六十分", "十点六十分", false, {}, "no such date"},
      {"2月30号", "2月30号", false, {}, "no such date"},
      {"2026年2月29日", "2026年2月29日", false, {}, "no such date"},
      {"2026年13月", "2026年13月", false, {}, "no such date"},
      {"32号", "32号", false, {}, "no such date"},
      {"上个月晚上", "上个月晚上", false, {}, "needs a day"},
      {"\xff", "\xff", false, {}, "UTF-8"},
  };
  return cases;
}

TEST(TimeTest, TuesdayTable) {
  const auto ref = Shanghai(2026, 12, 1, 16, 23, 45);
  for (const Case& c : TuesdayCases()) {
    testing::ExpectCase(c, NormalizeTime(c.text, ref));
  }
}

// Reference: Saturday 2027-01-02 10:00 in Shanghai, the last days of ISO year 2026 (which has 53
// weeks since 2026-01-01 is a Thursday): 2027-01-02 is in 2026-W53, Monday 2026-12-28.
TEST(TimeTest, YearBoundary) {
  const auto ref = Shanghai(2027, 1, 2, 10);
  const std::vector<Case> cases = {
      {"上周一", "2026-12-21", true, {}},
      {"上周", "2026-W52", true, {{"kind", "week"}}},
      {"这周", "2026-W53", true, {{"kind", "week"}}},
      {"下周", "2027-W01", true, {{"kind", "week"}}},
      {"这周一", "2026-12-28", true, {}},
      {"上个月", "2026-12", true, {}},
      {"昨天", "2027-01-01", true, {}},
      {"前天", "2026-12-31", true, {}},
      {"去年", "2026", true, {}},
      {"12月31号", "2026-12-31", true, {}},
      {"31号", "2026-12-31", true, {}},
      {"三天前", "2026-12-30", true, {}},
      {"一个月前", "2026-12-02", true, {}},
  };
  for (const Case& c : cases) testing::ExpectCase(c, NormalizeTime(c.text, ref));
}

// Reference: 2026-12-01 00:30 in Shanghai, which is still 2026-11-30 in UTC: days are Shanghai's.
TEST(TimeTest, ShanghaiNotUtc) {
  const auto ref = Shanghai(2026, 12, 1, 0, 30);
  const std::vector<Case> cases = {
      {"今天", "2026-12-01", true, {}},
      {"一个小时前", "2026-11-30T23:30:00+08:00", true, {}},
      {"现在", "2026-12-01T00:30:00+08:00", true, {}},
  };
  for (const Case& c : cases) testing::ExpectCase(c, NormalizeTime(c.text, ref));
}

// Reference: Tuesday 2026-03-31 09:00: month arithmetic clamps to the month's last day.
TEST(TimeTest, MonthEnds) {
  const auto ref = Shanghai(2026, 3, 31, 9);
  const std::vector<Case> cases = {
      {"一个月前", "2026-02-28", true, {}},
      {"一个月后", "2026-04-30", true, {}},
      {"上个月", "2026-02", true, {}},
      {"下个月三十一号", "下个月三十一号", false, {}, "no such date"},
      {"下个月三十号", "2026-04-30", true, {}},
      {"两年前", "2024-03-31", true, {}},
      {"明天", "2026-04-01", true, {}},
  };
  for (const Case& c : cases) testing::ExpectCase(c, NormalizeTime(c.text, ref));
}

TEST(TimeTest, SlotDispatch) {
  const auto ref = Shanghai(2026, 12, 1, 16, 23, 45);
  EXPECT_EQ(NormalizeSlot("time", "昨天晚上十点", ref).value, "2026-11-30T22:00:00+08:00");
  EXPECT_TRUE(HasNormalizer("time"));
}

}  // namespace
}  // namespace hotline::nlu
