// Internal to the CPU backend: the packed INT8 GEMMs. Tactic 6, packed_s8: AVX2 CPUs without
// VNNI, where oneDNN's s8 matmul has a large fixed cost at the small M of a batch-1 request.
// Tactic 7, packed_vnni: AVX512-VNNI CPUs (vpdpbusd, 8-bit weights; gemm_s8_vnni.cc). Tactic 8,
// packed_amx: AMX-INT8 CPUs (tdpbusd on 16x64 tiles; gemm_s8_amx.cc), the same panels with K
// padded to whole tiles. The build-time tuner times them against onednn_s8 per GEMM shape and
// keeps the fastest.
//
// AVX2 (packed_s8):
// Arithmetic: vpmaddubsw multiplies u8 activations by s8 weights and adds adjacent pairs into
// int16, vpmaddwd by ones widens to int32. Activations are s8 (symmetric), so the caller hands
// them over as u8 = s8 + 128 and the kernel subtracts comp[n] = 128 * sum_k W[k, n] from every
// accumulator. The int16 pair sum is at most 2 * 255 * |w|, which fits for |w| <= 63
// (S8WeightQmax() on such CPUs): the result is the exact integer product, as oneDNN's.
// VNNI (packed_vnni): vpdpbusd adds four u8·s8 products straight into int32 (no int16 step), so
// 8-bit weights are exact; the same +128 shift and comp[n] correction, the same panels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/cpu/kernels.h"

namespace hotline::engine::cpu {

// Weight panels: N is split into panels of kS8Panel columns (zero-padded past N), K into
// quads of 4 (zero-padded past K). Panel p, quad q holds 64 bytes: columns 0..7 then 8..15, each
// column's 4 consecutive k values: w[p][q][c / 8][c % 8][k % 4] = w[p][q][c][k % 4], which is
// two ymm operands for the AVX2 kernel and one zmm operand for the VNNI kernel.
inline constexpr int kS8Panel = 16;
inline constexpr int kS8Mr = 4;  // rows per AVX2 micro-tile (8 ymm accumulators)

struct S8Job {
  const uint8_t* xu;     // activations + 128, row-major, row stride ldx (>= 4 * k4, zero tail)
  int ldx;
  int k4;                // K rounded up to a multiple of 4, divided by 4
  const int8_t* w;       // packed panels
  const int32_t* comp;   // [panels * kS8Panel] 128 * column sums (0 past N)
  const float* scale;    // [panels * kS8Panel] x_scale * w_scale[n]
  const float* bias;     // [panels * kS8Panel] or null
  Epilogue epilogue;
  const float* res;      // fp32 residual [M, N] or null (added after the epilogue); may alias y
  void* y;               // fp32 [M, N], or s8 when out_inv > 0
  float out_inv;         // 1 / out_scale for an s8 output, else 0
  int N;
  int m0, m1;            // rows of this job
  int p0, p1;            // panels of this job
};

// Runs one job (rows m0..m1 times panels p0..p1). Compiled with -mavx2 -mfma; call only when
// the CPU has AVX2 (Kernels().isa >= Isa::kAvx2).
void GemmS8JobAvx2(const S8Job& job);

// The same job with AVX512-VNNI (8-row x 2-panel micro-tiles of 16 zmm accumulators). Compiled
// with AVX-512 + VNNI flags; call only when CpuHasVnni().
void GemmS8JobVnni(const S8Job& job);

// The same job on AMX tiles (32-row x 2-panel blocks). Needs k4 % 16 == 0, ldx == 4 * k4, m0 a
// multiple of 16 and the activation rows zero-padded to a multiple of 16 past M. Compiled with
// AMX flags; call only when CpuHasAmxInt8().
void GemmS8JobAmx(const S8Job& job);

// u8 = s8 + 128 for n values (a xor of the sign bit); AVX2.
void S8ToU8Avx2(const int8_t* x, int64_t n, uint8_t* y);

}  // namespace hotline::engine::cpu
