// Internal to the CPU backend: the AMX-BF16 GEMM (Gemm tactic 9, packed_amx_bf16;
// gemm_bf16_amx.cc). tdpbf16ps multiplies a 16-row x 32-bf16 activation tile by a 16 k-pair x
// 16-column weight tile (each column's two consecutive k values side by side) and adds into
// 16 x 16 fp32 accumulators. That weight tile is 16 consecutive k-pairs of one of packed_bf16's
// weight panels (64 bytes a pair row), so the panels are packed_bf16's with K padded to a
// multiple of 32 (zero pairs); the activations are rounded to bf16 once per call into rows of
// kpad values (zero tail) and whole 16-row tiles (zero rows, computed and dropped).
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/cpu/kernels.h"

namespace hotline::engine::cpu {

struct Bf16AmxJob {
  const uint16_t* x;     // bf16 activations, rows of ldx = kpad values, rows padded to 16
  int kpad;              // K rounded up to a multiple of 32
  const uint16_t* w;     // panels of kpad / 2 pair rows x 16 columns x 2 (kpad * 16 values)
  const float* bias;     // [N] or null
  Epilogue epilogue;
  const float* res;      // fp32 residual [M, N] or null (added after the epilogue); may alias y
  float* y;              // fp32 [M, N]
  int N;
  int m0, m1;            // rows of this job (m0 a multiple of 16)
  int p0, p1;            // panels of this job
};

// Runs one job on AMX tiles (32-row x 2-panel blocks). Compiled with AVX-512 + AMX flags; call
// only when CpuHasAmxBf16().
void GemmBf16JobAmx(const Bf16AmxJob& job);

}  // namespace hotline::engine::cpu
