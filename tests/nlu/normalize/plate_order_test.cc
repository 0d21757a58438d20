#include <gtest/gtest.h>

#include <vector>

#include "case_util.h"
#include "nlu/normalize/normalize.h"

namespace hotline::nlu {
namespace {

using testing::Case;

const std::vector<Case>& PlateCases() {
  static const std::vector<Case> cases = {
      {"京A12345", "京A12345", true, {{"kind", "regular"}}},
      {"京a·12345", "京A12345", true, {{"kind", "regular"}}},
      {"粤B 幺二三四五", "粤B12345", true, {{"kind", "regular"}}},
      {"京A·一二三四五", "京A12345", true, {}},
      {"京A 12345", "京A12345", true, {}},
      {"京Ａ１２３４５", "京A12345", true, {}},
      {"沪A-8B3C9", "沪A8B3C9", true, {{"kind", "regular"}}},
      {"川a 1 2 3 4 5", "川A12345", true, {}},
      {"苏E.D7X21", "苏ED7X21", true, {{"kind", "regular"}}},
      {"鄂A 洞洞洞幺两", "鄂A00012", true, {}},
      {"粤BD12345", "粤BD12345", true, {{"kind", "new_energy"}}},
      {"粤b.d12345", "粤BD12345", true, {{"kind", "new_energy"}}},
      {"粤B12345D", "粤B12345D", true, {{"kind", "new_energy"}}},
      {"浙AF12345", "浙AF12345", true, {{"kind", "new_energy"}}},
      {"粤BDA1234", "粤BDA1234", true, {{"kind", "new_energy"}}},
      {"京A1234学", "京A1234学", true, {{"kind", "special"}}},
      {"粤Z1234港", "粤Z1234港", true, {{"kind", "special"}}},
      {"京A1234警", "京A1234警", true, {{"kind", "special"}}},
      {"鲁B1234挂", "鲁B1234挂", true, {{"kind", "special"}}},
      {"琼A12345", "琼A12345", true, {}},
      {"藏A12345", "藏A12345", true, {}},
      {"蒙A12345", "蒙A12345", true, {}},
      // Invalid.
      {"A12345", "A12345", false, {}, "province abbreviation"},
      {"台A12345", "台A12345", false, {}, "province abbreviation"},
      {"京112345", "京112345", false, {}, "authority letter"},
      {"京A1234", "京A1234", false, {}, "got 6"},
      {"京A12345678", "京A12345678", false, {}, "got 10"},
      {"京A123456", "京A123456", false, {}, "new-energy"},
      {"京AI2345", "京AI2345", false, {}, "I and O"},
      {"京AO2345", "京AO2345", false, {}, "I and O"},
      {"京A12学345", "京A12学345", false, {}, "suffix"},
      {"京A#12345", "京A#12345", false, {}, "unexpected character"},
      {"", "", false, {}, "empty"},
  };
  return cases;
}

const std::vector<Case>& OrderCases() {
  static const std::vector<Case> cases = {
      {"gd 2026 1128 001", "GD20261128001", true, {}},
      {"GD20261128001", "GD20261128001", true, {}},
      {"gd20261128001", "GD20261128001", true, {}},
      {"GD-2026-1128-001", "GD20261128001", true, {}},
      {"GD二零二六一一二八零零一", "GD20261128001", true, {}},
      {"ＧＤ２０２６１１２８００１", "GD20261128001", true, {}},
      {"gd 二〇二六 幺幺二八 洞洞幺", "GD20261128001", true, {}},
      {"gd_2026_001", "GD2026001", true, {}},
      {"a1b2", "A1B2", true, {}},
      {"2026112800", "2026112800", true, {}},
      {"AB1", "AB1", false, {}, "got 3"},
      {"GDABCD", "GDABCD", false, {}, "no digits"},
      {"GD#2026", "GD#2026", false, {}, "unexpected character"},
      {"工单GD2026", "工单GD2026", false, {}, "unexpected character"},
      {"GD123456789012345678901234567890X",
       "GD123456789012345678901234567890X",
       false,
       {},
       "got 33"},
      {"", "", false, {}, "empty"},
  };
  return cases;
}

TEST(PlateNumberTest, Table) {
  for (const Case& c : PlateCases()) testing::ExpectCase(c, NormalizePlateNumber(c.text));
}

TEST(OrderIdTest, Table) {
  for (const Case& c : OrderCases()) testing::ExpectCase(c, NormalizeOrderId(c.text));
}

TEST(NormalizeSlotTest, TypesWithoutNormaliserPassThrough) {
  const auto t = testing::Shanghai(2026, 12, 1);
  for (const char* type :
       {"person_name", "district", "address", "organization", "bus_line", "item", "no_such_type"}) {
    EXPECT_FALSE(HasNormalizer(type)) << type;
    const Normalized n = NormalizeSlot(type, "  朝阳区 建国路88号 ", t);
    EXPECT_EQ(n.value, "朝阳区 建国路88号") << type;
    EXPECT_TRUE(n.valid);
    EXPECT_TRUE(n.extra.empty());
  }
  EXPECT_EQ(NormalizeSlot("plate_number", "京a·12345", t).value, "京A12345");
  EXPECT_EQ(NormalizeSlot("order_id", "gd 2026 1128 001", t).value, "GD20261128001");
}

}  // namespace
}  // namespace hotline::nlu
