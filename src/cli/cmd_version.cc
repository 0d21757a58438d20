#include <cstdio>

#include "cli/command.h"

namespace {
hotline::cli::Registrar reg("version", "Print the hotline version", [](CLI::App&) {
  return []() -> int {
    std::printf("hotline %s\n", HOTLINE_VERSION);
    return 0;
  };
});
}  // namespace
