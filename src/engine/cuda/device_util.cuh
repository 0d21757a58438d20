// Device helpers shared by the .cu files: element-type conversions, dtype dispatch, reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/kernels.h"

namespace hotline::engine::cuda {

__device__ __forceinline__ float ToF(float v) { return v; }
__device__ __forceinline__ float ToF(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToF(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T FromF(float v);
template <> __device__ __forceinline__ float FromF<float>(float v) { return v; }
template <> __device__ __forceinline__ __half FromF<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 FromF<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// One value to 8 bits, as every quantiser of the engine rounds it: INT8 nearest-even clamped to
// +-127, E4M3 nearest-even saturating to +-448. Callers pass v = x / x_scale (IEEE division, so
// the host can replay it).
template <bool kFp8>
__device__ __forceinline__ uint8_t Quantize8(float v) {
  if constexpr (kFp8) {
    return uint8_t(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
  } else {
    return uint8_t(int8_t(max(-127, min(127, __float2int_rn(v)))));
  }
}

// Calls f(T{}) with T the element type of `dtype`.
template <typename F>
void DispatchDType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: f(float{}); return;
    case DType::kF16: f(__half{}); return;
    case DType::kBF16: f(__nv_bfloat16{}); return;
  }
}

// Our GEMM epilogues' activation by code (EpilogueActCode, gemm.h): 0 none, 1 erf GELU,
// 2 tanh GELU, 3 tanh.
__device__ __forceinline__ float ApplyAct(float v, int act) {
  if (act == 1) v = 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
  if (act == 2) v = 0.5f * v * (1.f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
  if (act == 3) v = tanhf(v);
  return v;
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block; `red` holds at least blockDim.x / 32 floats. Every thread gets the result.
__device__ __forceinline__ float BlockSum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = WarpSum(v);
  __syncthreads();  // `red` may still be read by a previous call
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float s = lane < warps ? red[lane] : 0.f;
  return WarpSum(s);
}

// Programmatic dependent launch (KernelVariants::pdl). Kernels launched through LaunchKernel call
// PdlWaitThenTrigger() before touching global memory: it waits until the preceding kernel has
// completed and its writes are visible (a no-op when launched without the attribute or on
// GPUs before sm_90), then lets the next kernel be scheduled early.
__device__ __forceinline__ void PdlWaitThenTrigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

bool PdlActive();  // variant on and device sm_90+ (elementwise.cu)

// kernel<<<grid, block, smem, stream>>>(args...), with programmatic stream serialisation when
// PdlActive() and `stream` is not the legacy default stream. Returns the launch's error (callers CUDA_CHECK it).
template <typename... KArgs, typename... Args>
cudaError_t LaunchKernel(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                         cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  // Not on the legacy default stream (tests, one-off calls): only on streams we created. While
  // capturing a graph, only after kernel nodes (a programmatic edge may only join two kernels).
  bool pdl = stream != nullptr && PdlActive();
  if (pdl) {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    const cudaGraphNode_t* deps = nullptr;
    const cudaGraphEdgeData* edges = nullptr;
    size_t n = 0;
    if (cudaStreamGetCaptureInfo(stream, &st, nullptr, nullptr, &deps, &edges, &n) !=
        cudaSuccess) {
      cudaGetLastError();
      pdl = false;
    } else if (st == cudaStreamCaptureStatusActive) {
      pdl = n > 0;
      for (size_t i = 0; i < n && pdl; ++i) {
        cudaGraphNodeType type;
        pdl = cudaGraphNodeGetType(deps[i], &type) == cudaSuccess &&
              type == cudaGraphNodeTypeKernel;
      }
    }
  }
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...);
}

inline unsigned GridFor(int64_t n, int threads, int64_t cap = 65535LL * 16) {
  int64_t g = (n + threads - 1) / threads;
  if (g > cap) g = cap;
  return unsigned(g < 1 ? 1 : g);
}

}  // namespace hotline::engine::cuda
