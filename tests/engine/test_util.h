// Helpers shared by the engine tests.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace hotline::engine {

inline std::string FixturePath(const std::string& name) {
  return std::string(HOTLINE_SOURCE_DIR) + "/tests/fixtures/engine/" + name;
}

// Token ids for the tiny fixtures (make_fixtures.py: vocabulary 300, 64 positions):
// [CLS]=1 ... [SEP]=2 around random ids in [5, 300), lengths in [min_len, max_len].
inline std::vector<std::vector<int32_t>> TinyFixtureSequences(int n, int seed, int min_len = 3,
                                                              int max_len = 30) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> len(min_len, max_len), id(5, 299);
  std::vector<std::vector<int32_t>> out;
  for (int s = 0; s < n; ++s) {
    std::vector<int32_t> ids{1};
    const int L = len(rng);
    for (int k = 2; k < L; ++k) ids.push_back(id(rng));
    ids.push_back(2);
    out.push_back(ids);
  }
  return out;
}

}  // namespace hotline::engine
