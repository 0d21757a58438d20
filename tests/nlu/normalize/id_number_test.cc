#include <gtest/gtest.h>

#include <vector>

#include "case_util.h"
#include "nlu/normalize/normalize.h"

namespace hotline::nlu {
namespace {

using testing::Case;

// Check digits computed by hand: sum of digit × weight (7 9 10 5 8 4 2 1 6 3 7 9 10 5 8 4 2),
// mod 11, mapped through 1 0 X 9 8 7 6 5 4 3 2. E.g. 110105198806071238: sum 235, 235 mod 11 = 4
// → 8; 11010519491231002X: sum 167, mod 11 = 2 → X.
const std::vector<Case>& IdCases() {
  static const std::vector<Case> cases = {
      {"110105198806071238",
       "110105198806071238",
       true,
       {{"birth_date", "1988-06-07"}, {"sex", "male"}}},
      {"11010519491231002X",
       "11010519491231002X",
       true,
       {{"birth_date", "1949-12-31"}, {"sex", "female"}}},
      {"11010519491231002x", "11010519491231002X", true, {{"birth_date", "1949-12-31"}}},
      {"11010519491231002叉", "11010519491231002X", true, {{"birth_date", "1949-12-31"}}},
      {"110105 19491231 002X", "11010519491231002X", true, {{"sex", "female"}}},
      {"110105-1949-1231-002X", "11010519491231002X", true, {}},
      {"１１０１０５１９４９１２３１００２Ｘ", "11010519491231002X", true, {}},
      {"幺幺零幺零五幺九八八零六零七幺二三八",
       "110105198806071238",
       true,
       {{"birth_date", "1988-06-07"}}},
      {"一一〇一〇五一九四九一二三一〇〇二叉", "11010519491231002X", true, {}},
      {"44030519900101123X",
       "44030519900101123X",
       true,
       {{"birth_date", "1990-01-01"}, {"sex", "male"}}},
      {"310101200002291237", "310101200002291237", true, {{"birth_date", "2000-02-29"}}},
      {"320102198001010016",
       "320102198001010016",
       true,
       {{"birth_date", "1980-01-01"}, {"sex", "male"}}},
      {"510104197512310524",
       "510104197512310524",
       true,
       {{"birth_date", "1975-12-31"}, {"sex", "female"}}},
      // 15-digit first-generation numbers are upgraded (19 + check digit).
      {"110105880607123",
       "110105198806071238",
       true,
       {{"legacy15", "true"}, {"birth_date", "1988-06-07"}}},
      // Check digit mismatch: kept, flagged, birth date still read.
      {"110105198806071234",
       "110105198806071234",
       false,
       {{"birth_date", "1988-06-07"}},
       "check digit mismatch"},
      {"110105194912310021", "110105194912310021", false, {}, "check digit mismatch"},
      {"320102198001010017", "320102198001010017", false, {}, "check digit mismatch"},
      // Invalid birth dates (check digits correct: sum 155 → 0).
      {"310101190002291230", "310101190002291230", false, {}, "birth date is not a valid date"},
      {"110105198813071234", "110105198813071234", false, {}, "birth date"},
      // Unknown province (99): check digit correct (sum 363 → 1).
      {"990105198806071231",
       "990105198806071231",
       false,
       {{"birth_date", "1988-06-07"}},
       "unknown province code"},
      // Structure.
      {"11010519880607123", "11010519880607123", false, {}, "got 17"},
      {"1101051988060712345", "1101051988060712345", false, {}, "got 19"},
      {"1101051949123100X2", "1101051949123100X2", false, {}, "last (check) character"},
      {"11010519491231002Y", "11010519491231002Y", false, {}, "unexpected character"},
      {"11010588060712X", "11010588060712X", false, {}, "got 15"},
      {"", "", false, {}, "empty"},
      {"身份证110105198806071238", "身份证110105198806071238", false, {}, "unexpected"},
  };
  return cases;
}

TEST(IdNumberTest, Table) {
  for (const Case& c : IdCases()) {
    const Normalized n = NormalizeIdNumber(c.text);
    testing::ExpectCase(c, n);
    if (!n.valid && n.value.size() >= 6) {
      EXPECT_EQ(n.error.find(n.value.substr(0, 6)), std::string::npos) << "error echoes the ID";
    }
  }
}

TEST(IdNumberTest, FutureBirthDateNeedsReferenceTime) {
  // 110105202701011238: sum 114, mod 11 = 4 → 8; born 2027-01-01.
  const auto ref = testing::Shanghai(2026, 12, 1, 10);
  testing::ExpectCase({"110105202701011238", "110105202701011238", false, {}, "in the future"},
                      NormalizeIdNumber("110105202701011238", ref));
  testing::ExpectCase({"110105202701011238", "110105202701011238", false, {}, "in the future"},
                      NormalizeSlot("id_number", "110105202701011238", ref));
  // Without a reference time only the calendar is checked.
  testing::ExpectCase(
      {"110105202701011238", "110105202701011238", true, {{"birth_date", "2027-01-01"}}},
      NormalizeIdNumber("110105202701011238"));
  // Born on the reference day itself is fine.
  EXPECT_TRUE(NormalizeIdNumber("110105198806071238", testing::Shanghai(1988, 6, 7, 0, 0)).valid);
}

TEST(IdNumberTest, BothErrorsReported) {
  const Normalized n = NormalizeIdNumber("310101190002291234");  // 1900-02-29 and wrong check
  EXPECT_FALSE(n.valid);
  EXPECT_NE(n.error.find("birth date"), std::string::npos);
  EXPECT_NE(n.error.find("check digit mismatch"), std::string::npos);
  EXPECT_EQ(n.extra.count("birth_date"), 0u);
}

}  // namespace
}  // namespace hotline::nlu
