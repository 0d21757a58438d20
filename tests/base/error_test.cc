#include "base/error.h"

#include <gtest/gtest.h>

namespace hotline {

TEST(Status, MapsCodesToHttp) {
  EXPECT_EQ(HttpStatus(Code::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatus(Code::kNotFound), 404);
  EXPECT_EQ(HttpStatus(Code::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatus(Code::kDeadlineExceeded), 504);
  EXPECT_EQ(HttpStatus(Code::kUnavailable), 503);
}

TEST(Status, FromErrorKeepsCodeAndMessage) {
  Error e("model 'x' not found", Code::kNotFound);
  Status s = Status::FromError(e);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_EQ(s.ToString(), "NOT_FOUND: model 'x' not found");
}

}  // namespace hotline
