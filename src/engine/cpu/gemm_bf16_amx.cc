// The AMX-BF16 GEMM (Gemm tactic 9, packed_amx_bf16; see gemm_bf16_internal.h). This file alone
// is compiled with AVX-512 and AMX-BF16 flags (CMakeLists.txt) and is only called after cpuid,
// xgetbv and the kernel's permission (arch_prctl, CpuHasAmxBf16) say this thread may use AMX, so
// the binary still runs on CPUs without it. Products of bf16 values are exact in fp32; the
// accumulation is fp32 (tile order: 32 k values per step), as vdpbf16ps's.
#include <immintrin.h>

#include <cstdint>

#include "engine/cpu/cpu_isa.h"
#include "engine/cpu/gemm_bf16_internal.h"
#include "engine/cpu/gemm_s8_internal.h"

namespace hotline::engine::cpu {
namespace {

// ErfV/GeluV/TanhV/Activate: the same epilogue arithmetic as the fp32 and INT8 kernels.
#include "engine/cpu/gemm_s8_avx512.inc"

// Palette 1: tmm0..3 fp32 accumulators (16 rows x 16 fp32), tmm4..5 activations (16 rows x 32
// bf16), tmm6..7 weights (16 k-pairs x 16 columns x 2 bf16); every tile 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

// bias, epilogue, residual, masked store of one 16-column row segment.
inline void FinishBf16(const Bf16AmxJob& j, int m, int p, __m512 v) {
  const int n0 = p * kPanel;
  const int nc = j.N - n0 < kPanel ? j.N - n0 : kPanel;
  const __mmask16 mask = nc == kPanel ? __mmask16(0xffff) : __mmask16((1u << nc) - 1);
  if (j.bias != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, j.bias + n0));
  v = Activate(v, j.epilogue);
  const size_t row = size_t(m) * size_t(j.N) + size_t(n0);
  if (j.res != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, j.res + row));
  _mm512_mask_storeu_ps(j.y + row, mask, v);
}

// RB 16-row blocks times NP panels; accumulators C[rb][np] in tmm(2*rb + np). Rows of the last
// block past j.m1 are computed on the zero padding and dropped.
template <int RB, int NP>
void AmxTile(const Bf16AmxJob& j, int m, int p, float* cbuf) {
  const size_t ldx_bytes = size_t(j.kpad) * 2, pstride = size_t(j.kpad) * kPanel;
  const uint16_t* a = j.x + size_t(m) * size_t(j.kpad);
  const uint16_t* b = j.w + size_t(p) * pstride;
  _tile_zero(0);
  if constexpr (NP > 1) _tile_zero(1);
  if constexpr (RB > 1) _tile_zero(2);
  if constexpr (RB > 1 && NP > 1) _tile_zero(3);
  for (int kk = 0; kk < j.kpad / 32; ++kk) {
    _tile_loadd(4, a + size_t(kk) * 32, ldx_bytes);
    if constexpr (RB > 1) _tile_loadd(5, a + 16 * size_t(j.kpad) + size_t(kk) * 32, ldx_bytes);
    _tile_loadd(6, b + size_t(kk) * 512, 64);
    if constexpr (NP > 1) _tile_loadd(7, b + pstride + size_t(kk) * 512, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NP > 1) _tile_dpbf16ps(1, 4, 7);
    if constexpr (RB > 1) _tile_dpbf16ps(2, 5, 6);
    if constexpr (RB > 1 && NP > 1) _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, cbuf, 64);
  if constexpr (NP > 1) _tile_stored(1, cbuf + 256, 64);
  if constexpr (RB > 1) _tile_stored(2, cbuf + 512, 64);
  if constexpr (RB > 1 && NP > 1) _tile_stored(3, cbuf + 768, 64);
  for (int rb = 0; rb < RB; ++rb) {
    const int rows = j.m1 - (m + 16 * rb) < 16 ? j.m1 - (m + 16 * rb) : 16;
    for (int np = 0; np < NP; ++np) {
      const float* c = cbuf + 256 * (2 * rb + np);
      for (int r = 0; r < rows; ++r) {
        FinishBf16(j, m + 16 * rb + r, p + np, _mm512_load_ps(c + 16 * r));
      }
    }
  }
}

}  // namespace

// 32-row x 2-panel blocks (4 accumulator tiles), the edges with 16 rows or one panel. The tile
// configuration is loaded per job (another library may have changed it on this thread) and
// released after, so the thread carries no AMX state between GEMMs.
void GemmBf16JobAmx(const Bf16AmxJob& j) {
  static const TileConfig config;
  alignas(64) float cbuf[4 * 256];
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
