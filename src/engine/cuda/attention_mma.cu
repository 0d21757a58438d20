// Tensor-core attention for FP16/BF16 over packed sequences, variant 1 (KernelVariants::attention):
// flash-style with every intermediate in registers. A block takes 64 queries of one (sequence,
// head), four warps of 16 queries each (16 queries, one warp, when the grid would be smaller than
// the GPU). Per warp, Q stays in registers as mma.sync A fragments;
// for each 64-key tile (K and V staged in shared memory, zero beyond the sequence) S = Q·K^T runs
// on m16n8k16 mma.sync with FP32 accumulators, the online softmax (running max and sum per row,
// base-2 exponentials of pre-scaled scores) works on those accumulators directly, and they become
// the A fragments of O += P·V (the C layout of two adjacent n8 tiles is the A layout of one k16
// step), with V read through ldmatrix.trans. Keys past the sequence's end score -inf; query rows
// past it compute on zeros and are not written.
//
// Fragment layouts (PTX ISA, mma.m16n8k16, g = lane / 4, t = lane % 4):
//   A (16x16, row): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 8+2t..), a3 = (g+8, 8+2t..)
//   B (16x8, col):  b0 = (k 2t..2t+1, n g), b1 = (k 8+2t.., n g)
//   C (16x8):       c0, c1 = (g, 2t), (g, 2t+1); c2, c3 = (g+8, 2t), (g+8, 2t+1)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "engine/cuda/attention_internal.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device_util.cuh"

namespace hotline::engine::cuda::detail {
namespace {

constexpr int kKT = 64;  // keys per tile
// W warps of 16 queries per block: 4 (64 queries) normally; 1 when the grid would have too few
// blocks to spread over the GPU (batch 1: 12 blocks of 64 queries become 48 of 16).

template <typename T>
__device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats as a packed pair of T (first in the low half).
template <typename T>
__device__ __forceinline__ uint32_t Pack(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* smem_ptr) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_ptr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// The quantised-output flavour (kQ = 1: E4M3, 2: INT8) rounds each output to T first, then
// quantises that value exactly as QuantizeActivations does (IEEE division by out_scale,
// nearest-even; E4M3 saturating, INT8 clamped to +-127), so the bytes equal Attention followed
// by a quantise pass.
template <int kQ>
__device__ __forceinline__ uint32_t QuantPair(float lo, float hi, float out_scale) {
  if constexpr (kQ == 1) {
    const uint32_t a = __nv_cvt_float_to_fp8(lo / out_scale, __NV_SATFINITE, __NV_E4M3);
    const uint32_t b = __nv_cvt_float_to_fp8(hi / out_scale, __NV_SATFINITE, __NV_E4M3);
    return a | (b << 8);
  } else {
    const uint32_t a = uint8_t(int8_t(max(-127, min(127, __float2int_rn(lo / out_scale)))));
    const uint32_t b = uint8_t(int8_t(max(-127, min(127, __float2int_rn(hi / out_scale)))));
    return a | (b << 8);
  }
}

template <typename T>
__device__ __forceinline__ float2 Unpack(uint32_t v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half22float2(*reinterpret_cast<__half2*>(&v));
  } else {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&v));
  }
}

// Four 64-query blocks per SM at D <= 64 (128 registers a thread): the FP16-output kernel
// needed 134-135 and ran three.
template <typename T, int D, int W, int kQ = 0>
__global__ void __launch_bounds__(W * 32, (W == 4 && D <= 64) ? 4 : 1)
    AttentionMmaKernel(const T* __restrict__ qkv, const int32_t* __restrict__ cu, int heads,
                       float scale_log2, T* __restrict__ ctx, float out_scale,
                       uint8_t* __restrict__ ctx_q, bool interleaved, int ldo) {
  constexpr int ldh = D + 8;  // smem row stride (elements): 16-byte rows, conflict-free reads
  constexpr int kVec = D / 8;  // 16-byte vectors per row
  constexpr int KC = D / 16;   // k16 steps over the head dimension (S) / n8 pairs (O)
  constexpr int NT = kKT / 8;  // n8 key tiles per key tile
  __shared__ __align__(16) T sK[kKT * ldh];
  __shared__ __align__(16) T sV[kKT * ldh];

  PdlWaitThenTrigger();
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * (16 * W);
  const int start = cu[b], len = cu[b + 1] - start;
  if (q0 >= len) return;  // uniform for the block: before any barrier
  const int hidden = heads * D;
  const int64_t ld = 3 * int64_t(hidden);
  // Quantised output only (kQ != 0): `interleaved` reads QKV rows laid out per head as
  // [Q_h | K_h | V_h] (3D columns per head) instead of Q | K | V; ctx_q rows are ldo bytes apart.
  // kQ == 0 folds il to false: the FP16/BF16 kernel's addressing is unchanged.
  const bool il = kQ != 0 && interleaved;
  const int qoff = il ? h * 3 * D : h * D;
  const int koff = il ? h * 3 * D + D : hidden + h * D;
  const int vfromk = il ? D : hidden;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int qa = q0 + warp * 16 + g, qb = qa + 8;  // this thread's two query rows

  // Q as A fragments, straight from global memory (zero past the sequence).
  uint32_t qf[KC][4];
  {
    const T* ra = qkv + (start + qa) * ld + qoff;
    const T* rb = qkv + (start + qb) * ld + qoff;
#pragma unroll
    for (int kc = 0; kc < KC; ++kc) {
      const int c = kc * 16 + 2 * t;
      qf[kc][0] = qa < len ? *reinterpret_cast<const uint32_t*>(ra + c) : 0u;
      qf[kc][1] = qb < len ? *reinterpret_cast<const uint32_t*>(rb + c) : 0u;
      qf[kc][2] = qa < len ? *reinterpret_cast<const uint32_t*>(ra + c + 8) : 0u;
      qf[kc][3] = qb < len ? *reinterpret_cast<const uint32_t*>(rb + c + 8) : 0u;
    }
  }
  float o[2 * KC][4];
#pragma unroll
  for (int i = 0; i < 2 * KC; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float ma = -INFINITY, mb = -INFINITY;  // running max (scaled, base 2) of rows qa, qb
  float la = 0.f, lb = 0.f;              // this thread's share of the running sums

  // K and V tiles are staged with cp.async: every 16-byte copy of the tile is issued before
  // the block waits once (the Q loads above are in flight meanwhile). Plain loads into registers
  // then stores made each loop step wait for its own global round trip (4 in a row at D = 64).
  // Rows past the sequence are zero-filled (source size 0; the address stays a valid row).
  constexpr int kSteps = kKT * kVec / (W * 32);
  static_assert(kKT * kVec % (W * 32) == 0, "the tile's 16-byte vectors split evenly over the block");
  for (int k0 = 0; k0 < len; k0 += kKT) {
    __syncthreads();  // previous tile fully consumed
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
      const int i = tid + j * W * 32;
      const int r = i / kVec, c = (i % kVec) * 8;
      const bool in = k0 + r < len;
      const T* base = qkv + (start + (in ? k0 + r : 0)) * ld + koff + c;
      const uint32_t n = in ? 16u : 0u;
      const uint32_t dk = static_cast<uint32_t>(__cvta_generic_to_shared(sK + r * ldh + c));
      const uint32_t dv = static_cast<uint32_t>(__cvta_generic_to_shared(sV + r * ldh + c));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dk), "l"(base),
                   "r"(n));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dv),
                   "l"(base + vfromk), "r"(n));
    }
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads();

    // S = Q K^T for 64 keys: NT accumulators of 16 x 8.
    float s[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
      const T* krow = sK + (nt * 8 + g) * ldh + 2 * t;
#pragma unroll
      for (int kc = 0; kc < KC; ++kc) {
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(krow + kc * 16);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(krow + kc * 16 + 8);
        Mma<T>(s[nt], qf[kc], b0, b1);
      }
    }
    // Scale into base 2, mask keys past the end, tile row maxima over the quad.
    float ta = -INFINITY, tb = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const bool valid = k0 + nt * 8 + 2 * t + e < len;
        s[nt][e] = valid ? s[nt][e] * scale_log2 : -INFINITY;
        s[nt][2 + e] = valid ? s[nt][2 + e] * scale_log2 : -INFINITY;
        ta = fmaxf(ta, s[nt][e]);
        tb = fmaxf(tb, s[nt][2 + e]);
      }
    }
    ta = fmaxf(ta, __shfl_xor_sync(0xffffffffu, ta, 1));
    ta = fmaxf(ta, __shfl_xor_sync(0xffffffffu, ta, 2));
    tb = fmaxf(tb, __shfl_xor_sync(0xffffffffu, tb, 1));
    tb = fmaxf(tb, __shfl_xor_sync(0xffffffffu, tb, 2));
    // Every tile holds at least one key of the sequence (k0 < len), so the new maxima are finite.
    const float na = fmaxf(ma, ta), nb = fmaxf(mb, tb);
    const float ca = exp2f(ma - na), cb = exp2f(mb - nb);  // 0 on the first tile
    ma = na;
    mb = nb;
    la *= ca;
    lb *= cb;
#pragma unroll
    for (int i = 0; i < 2 * KC; ++i) {
      o[i][0] *= ca;
      o[i][1] *= ca;
      o[i][2] *= cb;
      o[i][3] *= cb;
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      s[nt][0] = exp2f(s[nt][0] - na);
      s[nt][1] = exp2f(s[nt][1] - na);
      s[nt][2] = exp2f(s[nt][2] - nb);
      s[nt][3] = exp2f(s[nt][3] - nb);
      la += s[nt][0] + s[nt][1];
      lb += s[nt][2] + s[nt][3];
    }
    // O += P V: P's k16 step j is key tiles 2j and 2j+1; V as B through ldmatrix.trans.
#pragma unroll
    for (int j = 0; j < kKT / 16; ++j) {
      uint32_t pa[4];
      pa[0] = Pack<T>(s[2 * j][0], s[2 * j][1]);
      pa[1] = Pack<T>(s[2 * j][2], s[2 * j][3]);
      pa[2] = Pack<T>(s[2 * j + 1][0], s[2 * j + 1][1]);
      pa[3] = Pack<T>(s[2 * j + 1][2], s[2 * j + 1][3]);
      const int key = j * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
      for (int dp = 0; dp < KC; ++dp) {
        uint32_t vb[4];
        LdMatrixX4Trans(vb, sV + key * ldh + dp * 16 + (lane >> 4) * 8);
        Mma<T>(o[2 * dp], pa, vb[0], vb[1]);
        Mma<T>(o[2 * dp + 1], pa, vb[2], vb[3]);
      }
    }
  }

  la += __shfl_xor_sync(0xffffffffu, la, 1);
  la += __shfl_xor_sync(0xffffffffu, la, 2);
  lb += __shfl_xor_sync(0xffffffffu, lb, 1);
  lb += __shfl_xor_sync(0xffffffffu, lb, 2);
  const float ia = 1.f / la, ib = 1.f / lb;
  if constexpr (kQ != 0) {
    uint8_t* qa8 = ctx_q + int64_t(start + qa) * ldo + h * D + 2 * t;
    uint8_t* qb8 = ctx_q + int64_t(start + qb) * ldo + h * D + 2 * t;
#pragma unroll
    for (int i = 0; i < 2 * KC; ++i) {
      if (qa < len) {
        const float2 v = Unpack<T>(Pack<T>(o[i][0] * ia, o[i][1] * ia));
        *reinterpret_cast<uint16_t*>(qa8 + i * 8) = uint16_t(QuantPair<kQ>(v.x, v.y, out_scale));
      }
      if (qb < len) {
        const float2 v = Unpack<T>(Pack<T>(o[i][2] * ib, o[i][3] * ib));
        *reinterpret_cast<uint16_t*>(qb8 + i * 8) = uint16_t(QuantPair<kQ>(v.x, v.y, out_scale));
      }
    }
    return;
  }
  T* oa = ctx + int64_t(start + qa) * hidden + h * D + 2 * t;
  T* ob = ctx + int64_t(start + qb) * hidden + h * D + 2 * t;
#pragma unroll
  for (int i = 0; i < 2 * KC; ++i) {
    if (qa < len) *reinterpret_cast<uint32_t*>(oa + i * 8) = Pack<T>(o[i][0] * ia, o[i][1] * ia);
    if (qb < len) *reinterpret_cast<uint32_t*>(ob + i * 8) = Pack<T>(o[i][2] * ib, o[i][3] * ib);
  }
}

int SmCount() {
  int dev = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

template <typename T, int D, int kQ>
void Launch(const void* qkv, const int32_t* cu, int batch, int max_seqlen, int heads, float scale,
            void* ctx, float out_scale, void* ctx_q, bool interleaved, int ldo,
            cudaStream_t s) {
  const float sl2 = scale * 1.4426950408889634f;
  const int64_t blocks64 = int64_t((max_seqlen + 63) / 64) * heads * batch;
  T* c = static_cast<T*>(ctx);
  uint8_t* cq = static_cast<uint8_t*>(ctx_q);
  if (blocks64 < SmCount()) {
    const dim3 grid((max_seqlen + 15) / 16, heads, batch);
    CUDA_CHECK(LaunchKernel(AttentionMmaKernel<T, D, 1, kQ>, grid, dim3(32), 0, s,
                            static_cast<const T*>(qkv), cu, heads, sl2, c, out_scale, cq,
                            interleaved, ldo));
  } else {
    const dim3 grid((max_seqlen + 63) / 64, heads, batch);
    CUDA_CHECK(LaunchKernel(AttentionMmaKernel<T, D, 4, kQ>, grid, dim3(128), 0, s,
                            static_cast<const T*>(qkv), cu, heads, sl2, c, out_scale, cq,
                            interleaved, ldo));
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

bool LaunchAttentionMma(DType dtype, const void* qkv, const int32_t* cu, int batch,
                        int max_seqlen, int heads, int head_dim, float scale, void* ctx,
                        cudaStream_t s) {
  return DispatchHalfHeadDim(dtype, head_dim, [&](auto tag, auto dim) {
    Launch<decltype(tag), decltype(dim)::value, 0>(qkv, cu, batch, max_seqlen, heads, scale, ctx,
                                                   1.f, nullptr, false, 0, s);
  });
}

bool LaunchAttentionMmaQuant(DType dtype, const void* qkv, const int32_t* cu, int batch,
                             int max_seqlen, int heads, int head_dim, float scale,
                             float out_scale, bool fp8, void* ctx_q, bool interleaved,
                             int out_ld, cudaStream_t s) {
  const int ldo = out_ld > 0 ? out_ld : heads * head_dim;
  return DispatchHalfHeadDim(dtype, head_dim, [&](auto tag, auto dim) {
    using T = decltype(tag);
    constexpr int kD = decltype(dim)::value;
    if (fp8)
      Launch<T, kD, 1>(qkv, cu, batch, max_seqlen, heads, scale, nullptr, out_scale, ctx_q,
                       interleaved, ldo, s);
    else
      Launch<T, kD, 2>(qkv, cu, batch, max_seqlen, heads, scale, nullptr, out_scale, ctx_q,
                       interleaved, ldo, s);
  });
}

}  // namespace hotline::engine::cuda::detail
