// libFuzzer target: the plan reader (header, JSON metadata, weights table, graph checks) on
// arbitrary bytes. Every input must either load or throw hotline::Error; a crash, a sanitizer
// report or any other exception is a finding.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/error.h"
#include "engine/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // ReadPlan maps a file: write the input to one per process.
  static const std::string path = [] {
    static std::string p = "/tmp/hotline_fuzz_plan_" + std::to_string(::getpid()) + ".plan";
    std::atexit([] { std::remove(p.c_str()); });
    return p;
  }();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
  for (bool weights : {false, true}) {
    try {
      hotline::engine::ReadPlan(path, weights);
    } catch (const hotline::Error&) {
    }
  }
  return 0;
}
