#include <gtest/gtest.h>

#include <vector>

#include "case_util.h"
#include "nlu/normalize/normalize.h"

namespace hotline::nlu {
namespace {

using testing::Case;

const std::vector<Case>& PhoneCases() {
  static const std::vector<Case> cases = {
      // Mobiles, written and spoken.
      {"13812345678", "13812345678", true, {{"kind", "mobile"}}},
      {"138 1234 5678", "13812345678", true, {{"kind", "mobile"}}},
      {"138-1234-5678", "13812345678", true, {{"kind", "mobile"}}},
      {"138—1234—5678", "13812345678", true, {{"kind", "mobile"}}},
      {"138\u30001234\u30005678", "13812345678", true, {{"kind", "mobile"}}},
      {"  13812345678 ", "13812345678", true, {{"kind", "mobile"}}},
      {"幺三八幺二三四五六七八", "13812345678", true, {{"kind", "mobile"}}},
      {"一三八一二三四五六七八", "13812345678", true, {{"kind", "mobile"}}},
      {"幺三九洞洞洞幺二三四五", "13900012345", true, {{"kind", "mobile"}}},
      {"一八六两两两三三四四五", "18622233445", true, {{"kind", "mobile"}}},
      {"幺五零 零零零零 九九九九", "15000009999", true, {{"kind", "mobile"}}},
      {"１３８１２３４５６７８", "13812345678", true, {{"kind", "mobile"}}},
      {"138 一二三四 5678", "13812345678", true, {{"kind", "mobile"}}},
      {"19912345678", "19912345678", true, {{"kind", "mobile"}}},
      {"16612345678", "16612345678", true, {{"kind", "mobile"}}},
      {"17012345678", "17012345678", true, {{"kind", "mobile"}}},
      {"14512345678", "14512345678", true, {{"kind", "mobile"}}},
      // Country prefixes.
      {"+86 138 1234 5678", "13812345678", true, {{"kind", "mobile"}}},
      {"+8613812345678", "13812345678", true, {{"kind", "mobile"}}},
      {"0086 13812345678", "13812345678", true, {{"kind", "mobile"}}},
      {"8613812345678", "13812345678", true, {{"kind", "mobile"}}},
      {"（+86）13812345678", "13812345678", true, {{"kind", "mobile"}}},
      {"+86 10 1234 5678", "01012345678", true, {{"kind", "landline"}, {"area_code", "010"}}},
      {"+86 755 8888 6666", "075588886666", true, {{"kind", "landline"}, {"area_code", "0755"}}},
      {"0086 21 6888 1234", "02168881234", true, {{"kind", "landline"}, {"area_code", "021"}}},
      // Landlines with area code.
      {"010-12345678", "01012345678", true, {{"kind", "landline"}, {"area_code", "010"}}},
      {"010 8765 4321", "01087654321", true, {{"kind", "landline"}, {"area_code", "010"}}},
      {"0 1 0 - 1 2 3 4 5 6 7 8", "01012345678", true, {{"area_code", "010"}}},
      {"0755 8888 6666", "075588886666", true, {{"kind", "landline"}, {"area_code", "0755"}}},
      {"0755-8888666", "07558888666", true, {{"kind", "landline"}, {"area_code", "0755"}}},
      {"02112345678", "02112345678", true, {{"kind", "landline"}, {"area_code", "021"}}},
      {"(021) 6888 1234", "02168881234", true, {{"kind", "landline"}, {"area_code", "021"}}},
      {"029-88886666", "02988886666", true, {{"kind", "landline"}, {"area_code", "029"}}},
      {"0571 8765432", "05718765432", true, {{"kind", "landline"}, {"area_code", "0571"}}},
      {"洞幺洞 八七六五四三二幺", "01087654321", true, {{"kind", "landline"}}},
      {"零七五五 八八八八 六六六六", "075588886666", true, {{"kind", "landline"}}},
      {"0755-8888-6666转123", "075588886666", true, {{"kind", "landline"}, {"extension", "123"}}},
      {"010-12345678 分机 8001", "01012345678", true, {{"extension", "8001"}}},
      // Service numbers.
      {"12345", "12345", true, {{"kind", "service"}}},
      {"一二三四五", "12345", true, {{"kind", "service"}}},
      {"110", "110", true, {{"kind", "service"}}},
      {"幺幺零", "110", true, {{"kind", "service"}}},
      {"120", "120", true, {{"kind", "service"}}},
      {"12315", "12315", true, {{"kind", "service"}}},
      {"95598", "95598", true, {{"kind", "service"}}},
      {"400-810-8888", "4008108888", true, {{"kind", "service"}}},
      // Local numbers without area code: kept, flagged.
      {"88886666", "88886666", false, {{"kind", "local"}}, "without an area code"},
      {"6688123", "6688123", false, {{"kind", "local"}}, "without an area code"},
      {"八八八八 六六六六", "88886666", false, {{"kind", "local"}}, "without an area code"},
      // Invalid.
      {"12812345678", "12812345678", false, {}, "start with 13 to 19"},
      {"10012345678", "10012345678", false, {}, "start with 13 to 19"},
      {"010-1234567", "0101234567", false, {}, "8-digit local number, got 7"},
      {"0755-123456", "0755123456", false, {}, "7 or 8-digit local number, got 6"},
      {"0755-08886666", "075508886666", false, {}, "do not start with 0"},
      {"01512345678", "01512345678", false, {}, "unknown area code"},
      {"1381234567", "1381234567", false, {}, "got 10 digits"},
      {"138123456789", "138123456789", false, {}, "got 12 digits"},
      {"2", "2", false, {}, "got 1 digits"},
      {"", "", false, {}, "empty"},
      {"   ", "", false, {}, "empty"},
      {"138一二三四abcd", "138一二三四abcd", false, {}, "unexpected character"},
      {"电话13812345678", "电话13812345678", false, {}, "unexpected character"},
      {"转123", "转123", false, {}, "unexpected character"},
      {"13812345678转", "13812345678转", false, {}, "extension"},
      {"+1 415 555 0100", "14155550100", false, {}, "+86"},
      {"00 44 20 7946 0958", "00442079460958", false, {}, "international"},
      {"\xff\xfe", "\xff\xfe", false, {}, "UTF-8"},
  };
  return cases;
}

TEST(PhoneTest, Table) {
  for (const Case& c : PhoneCases()) {
    const Normalized n = NormalizePhone(c.text);
    testing::ExpectCase(c, n);
    // Errors never echo the number.
    if (!n.valid && n.value.size() >= 7) {
      EXPECT_EQ(n.error.find(n.value), std::string::npos);
    }
  }
}

TEST(PhoneTest, SlotDispatch) {
  const auto t = testing::Shanghai(2026, 12, 1, 10);
  EXPECT_EQ(NormalizeSlot("phone", "幺三八 幺二三四 五六七八", t).value, "13812345678");
  EXPECT_TRUE(HasNormalizer("phone"));
}

}  // namespace
}  // namespace hotline::nlu
