// Device helpers of the quantised encoder (see encoder_quant.h).
#include <cuda_fp8.h>

#include <cstdint>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device_util.cuh"
#include "engine/cuda/encoder_quant.h"

#include <string>

#include "base/error.h"

namespace hotline::engine::cuda {
namespace {

// Non-negative floats order like their bit patterns as ints: atomicMax on the int view.
template <typename T>
__global__ void AbsMaxKernel(const T* __restrict__ x, int64_t n, float* amax) {
  float m = 0.f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    m = fmaxf(m, fabsf(ToF(x[i])));  // fmaxf drops NaN
  }
  m = WarpMax(m);
  if ((threadIdx.x & 31) == 0 && m > 0.f) {
    atomicMax(reinterpret_cast<int*>(amax), __float_as_int(m));
  }
}

// As quant_gemm.cu's quantiser: nearest-even, INT8 clamped to +-127, E4M3 saturating.
template <bool kFp8>
__device__ __forceinline__ uint8_t Quantize8(float v) {
  if constexpr (kFp8) {
    return uint8_t(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
  } else {
    return uint8_t(int8_t(max(-127, min(127, __float2int_rn(v)))));
  }
}

// One warp per row of H <= 1024 (values in registers): x = LayerNorm(x) * gamma + beta in place
// (two-pass FP32 statistics) and q = Q(x_rounded / x_scale), x_rounded being the value stored in
// T, so q equals what a separate quantise pass over the stored x would produce.
template <typename T, bool kFp8>
__global__ void LayerNormQuantKernel(T* __restrict__ x, int rows, int H,
                                     const float* __restrict__ gamma,
                                     const float* __restrict__ beta, float eps, float x_scale,
                                     uint8_t* __restrict__ q) {
  const int row = int((blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;  // whole warps leave together
  T* xr = x + size_t(row) * H;
  float v[32];
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int i = lane + 32 * j;
    v[j] = i < H ? ToF(xr[i]) : 0.f;
    s += v[j];
  }
  const float mean = WarpSum(s) / float(H);
  float s2 = 0.f;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int i = lane + 32 * j;
    const float d = v[j] - mean;
    if (i < H) s2 += d * d;
  }
  const float r = rsqrtf(WarpSum(s2) / float(H) + eps);
  uint8_t* qr = q + size_t(row) * H;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int i = lane + 32 * j;
    if (i < H) {
      const T y = FromF<T>((v[j] - mean) * r * gamma[i] + beta[i]);
      xr[i] = y;
      qr[i] = Quantize8<kFp8>(ToF(y) / x_scale);
    }
  }
}

}  // namespace

bool LayerNormQuantSupported(int hidden) { return hidden >= 1 && hidden <= 1024; }

void LayerNormQuant(DType dtype, void* x, int rows, int hidden, const float* gamma,
                    const float* beta, float eps, float x_scale, QuantType q, void* xq,
                    cudaStream_t s) {
  if (!LayerNormQuantSupported(hidden) || rows < 0 || !(x_scale > 0.f)) {
    throw Error("LayerNormQuant: need hidden in [1, 1024], rows >= 0 and x_scale > 0, got " +
                std::to_string(hidden) + ", " + std::to_string(rows) + ", " +
                std::to_string(x_scale));
  }
  if (rows == 0) return;
  const unsigned blocks = unsigned((int64_t(rows) * 32 + 127) / 128);
  DispatchDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* xp = static_cast<T*>(x);
    uint8_t* o = static_cast<uint8_t*>(xq);
    if (q == QuantType::kFp8E4M3)
      LayerNormQuantKernel<T, true><<<blocks, 128, 0, s>>>(xp, rows, hidden, gamma, beta, eps,
                                                            x_scale, o);
    else
      LayerNormQuantKernel<T, false><<<blocks, 128, 0, s>>>(xp, rows, hidden, gamma, beta, eps,
                                                             x_scale, o);
  });
  CUDA_CHECK_LAUNCH();
}

void AbsMaxAccumulate(DType dtype, const void* x, int64_t n, float* amax, cudaStream_t s) {
  if (n <= 0) return;
  DispatchDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    AbsMaxKernel<T><<<GridFor(n, 256, 1024), 256, 0, s>>>(static_cast<const T*>(x), n, amax);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace hotline::engine::cuda
