// The packed INT8 GEMM on AMX tiles (GemmS8 tactic 8, packed_amx; see gemm_s8_internal.h). This
// file alone is compiled with AVX-512, VNNI and AMX flags (CMakeLists.txt) and is only called
// after cpuid, xgetbv and the kernel's permission (arch_prctl, CpuHasAmxInt8) say this thread may
// use AMX, so the binary still runs on CPUs without it.
//
// tdpbusd multiplies a 16 x 64 tile of u8 activations by a 16 x 64 tile of s8 weights laid out
// as 16 k-quads x 16 columns x 4 k values and adds the products into 16 x 16 int32 accumulators,
// exactly (no intermediate saturation). That weight tile is 16 consecutive k-quads of one of our
// weight panels (stride 64 bytes): the panels need no other layout, only K padded to whole tiles
// (k4 a multiple of 16, zero quads) and the activations M padded to whole 16-row tiles (zero
// rows). The +128 shift of the activations is corrected by comp[n] in the shared epilogue.
#include <immintrin.h>

#include <cstdint>

#include "engine/cpu/gemm_s8_internal.h"

namespace hotline::engine::cpu {
namespace {

#include "engine/cpu/gemm_s8_avx512.inc"

// Palette 1: tmm0..3 int32 accumulators (16 rows x 16 int32), tmm4..5 activations (16 rows x
// 64 u8), tmm6..7 weights (16 k-quads x 64 s8); every tile 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

// RB 16-row blocks (rows m..m+16*RB) times NP panels (p..p+NP); accumulators C[rb][np] in
// tmm(2*rb + np). Rows of the last block past j.m1 are computed on the zero padding and dropped.
template <int RB, int NP>
void AmxTile(const S8Job& j, int m, int p, int32_t* cbuf) {
  const size_t ldx = size_t(j.ldx), pstride = size_t(j.k4) * 64;
  const uint8_t* a = j.xu + size_t(m) * ldx;
  const int8_t* b = j.w + size_t(p) * pstride;
  _tile_zero(0);
  if constexpr (NP > 1) _tile_zero(1);
  if constexpr (RB > 1) _tile_zero(2);
  if constexpr (RB > 1 && NP > 1) _tile_zero(3);
  for (int kk = 0; kk < j.k4 / 16; ++kk) {
    _tile_loadd(4, a + size_t(kk) * 64, ldx);
    if constexpr (RB > 1) _tile_loadd(5, a + 16 * ldx + size_t(kk) * 64, ldx);
    _tile_loadd(6, b + size_t(kk) * 1024, 64);
    if constexpr (NP > 1) _tile_loadd(7, b + pstride + size_t(kk) * 1024, 64);
    _tile_dpbusd(0, 4, 6);
    if constexpr (NP > 1) _tile_dpbusd(1, 4, 7);
    if constexpr (RB > 1) _tile_dpbusd(2, 5, 6);
    if constexpr (RB > 1 && NP > 1) _tile_dpbusd(3, 5, 7);
  }
  _tile_stored(0, cbuf, 64);
  if constexpr (NP > 1) _tile_stored(1, cbuf + 256, 64);
  if constexpr (RB > 1) _tile_stored(2, cbuf + 512, 64);
  if constexpr (RB > 1 && NP > 1) _tile_stored(3, cbuf + 768, 64);
  for (int rb = 0; rb < RB; ++rb) {
    const int rows = j.m1 - (m + 16 * rb) < 16 ? j.m1 - (m + 16 * rb) : 16;
    for (int np = 0; np < NP; ++np) {
      const int32_t* c = cbuf + 256 * (2 * rb + np);
      for (int r = 0; r < rows; ++r) {
        Finish(j, m + 16 * rb + r, p + np, _mm512_load_si512(c + 16 * r));
      }
    }
  }
}

}  // namespace

// 32-row x 2-panel blocks (4 accumulator tiles), the edges with 16 rows or one panel. The tile
// configuration is loaded per job (another library may have changed it on this thread) and
// released after, so the thread carries no AMX state between GEMMs.
void GemmS8JobAmx(const S8Job& j) {
  static const TileConfig config;
  alignas(64) int32_t cbuf[4 * 256];
  _tile_loadconfig(&config);
  for (int m = j.m0; m < j.m1; m += 32) {
    const bool two_blocks = j.m1 - m > 16;
    int p = j.p0;
    for (; p + 2 <= j.p1; p += 2) {
      if (two_blocks) {
        AmxTile<2, 2>(j, m, p, cbuf);
      } else {
        AmxTile<1, 2>(j, m, p, cbuf);
      }
    }
    if (p < j.p1) {
      if (two_blocks) {
        AmxTile<2, 1>(j, m, p, cbuf);
      } else {
        AmxTile<1, 1>(j, m, p, cbuf);
      }
    }
  }
  _tile_release();
}

}  // namespace hotline::engine::cpu
