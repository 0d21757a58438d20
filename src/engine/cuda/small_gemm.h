// Our own GEMM for few rows (M <= 64, FP16/BF16): weight streaming with split-K over tensor
// cores. cuBLASLt needs about 9 us per BERT-base GEMM at 64 rows (few output tiles, few SMs
// busy) where reading the weights once needs about 1 us; this kernel spreads N x K over
// (N/64) x splits blocks, each reading its 64-column weight slice once, writes FP32 partial sums
// to the workspace, and a second small kernel reduces them with bias, activation and residual.
// It is a tuning candidate of cuda::Gemm, accepted only after its result matched cuBLASLt's on
// the tuning data.
// Two reductions: `fused` = false launches the separate reduce kernel; `fused` = true does it in
// the same launch: each block writes its partial sums, counts itself in on a per-column-tile
// counter, and the last block of a tile sums the splits in fixed order (so results do not depend
// on block timing) with the epilogue, then resets the counter to 0 for the next launch or graph
// replay. The counters (`counters`, at least ldn / 64 ints, zero before the first launch) belong
// to one stream: LtWorkspace::counters().
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "engine/cuda/gemm.h"

namespace hotline::engine::cuda {

bool SmallGemmEligible(DType dtype, int M, int K, int ldn);
// Split counts worth timing for this K (each a divisor of K / 64).
std::vector<int> SmallGemmSplits(int K);
size_t SmallGemmWorkspaceBytes(int ldn, int splits);
// y[M, ldn] = act(x[M, K] . w[ldn, K]^T + bias) (+ residual); residual may alias y.
void SmallGemm(DType dtype, const void* x, int M, int K, const void* w, int ldn, const void* bias,
               GemmEpilogue epilogue, const void* residual, void* y, int splits, bool fused,
               void* workspace, int* counters, cudaStream_t stream);
// Variant 2: one k slice of `kslice` (128, 256 or 384; K % kslice == 0) per block, loaded whole
// with cp.async (sm_80+), splits = K / kslice, reduction always fused (counters as above).
// Workspace: SmallGemmWorkspaceBytes(ldn, K / kslice).
std::vector<int> SmallGemmAsyncSlices(int K);
size_t SmallGemmAsyncSmemBytes(DType dtype, int kslice);
void SmallGemmAsync(DType dtype, const void* x, int M, int K, const void* w, int ldn,
                    const void* bias, GemmEpilogue epilogue, const void* residual, void* y,
                    int kslice, void* workspace, int* counters, cudaStream_t stream);
constexpr int kSmallGemmMaxTiles = 4096;  // ldn / 64 at most (counter slots of LtWorkspace)

}  // namespace hotline::engine::cuda
