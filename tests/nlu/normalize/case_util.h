// Table-driven checks shared by the normaliser tests. Every expected value in the tables was
// computed by hand (check digits, calendar arithmetic) and cross-checked against GNU date for the
// calendar facts the time tests rely on.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>

#include "nlu/normalize/normalize.h"

namespace hotline::nlu::testing {

struct Case {
  std::string text;
  std::string value;  // expected Normalized::value
  bool valid = true;
  std::map<std::string, std::string> extra = {};  // keys that must be present with these values
  std::string error = {};  // substring the error must contain (invalid cases)
};

inline void ExpectCase(const Case& c, const Normalized& n) {
  SCOPED_TRACE("input: \"" + c.text + "\"");
  EXPECT_EQ(n.value, c.value);
  EXPECT_EQ(n.valid, c.valid) << "error: " << n.error;
  if (c.valid) {
    EXPECT_TRUE(n.error.empty()) << n.error;
  } else {
    EXPECT_FALSE(n.error.empty());
    if (!c.error.empty()) {
      EXPECT_NE(n.error.find(c.error), std::string::npos) << n.error;
    }
  }
  for (const auto& [key, expected] : c.extra) {
    auto it = n.extra.find(key);
    if (it == n.extra.end()) {
      ADD_FAILURE() << "missing extra[\"" << key << "\"], expected \"" << expected << "\"";
    } else {
      EXPECT_EQ(it->second, expected) << "extra[\"" << key << "\"]";
    }
  }
  // approx is only reported when the case says so.
  if (!c.extra.count("approx")) {
    EXPECT_FALSE(n.extra.count("approx")) << "unexpected approx";
  }
}

// A Shanghai (UTC+8) wall-clock time as a system_clock time point, via std::chrono's calendar
// (independent of the normaliser's own calendar code).
inline std::chrono::system_clock::time_point Shanghai(int y, unsigned mo, unsigned d, int h = 0,
                                                      int mi = 0, int s = 0) {
  using namespace std::chrono;
  const sys_days date{year{y} / month{mo} / day{d}};
  return date + hours{h} + minutes{mi} + seconds{s} - hours{8};
}

}  // namespace hotline::nlu::testing
