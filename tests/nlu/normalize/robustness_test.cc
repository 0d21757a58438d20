// Nothing a caller can say makes a normaliser throw or crash; every invalid result says why.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "case_util.h"
#include "nlu/normalize/normalize.h"

namespace hotline::nlu {
namespace {

TEST(RobustnessTest, RandomFragmentsNeverThrow) {
  // Fragments that exercise every grammar, glued at random, plus raw bytes.
  const std::vector<std::string> pieces = {
      "一", "二", "两", "十", "百",   "千",   "万",   "亿",   "零",
      "〇", "幺", "洞", "几", "多",   "半",   "个",   "天",   "月",
      "年", "号", "日", "周", "星期", "点",   "分",   "秒",   "小时",
      "前", "后", "上", "下", "这",   "晚上", "凌晨", "中午", "块",
      "元", "毛", "角", "钱", "X",    "x",    "叉",   "+",    "-",
      " ",  ":",  ".",  ",",  "0",    "1",    "9",    "12",   "2026",
      "86", "京", "A",  "D",  "学",   "转",   "\xff", "\xe4", "99999999999999999999",
      "１", "Ｘ", "GD", "·"};
  std::mt19937 rng(12345);
  const auto ref = testing::Shanghai(2026, 12, 1, 16, 23, 45);
  for (int iter = 0; iter < 20000; ++iter) {
    std::string text;
    const int n = static_cast<int>(rng() % 8);
    for (int k = 0; k < n; ++k) text += pieces[rng() % pieces.size()];
    for (const char* type : {"phone", "id_number", "time", "amount", "plate_number", "order_id"}) {
      Normalized result;
      ASSERT_NO_THROW(result = NormalizeSlot(type, text, ref)) << type << ": " << text;
      if (!result.valid) {
        EXPECT_FALSE(result.error.empty()) << type << ": " << text;
      }
    }
  }
}

TEST(RobustnessTest, ExtremeValues) {
  const auto ref = testing::Shanghai(2026, 12, 1, 16, 23, 45);
  EXPECT_FALSE(NormalizeAmount("99999999999999999999元").valid);
  EXPECT_EQ(NormalizeAmount("99999999999999999999元").error, "amount is too large");
  EXPECT_FALSE(NormalizeTime("99999999999999999999天前", ref).valid);
  EXPECT_FALSE(NormalizeTime("5000年前", ref).valid);
  EXPECT_FALSE(NormalizeTime("0000年", ref).valid);
  EXPECT_FALSE(NormalizeTime("100000天前", ref).valid);  // 1753: outside 1900-2200
  EXPECT_EQ(NormalizeTime("100天前", ref).value, "2026-08-23");
  EXPECT_FALSE(NormalizePhone(std::string(10000, '1')).valid);
  EXPECT_FALSE(NormalizeIdNumber(std::string(10000, '1')).valid);
}

}  // namespace
}  // namespace hotline::nlu
