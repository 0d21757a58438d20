// Our own GEMM for few rows (M <= 64, FP16/BF16): weight streaming with split-K over tensor
// cores. cuBLASLt needs about 9 us per BERT-base GEMM at 64 rows (few output tiles, few SMs
// busy) where reading the weights once needs about 1 us; this kernel spreads N x K over
// (N/64) x splits blocks, each reading its 64-column weight slice once, writes FP32 partial sums
// to the workspace, and a second small kernel reduces them with bias, activation and residual.
// It is a tuning candidate of cuda::Gemm, accepted only after its result matched cuBLASLt's on
// the tuning data.
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
               GemmEpilogue epilogue, const void* residual, void* y, int splits, void* workspace,
               cudaStream_t stream);

}  // namespace hotline::engine::cuda
