// Internal to the CPU backend: runtime ISA dispatch. Each ISA has its own translation unit
// (kernels_scalar.cc, kernels_avx2.cc, kernels_avx512.cc) compiled with that ISA's flags; the
// rest of the backend is built for baseline x86-64 and calls through the table that matches the
// CPU it runs on, so one binary runs everywhere and uses AVX-512 where it exists.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/cpu/kernels.h"

namespace hotline::engine::cpu {

enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Bf16 = 3 };
const char* IsaName(Isa isa);

// Packed GEMM weights: N is split into panels of kPanel columns; panel p holds columns
// [p*kPanel, (p+1)*kPanel), zero-padded past N.
//   fp32: panel p is K rows of kPanel floats:                 w[p][k][c]
//   bf16: panel p is Kp/2 rows of kPanel (even k, odd k) pairs: w[p][k/2][c][k%2], Kp = K rounded
//         up to even, odd tail zero. The pair layout feeds AVX512-BF16's vdpbf16ps directly;
//         elsewhere a panel widens to fp32 (one shift for even k, one mask for odd k) once per
//         call into a per-thread buffer and the fp32 micro-kernel runs over it.
inline constexpr int kPanel = 16;

// One micro-tile job: rows [0, m) of x times panels [0, panels) of w, written to y with the
// epilogue: y = act(x·w + bias) (+ res). `ncols` (≤ panels*kPanel) columns are valid.
struct GemmTile {
  const float* x;     // fp32 activations, row stride ldx (fp32 path and bf16-widening path)
  const uint16_t* xb; // bf16 activations, row stride ldxb in uint16 (AVX512-BF16 path only)
  int ldx, ldxb;
  const void* w;       // first panel of this tile
  size_t panel_stride; // elements (floats or uint16) between consecutive panels
  int K;               // reduction length (bf16: the unpadded K; pairs run over (K+1)/2)
  int m;               // rows in this tile, 1..mr
  int panels;          // panels in this tile, 1..table.gemm_panels
  int ncols;           // valid columns
  const float* bias;   // may be null; already offset to this tile's first column
  Epilogue epilogue;
  const float* res;    // may be null; offset to the tile; row stride ldr
  int ldr;
  float* y;            // offset to the tile; row stride ldy
  int ldy;
};

// Attention works on blocks of kAttnQueryBlock queries; keys are transposed kAttnKeyBlock at a
// time when head_dim <= kAttnMaxTransposedDim. Per-thread scratch (AttentionScratchFloats):
// kAttnQueryBlock x round16(seq_len) scores + kAttnMaxTransposedDim x kAttnKeyBlock keys.
inline constexpr int kAttnQueryBlock = 16;
inline constexpr int kAttnKeyBlock = 16;
inline constexpr int kAttnMaxTransposedDim = 256;
size_t AttentionScratchPerThread(int max_seqlen);

struct AttentionHead {
  const float* q;  // query row of the first query of this block; row stride ld
  const float* k;  // first key row of the sequence
  const float* v;  // first value row of the sequence
  int ld;          // stride between token rows of qkv (3 * heads * head_dim)
  int num_queries; // queries in this block
  int seq_len;     // keys/values in the sequence
  int head_dim;
  float scale;
  float* ctx;      // output row of the first query; row stride ldc
  int ldc;
  float* scratch;  // AttentionScratchPerThread(seq_len) floats, owned by the calling thread
};

struct KernelTable {
  Isa isa;
  int gemm_mr;      // rows per micro-tile
  int gemm_panels;  // panels per micro-tile
  bool bf16_native; // gemm_bf16 exists and reads GemmTile::xb (activations rounded to bf16)
  void (*gemm_f32)(const GemmTile& t);
  void (*gemm_bf16)(const GemmTile& t);  // AVX512-BF16 only; null elsewhere
  // fp32 panel (K x kPanel) from a bf16 pair panel; lets CPUs without AVX512-BF16 widen each
  // weight once per call instead of once per row block.
  void (*widen_bf16_panel)(const uint16_t* src, int K, float* dst);
  // y = round-to-nearest-even bf16 of x, n values.
  void (*to_bf16)(const float* x, int64_t n, uint16_t* y);
  // y = LayerNorm(x + r) * g + b over n values (r may be null; x, r, y may alias).
  void (*layer_norm_row)(const float* x, const float* r, const float* g, const float* b,
                         float eps, int n, float* y);
  // y = a + b + c over n values.
  void (*add3)(const float* a, const float* b, const float* c, int n, float* y);
  void (*gelu)(const float* x, int64_t n, float* y);
  void (*attention)(const AttentionHead& a);
};

const KernelTable& ScalarKernels();
const KernelTable& Avx2Kernels();
const KernelTable& Avx512Kernels();
const KernelTable& Avx512Bf16Kernels();

// The best ISA this CPU and OS support (cpuid + xgetbv), optionally lowered by the environment
// variable HOTLINE_CPU_ISA=scalar|avx2|avx512|avx512_bf16 (never raised above what the CPU has).
Isa DetectedIsa();
// The table in use. Selected once; SetIsaForTesting switches it (tests only: not thread-safe with
// concurrent kernel calls, and only to ISAs the CPU supports: others throw hotline::Error).
const KernelTable& Kernels();
void SetIsaForTesting(Isa isa);
bool IsaSupported(Isa isa);

// True when the OpenMP runtime puts idle threads to sleep at once (OMP_WAIT_POLICY=passive
// without a GOMP_SPINCOUNT, read from the environment as libgomp reads it at start-up). Then
// every parallel region pays a futex wake of a sleeping thread, and the region waits for it at
// its closing barrier: measured 50-70 us per region on this project's 2-vCPU VMs (1x32 INT8:
// 1.45 ms passive vs 0.40 ms spinning vs 0.45 ms on one thread). Kernels then keep work of a few
// tens of microseconds on the calling thread (ParallelWorth).
bool OmpWakeIsSlow();
// Whether a kernel call of about `us` microseconds of single-thread work should open a parallel
// region: always above 200 us, above 2 us where threads spin (wake ~1-2 us), never below.
inline bool ParallelWorth(double us) { return us >= (OmpWakeIsSlow() ? 200.0 : 2.0); }

}  // namespace hotline::engine::cpu
