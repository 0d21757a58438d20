// Helpers shared by the engine tests.
#pragma once

#include <string>

namespace hotline::engine {

inline std::string FixturePath(const std::string& name) {
  return std::string(HOTLINE_SOURCE_DIR) + "/tests/fixtures/engine/" + name;
}

}  // namespace hotline::engine
