#include <gtest/gtest.h>

#include <vector>

#include "case_util.h"
#include "nlu/normalize/normalize.h"

namespace hotline::nlu {
namespace {

using testing::Case;

const std::vector<Case>& AmountCases() {
  static const std::vector<Case> cases = {
      {"三千五百元", "3500", true, {}},
      {"3.5万", "35000", true, {}},
      {"一百八", "180", true, {}},
      {"1,200块", "1200", true, {}},
      {"两千块钱", "2000", true, {}},
      {"五毛", "0.5", true, {}},
      {"三块五", "3.5", true, {}},
      {"一万二", "12000", true, {}},
      {"十几块", "10", true, {{"approx", "true"}}},
      {"壹仟", "1000", true, {}},
      {"壹仟元整", "1000", true, {}},
      {"伍佰元", "500", true, {}},
      {"捌拾捌元", "88", true, {}},
      {"壹万贰仟叁佰肆拾伍元陆角柒分", "12345.67", true, {}},
      {"1200元", "1200", true, {}},
      {"¥1,200.50", "1200.5", true, {}},
      {"￥99", "99", true, {}},
      {"RMB 200", "200", true, {}},
      {"人民币五百元", "500", true, {}},
      {"200多块", "200", true, {{"approx", "true"}}},
      {"三千多", "3000", true, {{"approx", "true"}}},
      {"五百块左右", "500", true, {{"approx", "true"}}},
      {"大概两千", "2000", true, {{"approx", "true"}}},
      {"十来块", "10", true, {{"approx", "true"}}},
      {"三千余元", "3000", true, {{"approx", "true"}}},
      {"一千五百块钱左右", "1500", true, {{"approx", "true"}}},
      {"3k", "3k", false, {}, "unexpected text"},
      {"一千二百三十四块五", "1234.5", true, {}},
      {"2万元", "20000", true, {}},
      {"1.2亿", "120000000", true, {}},
      {"三万五", "35000", true, {}},
      {"三万五千", "35000", true, {}},
      {"两百五", "250", true, {}},
      {"一千零五十", "1050", true, {}},
      {"一千零五", "1005", true, {}},
      {"一千二", "1200", true, {}},
      {"三千五", "3500", true, {}},
      {"十块", "10", true, {}},
      {"十五元", "15", true, {}},
      {"一百零八", "108", true, {}},
      {"三十万", "300000", true, {}},
      {"十万八千", "108000", true, {}},
      {"二十万零五百", "200500", true, {}},
      {"一亿二", "120000000", true, {}},
      {"10万块", "100000", true, {}},
      {"2万5", "25000", true, {}},
      {"0.5元", "0.5", true, {}},
      {"3.50元", "3.5", true, {}},
      {"0元", "0", true, {}},
      {"一块", "1", true, {}},
      {"两毛五", "0.25", true, {}},
      {"八角", "0.8", true, {}},
      {"三分钱", "0.03", true, {}},
      {"一块二毛三", "1.23", true, {}},
      {"十块八毛", "10.8", true, {}},
      {"三块零五", "3.05", true, {}},
      {"三块零五分", "3.05", true, {}},
      {"三块五毛二分钱", "3.52", true, {}},
      {"三元五角", "3.5", true, {}},
      {"3块5", "3.5", true, {}},
      {"300块钱整", "300", true, {}},
      {"１２００元", "1200", true, {}},
      {"1,234,567元", "1234567", true, {}},
      {" 50 块 ", "50", true, {}},
      // Invalid.
      {"几百块", "几百块", false, {}, "vague"},
      {"好几千", "好几千", false, {}, "vague"},
      {"三四百", "三四百", false, {}, "vague"},
      {"100美元", "100美元", false, {}, "not in yuan"},
      {"五十美金", "五十美金", false, {}, "not in yuan"},
      {"块", "块", false, {}, "no number"},
      {"免费", "免费", false, {}, "no number"},
      {"", "", false, {}, "empty"},
      {"12毛", "12毛", false, {}, "single digit"},
      {"1,2元", "1,2元", false, {}, "unexpected text"},
      {"三百块一张", "三百块一张", false, {}, "unexpected text"},
      {"\xc0\xaf", "\xc0\xaf", false, {}, "UTF-8"},
  };
  return cases;
}

TEST(AmountTest, Table) {
  for (const Case& c : AmountCases()) testing::ExpectCase(c, NormalizeAmount(c.text));
}

TEST(AmountTest, SlotDispatch) {
  EXPECT_EQ(NormalizeSlot("amount", "三千五百元", testing::Shanghai(2026, 12, 1)).value, "3500");
}

}  // namespace
}  // namespace hotline::nlu
