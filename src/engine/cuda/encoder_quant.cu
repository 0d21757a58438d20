// Device helpers of the quantised encoder (see encoder_quant.h).
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "engine/cuda/attention_internal.h"
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

// Element e of a 16-byte word holding E = 16 / sizeof(T) values of T, as float (e is a
// compile-time constant in the unrolled loops: a register select, no local memory).
template <typename T>
__device__ __forceinline__ float ElemF(const int4& v, int e) {
  static_assert(sizeof(T) == 4 || std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>);
  if constexpr (sizeof(T) == 4) {
    return __int_as_float(e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w);
  } else {
    const uint32_t w = uint32_t(e < 2 ? v.x : e < 4 ? v.y : e < 6 ? v.z : v.w);
    const unsigned short h = (e & 1) ? (unsigned short)(w >> 16) : (unsigned short)(w & 0xffffu);
    if constexpr (std::is_same_v<T, __half>) {
      return __half2float(__ushort_as_half(h));
    } else {
      return __bfloat162float(__ushort_as_bfloat16(h));
    }
  }
}

// The same in 16-byte vectors (variant 1's layout, layernorm.cu): one warp per row, NV vectors
// of E = 16 / sizeof(T) elements per lane, one 16-byte load and store of x and one E-byte store
// of q per vector. Needs hidden % E == 0 and aligned rows (the caller checks). The row stays in
// registers as loaded (NV 16-byte words, converted to float where used: the same values and the
// same summation order as converting once, so the same bytes), 48 registers at NV = 3 (BERT-base's
// 768 in FP16) where the row held as floats took 63: 5 blocks per SM instead of 4. Forcing one
// wave at 8,192 rows (32 registers, 8 blocks) spills and ran the FP8 encoder 6% slower (H200,
// 2026-12-02).
template <typename T, bool kFp8, int NV>
__global__ void __launch_bounds__(256)
    LayerNormQuantWarpKernel(T* __restrict__ x, int rows, int H, const float* __restrict__ gamma,
                             const float* __restrict__ beta, float eps, float x_scale,
                             uint8_t* __restrict__ q) {
  constexpr int E = 16 / sizeof(T);
  static_assert(E % 4 == 0, "whole float4s of gamma and beta per vector");
  using QVec = std::conditional_t<E == 8, uint64_t, uint32_t>;
  PdlWaitThenTrigger();
  const int row = int((blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;  // whole warps leave together
  const int nvec = H / E;
  T* xr = x + int64_t(row) * H;
  int4 raw[NV];
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int idx = lane + 32 * i;
    raw[i] = make_int4(0, 0, 0, 0);
    if (idx < nvec) {
      raw[i] = *reinterpret_cast<const int4*>(xr + idx * E);
#pragma unroll
      for (int e = 0; e < E; ++e) s += ElemF<T>(raw[i], e);
    }
  }
  const float mean = WarpSum(s) / float(H);
  float s2 = 0.f;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    if (lane + 32 * i < nvec) {
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const float d = ElemF<T>(raw[i], e) - mean;
        s2 += d * d;
      }
    }
  }
  const float r = rsqrtf(WarpSum(s2) / float(H) + eps);
  uint8_t* qr = q + int64_t(row) * H;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int idx = lane + 32 * i;
    if (idx >= nvec) continue;
    alignas(16) T o[E];
    QVec qv = 0;
#pragma unroll
    for (int e = 0; e < E; e += 4) {
      const float4 g = *reinterpret_cast<const float4*>(gamma + idx * E + e);
      const float4 b = *reinterpret_cast<const float4*>(beta + idx * E + e);
      const float gs[4] = {g.x, g.y, g.z, g.w}, bs[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        o[e + k] = FromF<T>((ElemF<T>(raw[i], e + k) - mean) * r * gs[k] + bs[k]);
        qv |= QVec(Quantize8<kFp8>(ToF(o[e + k]) / x_scale)) << (8 * (e + k));
      }
    }
    *reinterpret_cast<int4*>(xr + idx * E) = *reinterpret_cast<const int4*>(o);
    *reinterpret_cast<QVec*>(qr + idx * E) = qv;
  }
}

bool Aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

// Launches the vector kernel when the shapes and alignments allow it; false otherwise.
template <typename T, bool kFp8>
bool LaunchLayerNormQuantWarp(T* x, int rows, int H, const float* gamma, const float* beta,
                              float eps, float x_scale, uint8_t* q, cudaStream_t s) {
  constexpr int E = 16 / sizeof(T);
  if (H % E || H > 1024 || !Aligned(x, 16) || !Aligned(gamma, 16) || !Aligned(beta, 16) ||
      !Aligned(q, E)) {
    return false;
  }
  const int per_lane = (H / E + 31) / 32;
  const unsigned grid = unsigned((int64_t(rows) * 32 + 255) / 256);
  switch (per_lane) {
#define HL_LNQ_CASE(NV)                                                                        \
  case NV:                                                                                     \
    CUDA_CHECK(LaunchKernel(LayerNormQuantWarpKernel<T, kFp8, NV>, dim3(grid), dim3(256), 0, s, \
                            x, rows, H, gamma, beta, eps, x_scale, q));                        \
    return true;
    HL_LNQ_CASE(1) HL_LNQ_CASE(2) HL_LNQ_CASE(3) HL_LNQ_CASE(4)
    HL_LNQ_CASE(5) HL_LNQ_CASE(6) HL_LNQ_CASE(7) HL_LNQ_CASE(8)
#undef HL_LNQ_CASE
    default: return false;
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
    // 16-byte vectors with the row in registers where the layout allows (variant 1 of the
    // LayerNorm family); else the scalar kernel.
    if (GetKernelVariants().layernorm == 1 &&
        (q == QuantType::kFp8E4M3
             ? LaunchLayerNormQuantWarp<T, true>(xp, rows, hidden, gamma, beta, eps, x_scale, o, s)
             : LaunchLayerNormQuantWarp<T, false>(xp, rows, hidden, gamma, beta, eps, x_scale, o,
                                                  s))) {
      return;
    }
    if (q == QuantType::kFp8E4M3)
      LayerNormQuantKernel<T, true><<<blocks, 128, 0, s>>>(xp, rows, hidden, gamma, beta, eps,
                                                            x_scale, o);
    else
      LayerNormQuantKernel<T, false><<<blocks, 128, 0, s>>>(xp, rows, hidden, gamma, beta, eps,
                                                             x_scale, o);
  });
  CUDA_CHECK_LAUNCH();
}

bool AttentionQuantSupported(DType dtype, int head_dim) {
  return AttentionHasFastPath(dtype, head_dim) && GetKernelVariants().attention >= 1;
}

void AttentionQuant(DType dtype, const void* qkv, const int32_t* cu_seqlens, int batch,
                    int max_seqlen, int heads, int head_dim, float scale, float out_scale,
                    QuantType q, void* ctx_q, cudaStream_t s, bool qkv_interleaved,
                    int out_ld) {
  // The kernel writes 4-byte words: rows and the buffer must be 4-byte aligned.
  if (out_ld != 0 && (out_ld < heads * head_dim || out_ld % 4)) {
    throw Error("AttentionQuant: out_ld must be 0 or a multiple of 4 >= heads * head_dim (" +
                std::to_string(heads * head_dim) + "), got " + std::to_string(out_ld));
  }
  if (reinterpret_cast<uintptr_t>(ctx_q) % 4) {
    throw Error("AttentionQuant: ctx_q must be 4-byte aligned");
  }
  if (batch < 0 || max_seqlen < 0 || heads < 1 || batch > 65535 || heads > 65535 ||
      !(out_scale > 0.f) || !std::isfinite(out_scale)) {
    throw Error("AttentionQuant: need batch in [0, 65535], max_seqlen >= 0, heads in [1, 65535] "
                "and a positive finite out_scale, got batch=" + std::to_string(batch) +
                " max_seqlen=" + std::to_string(max_seqlen) + " heads=" + std::to_string(heads) +
                " out_scale=" + std::to_string(out_scale));
  }
  if (!AttentionQuantSupported(dtype, head_dim)) {
    throw Error(std::string("AttentionQuant: no quantised-output kernel for ") + DTypeName(dtype) +
                " head size " + std::to_string(head_dim) +
                " with the current attention variant (needs fp16/bf16, head size 32/64/128, "
                "attention variant 1 or 2); use Attention + QuantizeActivations",
                Code::kUnimplemented);
  }
  if (batch == 0 || max_seqlen == 0) return;
  if (!qkv || !cu_seqlens || !ctx_q) throw Error("AttentionQuant: null qkv, cu_seqlens or ctx_q");
  if (!detail::LaunchAttentionMmaQuant(dtype, qkv, cu_seqlens, batch, max_seqlen, heads, head_dim,
                                       scale, out_scale, q == QuantType::kFp8E4M3, ctx_q,
                                       qkv_interleaved, out_ld, s)) {
    throw Error("AttentionQuant: the tensor-core kernel refused head size " +
                std::to_string(head_dim), Code::kInternal);
  }
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
