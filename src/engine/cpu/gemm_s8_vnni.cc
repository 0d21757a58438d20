// The packed INT8 GEMM micro-kernel for CPUs with AVX512-VNNI (GemmS8 tactic 7, packed_vnni; see
// gemm_s8_internal.h). This file alone is compiled with AVX-512 + VNNI flags (CMakeLists.txt) and
// is only called after cpuid and xgetbv say the CPU and OS have AVX512-VNNI (gemm_s8_cpu.cc), so
// the binary still runs on AVX2-only CPUs.
//
// Arithmetic: vpdpbusd multiplies 4 u8 activations by 4 s8 weights and adds the four products
// into an int32 lane, with no intermediate saturation: the full 8-bit weight range (|w| <= 127)
// is exact. Activations are s8, handed over as u8 = s8 + 128; the kernel subtracts
// comp[n] = 128 * sum_k W[k, n] (precomputed at construction) from every accumulator, which
// gives the exact s8 x s8 dot product. The weight panels are those of the AVX2 kernel: one
// 64-byte row per k-quad holds the 16 columns' 4 k values, i.e. exactly one zmm operand.
#include <immintrin.h>

#include <cstring>

#include "engine/cpu/gemm_s8_internal.h"

namespace hotline::engine::cpu {
namespace {

constexpr int kMr = 8;  // rows per micro-tile: 8 rows x 2 panels = 16 zmm accumulators

#include "engine/cpu/gemm_s8_avx512.inc"

// acc += the u8 x s8 quad products (vpdpbusd). Inline asm, not _mm512_dpbusd_epi32: GCC 12
// gives the intrinsic's tied accumulator a fresh register each step and copies all 16 back per
// k-quad (16 extra register moves per 16 vpdpbusd in the hot loop, seen in the generated code);
// with asm the accumulators stay put.
#define HOTLINE_DPBUSD(acc, u8, s8)                                               \
  asm("vpdpbusd {%[w], %[x], %[a] | %[a], %[x], %[w]}"                            \
      : [a] "+v"(acc)                                                              \
      : [x] "v"(u8), [w] "v"(s8))

inline __m512i Quad(const uint8_t* p) {
  int32_t q;
  std::memcpy(&q, p, 4);
  return _mm512_set1_epi32(q);
}

// The main micro-tile: 8 rows (m..m+8) x 2 panels (p, p+1), 16 accumulators in named variables
// (arrays of them are not kept in registers by GCC around inline asm).
inline void Tile82(const S8Job& j, int m, int p) {
  const size_t ldx = size_t(j.ldx), pstride = size_t(j.k4) * 64;
  const uint8_t* x = j.xu + size_t(m) * ldx;
  const int8_t* w0 = j.w + size_t(p) * pstride;
  const int8_t* w1 = w0 + pstride;
  __m512i a00 = _mm512_setzero_si512(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00,
          a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00, a60 = a00,
          a61 = a00, a70 = a00, a71 = a00;
  for (int q = 0; q < j.k4; ++q) {
    const __m512i v0 = _mm512_load_si512(reinterpret_cast<const void*>(w0 + size_t(q) * 64));
    const __m512i v1 = _mm512_load_si512(reinterpret_cast<const void*>(w1 + size_t(q) * 64));
    const uint8_t* xq = x + size_t(q) * 4;
    __m512i b = Quad(xq);
    HOTLINE_DPBUSD(a00, b, v0);
    HOTLINE_DPBUSD(a01, b, v1);
    b = Quad(xq + ldx);
    HOTLINE_DPBUSD(a10, b, v0);
    HOTLINE_DPBUSD(a11, b, v1);
    b = Quad(xq + 2 * ldx);
    HOTLINE_DPBUSD(a20, b, v0);
    HOTLINE_DPBUSD(a21, b, v1);
    b = Quad(xq + 3 * ldx);
    HOTLINE_DPBUSD(a30, b, v0);
    HOTLINE_DPBUSD(a31, b, v1);
    b = Quad(xq + 4 * ldx);
    HOTLINE_DPBUSD(a40, b, v0);
    HOTLINE_DPBUSD(a41, b, v1);
    b = Quad(xq + 5 * ldx);
    HOTLINE_DPBUSD(a50, b, v0);
    HOTLINE_DPBUSD(a51, b, v1);
    b = Quad(xq + 6 * ldx);
    HOTLINE_DPBUSD(a60, b, v0);
    HOTLINE_DPBUSD(a61, b, v1);
    b = Quad(xq + 7 * ldx);
    HOTLINE_DPBUSD(a70, b, v0);
    HOTLINE_DPBUSD(a71, b, v1);
  }
  const __m512i acc[kMr][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31},
                               {a40, a41}, {a50, a51}, {a60, a61}, {a70, a71}};
  for (int r = 0; r < kMr; ++r) {
    Finish(j, m + r, p, acc[r][0]);
    Finish(j, m + r, p + 1, acc[r][1]);
  }
}

// The edges: MR rows (m..m+MR) times NP consecutive panels (p..p+NP), any MR <= 8, NP <= 2.
template <int MR, int NP>
inline void Tile(const S8Job& j, int m, int p) {
  const uint8_t* x = j.xu + size_t(m) * size_t(j.ldx);
  const size_t pstride = size_t(j.k4) * 64;
  const int8_t* w = j.w + size_t(p) * pstride;
  __m512i acc[MR][NP];
  for (int r = 0; r < MR; ++r) {
    for (int c = 0; c < NP; ++c) acc[r][c] = _mm512_setzero_si512();
  }
  for (int q = 0; q < j.k4; ++q) {
    __m512i wv[NP];
    for (int c = 0; c < NP; ++c) {
      wv[c] = _mm512_load_si512(reinterpret_cast<const void*>(w + c * pstride + size_t(q) * 64));
    }
    for (int r = 0; r < MR; ++r) {
      int32_t quad;
      std::memcpy(&quad, x + size_t(r) * size_t(j.ldx) + size_t(q) * 4, 4);
      const __m512i b = _mm512_set1_epi32(quad);
      // The intrinsic here: GCC keeps these small arrays in registers around it, not around asm.
      for (int c = 0; c < NP; ++c) acc[r][c] = _mm512_dpbusd_epi32(acc[r][c], b, wv[c]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int c = 0; c < NP; ++c) Finish(j, m + r, p + c, acc[r][c]);
  }
}

template <int MR>
inline void RowTile(const S8Job& j, int m) {
  int p = j.p0;
  for (; p + 2 <= j.p1; p += 2) {
    if constexpr (MR == kMr) {
      Tile82(j, m, p);
    } else {
      Tile<MR, 2>(j, m, p);
    }
  }
  if (p < j.p1) Tile<MR, 1>(j, m, p);
}

#undef HOTLINE_DPBUSD

}  // namespace

// Row tiles outermost, as in the AVX2 kernel: a tile's activations (8 x K bytes) stay in L1 while
// it meets every panel of the job, and each output row is written front to back.
void GemmS8JobVnni(const S8Job& j) {
  int m = j.m0;
  for (; m + kMr <= j.m1; m += kMr) RowTile<kMr>(j, m);
  switch (j.m1 - m) {
    case 7: RowTile<7>(j, m); break;
    case 6: RowTile<6>(j, m); break;
    case 5: RowTile<5>(j, m); break;
    case 4: RowTile<4>(j, m); break;
    case 3: RowTile<3>(j, m); break;
    case 2: RowTile<2>(j, m); break;
    case 1: RowTile<1>(j, m); break;
    default: break;
  }
}

}  // namespace hotline::engine::cpu
