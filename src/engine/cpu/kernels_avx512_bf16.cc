// AVX-512 kernels with AVX512-BF16: the bf16 GEMM rounds activations to bf16 once per call and
// feeds (even k, odd k) pairs to vdpbf16ps (fp32 accumulate). Compiled alone with
// -mavx512bf16 on top of the AVX-512 flags; reached only when cpuid reports AVX512_BF16.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "engine/cpu/cpu_isa.h"

namespace hotline::engine::cpu {
namespace {

#include "engine/cpu/ops_avx512.inc"
#include "engine/cpu/kernels_body.inc"

template <int MR, int NV>
void TileBf16Native(const GemmTile& t) {
  __m512 acc[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_setzero_ps();
  const uint16_t* w = static_cast<const uint16_t*>(t.w);
  const int kpairs = (t.K + 1) / 2;
  for (int kp = 0; kp < kpairs; ++kp) {
    __m512bh wv[NV];
    for (int j = 0; j < NV; ++j) {
      wv[j] = (__m512bh)_mm512_loadu_si512(w + j * t.panel_stride +
                                           static_cast<size_t>(kp) * 2 * kPanel);
    }
    for (int i = 0; i < MR; ++i) {
      int32_t pair;
      std::memcpy(&pair, t.xb + static_cast<size_t>(i) * t.ldxb + 2 * kp, 4);
      __m512bh xv = (__m512bh)_mm512_set1_epi32(pair);
      for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, wv[j]);
    }
  }
  StoreTile<MR, NV>(t, acc);
}

template <int MR, int NV>
struct NativeTile {
  static void Run(const GemmTile& t) { TileBf16Native<MR, NV>(t); }
};

void GemmBf16Native(const GemmTile& t) {
  if (t.panels == kPanels) {
    ByRows<kMr, kNvFull, NativeTile>::Run(t);
  } else {
    ByRows<kMr, kNvOne, NativeTile>::Run(t);
  }
}

void ToBf16Native(const float* x, int64_t n, uint16_t* y) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256bh b = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), (__m256i)b);
  }
  if (i < n) ToBf16(x + i, n - i, y + i);
}

}  // namespace

const KernelTable& Avx512Bf16Kernels() {
  static const KernelTable table =
      MakeTable(Isa::kAvx512Bf16, true, GemmBf16Native, ToBf16Native);
  return table;
}

}  // namespace hotline::engine::cpu
