// AVX2 + FMA kernels. This file alone is compiled with -mavx2 -mfma (see CMakeLists.txt); it is
// only called through the dispatch table after cpuid says the CPU has both.
#include <immintrin.h>

#include <cstdint>

#include "engine/cpu/cpu_isa.h"

namespace hotline::engine::cpu {
namespace {

struct Ops {
  using V = __m256;
  static constexpr int L = 8;
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V set1(float a) { return _mm256_set1_ps(a); }
  static V zero() { return _mm256_setzero_ps(); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V round(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V pow2i(V n) {
    __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  static V abs(V a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
  static V or_sign(V a, V b) {
    return _mm256_or_ps(a, _mm256_and_ps(b, _mm256_set1_ps(-0.0f)));
  }
  static float hsum(V a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static void bf16_pairs(const uint16_t* p, V& even, V& odd) {
    __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    odd = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(-65536)));
  }
};

constexpr int kMr = 6;      // 6 rows x 16 columns = 12 ymm accumulators
constexpr int kPanels = 1;

#include "engine/cpu/kernels_body.inc"

}  // namespace

const KernelTable& Avx2Kernels() {
  static const KernelTable table = MakeTable(Isa::kAvx2, false, nullptr, nullptr);
  return table;
}

}  // namespace hotline::engine::cpu
