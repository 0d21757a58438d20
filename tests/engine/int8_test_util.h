// Helpers shared by the CPU INT8 GEMM tests (int8_gemm_test.cc, int8_vnni_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace hotline::engine::cpu::test {

// n codes uniform in [-qmax, qmax].
inline std::vector<int8_t> RandomS8(size_t n, int qmax, std::mt19937* rng) {
  std::uniform_int_distribution<int> d(-qmax, qmax);
  std::vector<int8_t> v(n);
  for (auto& e : v) e = int8_t(d(*rng));
  return v;
}

// y [M, N] (a GEMM's output with unit scales, no bias or epilogue) equals the exact integer
// product x [M, K] . w [K, N] (a naive int64 sum; |acc| < 2^24 keeps it exact in fp32).
inline void ExpectExactS8Product(const std::vector<int8_t>& x, const std::vector<int8_t>& w,
                                 const std::vector<float>& y, int M, int K, int N) {
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      int64_t acc = 0;
      for (int k = 0; k < K; ++k) acc += int64_t(x[size_t(m) * K + k]) * w[size_t(k) * N + n];
      ASSERT_EQ(double(y[size_t(m) * N + n]), double(acc))
          << M << "x" << K << "x" << N << " m=" << m << " n=" << n;
    }
  }
}

}  // namespace hotline::engine::cpu::test
