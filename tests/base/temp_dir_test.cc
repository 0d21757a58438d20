#include "base/temp_dir.h"

#include <gtest/gtest.h>

#include <fstream>

namespace hotline {
namespace {

TEST(TempDir, ExistsWhileHeldAndGoesWithItsContents) {
  std::filesystem::path kept;
  {
    TempDir a("hotline-tempdir-test");
    TempDir b("hotline-tempdir-test");
    kept = a.path();
    EXPECT_TRUE(std::filesystem::is_directory(a.path()));
    EXPECT_NE(a.path(), b.path());
    std::filesystem::create_directories(a.path() / "sub");
    std::ofstream(a.path() / "sub" / "f.txt") << "x";
  }
  EXPECT_FALSE(std::filesystem::exists(kept));
}

}  // namespace
}  // namespace hotline
