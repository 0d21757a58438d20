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

#include "engine/cpu/amx_tiles.inc"

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

// One RB x NP block: activations (16 rows x 32 bf16) in tmm4..5, weights (16 k-pairs x 16
// columns x 2 bf16) in tmm6..7.
template <int RB, int NP>
void AmxTile(const Bf16AmxJob& j, int m, int p, float* cbuf) {
  const size_t ldx_bytes = size_t(j.kpad) * 2, pstride = size_t(j.kpad) * kPanel;
  const uint16_t* a = j.x + size_t(m) * size_t(j.kpad);
  const uint16_t* b = j.w + size_t(p) * pstride;
  AmxZeroAccumulators<RB, NP>();
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
  AmxStoreAndFinish<RB, NP>(cbuf, m, j.m1, [&](int row, int np, const float* c) {
    FinishBf16(j, row, p + np, _mm512_load_ps(c));
  });
}

}  // namespace

void GemmBf16JobAmx(const Bf16AmxJob& j) {
  alignas(64) float cbuf[4 * 256];
  AmxForEachBlock(j.m0, j.m1, j.p0, j.p1,
                  [&]<int RB, int NP>(int m, int p) { AmxTile<RB, NP>(j, m, p, cbuf); });
}

}  // namespace hotline::engine::cpu
