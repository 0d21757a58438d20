// The packed INT8 GEMM micro-kernel for AVX2 (see gemm_s8_internal.h). This file alone is
// compiled with -mavx2 -mfma (CMakeLists.txt) and is only called after cpuid says the CPU has
// AVX2 (gemm_s8_cpu.cc).
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "engine/cpu/gemm_s8_internal.h"

namespace hotline::engine::cpu {
namespace {

// erf and GELU exactly as kernels_body.inc computes them (Eigen's rational erf), so an INT8
// GEMM's GELU matches the fp32 kernels' to the ulp.
inline __m256 ErfV(__m256 x) {
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(4.0f)), _mm256_set1_ps(-4.0f));
  const __m256 x2 = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(-2.72614225801306e-10f);
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.77068142495902e-08f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-2.10102402082508e-06f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-5.69250639462346e-05f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-7.34990630326855e-04f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-2.95459980854025e-03f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-1.60960333262415e-02f));
  p = _mm256_mul_ps(p, x);
  __m256 q = _mm256_set1_ps(-1.45660718464996e-05f);
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-2.13374055278905e-04f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-1.68282697438203e-03f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-7.37332916720468e-03f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-1.42647390514189e-02f));
  return _mm256_div_ps(p, q);
}

inline __m256 GeluV(__m256 x) {
  const __m256 e = ErfV(_mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752f)));
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x),
                       _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

inline __m256 Activate(__m256 v, Epilogue e) {
  if (e == Epilogue::kGelu) return GeluV(v);
  if (e == Epilogue::kTanh) {  // the pooler only (batch rows): scalar is fine
    alignas(32) float t[8];
    _mm256_store_ps(t, v);
    for (float& f : t) f = std::tanh(f);
    return _mm256_load_ps(t);
  }
  return v;
}

// 16 floats -> 16 s8: clamp(round_half_even(v * inv), -127, 127).
inline __m128i QuantizeRow16(__m256 v0, __m256 v1, float inv) {
  const __m256 s = _mm256_set1_ps(inv), hi = _mm256_set1_ps(127.f), lo = _mm256_set1_ps(-127.f);
  const __m256i q0 = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v0, s), lo), hi));
  const __m256i q1 = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v1, s), lo), hi));
  const __m128i a = _mm_packs_epi32(_mm256_castsi256_si128(q0), _mm256_extracti128_si256(q0, 1));
  const __m128i b = _mm_packs_epi32(_mm256_castsi256_si128(q1), _mm256_extracti128_si256(q1, 1));
  return _mm_packs_epi16(a, b);
}

// MR rows (m..m+MR) times panel p.
template <int MR>
inline void Tile(const S8Job& j, int m, int p) {
  const uint8_t* x = j.xu + size_t(m) * size_t(j.ldx);
  const int8_t* w = j.w + size_t(p) * size_t(j.k4) * 64;
  __m256i acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int q = 0; q < j.k4; ++q) {
    const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + size_t(q) * 64));
    const __m256i w1 =
        _mm256_load_si256(reinterpret_cast<const __m256i*>(w + size_t(q) * 64 + 32));
    for (int r = 0; r < MR; ++r) {
      int32_t quad;
      std::memcpy(&quad, x + size_t(r) * size_t(j.ldx) + size_t(q) * 4, 4);
      const __m256i b = _mm256_set1_epi32(quad);
      acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(_mm256_maddubs_epi16(b, w0), ones));
      acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(_mm256_maddubs_epi16(b, w1), ones));
    }
  }
  const int n0 = p * kS8Panel;
  const int nc = j.N - n0 < kS8Panel ? j.N - n0 : kS8Panel;
  const __m256i c0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(j.comp + n0));
  const __m256i c1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(j.comp + n0 + 8));
  const __m256 s0 = _mm256_loadu_ps(j.scale + n0), s1 = _mm256_loadu_ps(j.scale + n0 + 8);
  const __m256 b0 = j.bias ? _mm256_loadu_ps(j.bias + n0) : _mm256_setzero_ps();
  const __m256 b1 = j.bias ? _mm256_loadu_ps(j.bias + n0 + 8) : _mm256_setzero_ps();
  for (int r = 0; r < MR; ++r) {
    // acc - comp is the exact s8 x s8 dot product (|.| < 2^24: exact in fp32).
    __m256 v0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(acc[r][0], c0)), s0, b0);
    __m256 v1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(acc[r][1], c1)), s1, b1);
    v0 = Activate(v0, j.epilogue);
    v1 = Activate(v1, j.epilogue);
    const size_t row = size_t(m + r) * size_t(j.N) + size_t(n0);
    if (nc == kS8Panel) {
      if (j.res != nullptr) {
        v0 = _mm256_add_ps(v0, _mm256_loadu_ps(j.res + row));
        v1 = _mm256_add_ps(v1, _mm256_loadu_ps(j.res + row + 8));
      }
      if (j.out_inv > 0.f) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<int8_t*>(j.y) + row),
                         QuantizeRow16(v0, v1, j.out_inv));
      } else {
        _mm256_storeu_ps(static_cast<float*>(j.y) + row, v0);
        _mm256_storeu_ps(static_cast<float*>(j.y) + row + 8, v1);
      }
      continue;
    }
    // Last, partial panel: through a buffer, the same arithmetic on the valid columns.
    alignas(32) float t[kS8Panel];
    if (j.res != nullptr) {
      for (int c = 0; c < kS8Panel; ++c) t[c] = c < nc ? j.res[row + c] : 0.f;
      v0 = _mm256_add_ps(v0, _mm256_load_ps(t));
      v1 = _mm256_add_ps(v1, _mm256_load_ps(t + 8));
    }
    if (j.out_inv > 0.f) {
      alignas(16) int8_t q[kS8Panel];
      _mm_store_si128(reinterpret_cast<__m128i*>(q), QuantizeRow16(v0, v1, j.out_inv));
      std::memcpy(static_cast<int8_t*>(j.y) + row, q, size_t(nc));
    } else {
      _mm256_store_ps(t, v0);
      _mm256_store_ps(t + 8, v1);
      std::memcpy(static_cast<float*>(j.y) + row, t, sizeof(float) * size_t(nc));
    }
  }
}

}  // namespace

// Row tiles outermost: a tile's activations (kS8Mr x K bytes) stay in L1 while it meets every
// panel of the job (the job's panels, at most ~256 KB, stay in L2), and each output row is written
// front to back. (Panels outermost wrote rows N floats apart: 4 KB-strided stores for N = 1024,
// which all fall into one L1 set.)
void GemmS8JobAvx2(const S8Job& j) {
  int m = j.m0;
  for (; m + kS8Mr <= j.m1; m += kS8Mr) {
    for (int p = j.p0; p < j.p1; ++p) Tile<kS8Mr>(j, m, p);
  }
  for (int p = j.p0; p < j.p1; ++p) {
    switch (j.m1 - m) {
      case 3: Tile<3>(j, m, p); break;
      case 2: Tile<2>(j, m, p); break;
      case 1: Tile<1>(j, m, p); break;
      default: break;
    }
  }
}

void S8ToU8Avx2(const int8_t* x, int64_t n, uint8_t* y) {
  int64_t i = 0;
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (; i + 32 <= n; i += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm256_xor_si256(v, flip));
  }
  for (; i < n; ++i) y[i] = static_cast<uint8_t>(x[i] ^ static_cast<int8_t>(0x80));
}

}  // namespace hotline::engine::cpu
