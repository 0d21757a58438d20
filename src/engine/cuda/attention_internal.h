// Internal to attention*.cu: launchers of the tensor-core paths (attention_wmma.cu,
// attention_mma.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/kernels.h"

namespace hotline::engine::cuda::detail {

// Raises a kernel's dynamic shared memory limit once per (kernel, device): the first launch
// happens in an eager run, so graph captures never call cudaFuncSetAttribute.
void AllowDynamicSmem(const void* kernel, int bytes);

// FP16/BF16, head_dim in {32, 64, 128}: flash-style WMMA kernel. Returns false when the
// combination has no fast path (the caller then uses the exact kernel).
bool LaunchAttentionWmma(DType dtype, const void* qkv, const int32_t* cu_seqlens, int batch,
                         int max_seqlen, int heads, int head_dim, float scale, void* ctx,
                         cudaStream_t stream);

// Variant 1 (attention_mma.cu): mma.sync with register accumulators; same contract.
bool LaunchAttentionMma(DType dtype, const void* qkv, const int32_t* cu_seqlens, int batch,
                        int max_seqlen, int heads, int head_dim, float scale, void* ctx,
                        cudaStream_t stream);

}  // namespace hotline::engine::cuda::detail
