// EchoInput: caller input quoted in errors is bounded, cut on a code-point boundary and masked.
#include "base/echo.h"

#include <gtest/gtest.h>

#include <string>

namespace hotline {
namespace {

TEST(EchoInput, ShortInputIsUnchanged) {
  EXPECT_EQ(EchoInput("abc"), "abc");
  EXPECT_EQ(EchoInput(""), "");
  EXPECT_EQ(EchoInput(std::string(64, 'x')), std::string(64, 'x'));
}

TEST(EchoInput, LongInputIsCutAndSaysItsSize) {
  const std::string big(4 << 20, 'x');
  const std::string e = EchoInput(big);
  EXPECT_EQ(e, std::string(64, 'x') + "\u2026 (4194304 bytes)");
  EXPECT_EQ(EchoInput(std::string(65, 'y')), std::string(64, 'y') + "\u2026 (65 bytes)");
}

TEST(EchoInput, CutsOnCodePointBoundaries) {
  std::string han;
  for (int k = 0; k < 100; ++k) han += "热";  // 3 bytes each
  const std::string e = EchoInput(han, 10);
  std::string want;
  for (int k = 0; k < 10; ++k) want += "热";
  EXPECT_EQ(e, want + "\u2026 (300 bytes)");
}

TEST(EchoInput, MasksNumbersIncludingOneAcrossTheCut) {
  EXPECT_EQ(EchoInput("call 13812345678"), "call 138****5678");
  // The number starts at code point 60: its first digits are kept only masked.
  const std::string text = std::string(60, 'a') + "13812345678" + std::string(100, 'b');
  const std::string e = EchoInput(text);
  EXPECT_EQ(e.find("1234"), std::string::npos) << e;
  EXPECT_EQ(e.substr(0, 64), std::string(60, 'a') + "138*");
}

TEST(EchoInput, StrayContinuationBytesAreBounded) {
  const std::string garbage = "\xC3" + std::string(1 << 20, '\x80');
  EXPECT_LT(EchoInput(garbage).size(), 200u);
}

}  // namespace
}  // namespace hotline
