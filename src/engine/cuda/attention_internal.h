// Internal to attention*.cu: launchers of the tensor-core paths (attention_wmma.cu,
// attention_mma.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "engine/cuda/kernels.h"

namespace hotline::engine::cuda::detail {

// Raises a kernel's dynamic shared memory limit once per (kernel, device): the first launch
// happens in an eager run, so graph captures never call cudaFuncSetAttribute.
void AllowDynamicSmem(const void* kernel, int bytes);

// The tensor-core paths' common dispatch: calls launch(T{}, std::integral_constant<int, D>{}) for
// T in {__half, __nv_bfloat16} and D in {32, 64, 128} and returns true; false for anything else.
template <typename Launch>
bool DispatchHalfHeadDim(DType dtype, int head_dim, Launch&& launch) {
  auto by_dim = [&](auto tag) {
    switch (head_dim) {
      case 32: launch(tag, std::integral_constant<int, 32>{}); return true;
      case 64: launch(tag, std::integral_constant<int, 64>{}); return true;
      case 128: launch(tag, std::integral_constant<int, 128>{}); return true;
      default: return false;
    }
  };
  if (dtype == DType::kF16) return by_dim(__half{});
  if (dtype == DType::kBF16) return by_dim(__nv_bfloat16{});
  return false;
}

// FP16/BF16, head_dim in {32, 64, 128}: flash-style WMMA kernel. Returns false when the
// combination has no fast path (the caller then uses the exact kernel).
bool LaunchAttentionWmma(DType dtype, const void* qkv, const int32_t* cu_seqlens, int batch,
                         int max_seqlen, int heads, int head_dim, float scale, void* ctx,
                         cudaStream_t stream);

// Variant 1 (attention_mma.cu): mma.sync with register accumulators; same contract.
bool LaunchAttentionMma(DType dtype, const void* qkv, const int32_t* cu_seqlens, int batch,
                        int max_seqlen, int heads, int head_dim, float scale, void* ctx,
                        cudaStream_t stream);

// The same kernel writing its output quantised (fp8: E4M3, else INT8) as
// saturate(round(stored_value / out_scale)) into ctx_q [tokens, hidden] bytes (rows out_ld bytes
// apart when out_ld > 0). interleaved: qkv rows are per head [Q_h | K_h | V_h] (AttentionQuant).
bool LaunchAttentionMmaQuant(DType dtype, const void* qkv, const int32_t* cu_seqlens, int batch,
                             int max_seqlen, int heads, int head_dim, float scale,
                             float out_scale, bool fp8, void* ctx_q, bool interleaved,
                             int out_ld, cudaStream_t stream);

}  // namespace hotline::engine::cuda::detail
