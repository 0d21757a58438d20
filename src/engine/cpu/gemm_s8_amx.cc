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

#include "engine/cpu/amx_tiles.inc"

// One RB x NP block: activations (16 rows x 64 u8) in tmm4..5, weights (16 k-quads x 64 s8) in
// tmm6..7.
template <int RB, int NP>
void AmxTile(const S8Job& j, int m, int p, int32_t* cbuf) {
  const size_t ldx = size_t(j.ldx), pstride = size_t(j.k4) * 64;
  const uint8_t* a = j.xu + size_t(m) * ldx;
  const int8_t* b = j.w + size_t(p) * pstride;
  AmxZeroAccumulators<RB, NP>();
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
  AmxStoreAndFinish<RB, NP>(cbuf, m, j.m1, [&](int row, int np, const int32_t* c) {
    Finish(j, row, p + np, _mm512_load_si512(c));
  });
}

}  // namespace

void GemmS8JobAmx(const S8Job& j) {
  alignas(64) int32_t cbuf[4 * 256];
  AmxForEachBlock(j.m0, j.m1, j.p0, j.p1,
                  [&]<int RB, int NP>(int m, int p) { AmxTile<RB, NP>(j, m, p, cbuf); });
}

}  // namespace hotline::engine::cpu
