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
#include <map>
#include <mutex>
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
// quantises that value exactly as QuantizeActivations does (x / out_scale correctly rounded,
// nearest-even; E4M3 saturating, INT8 clamped to +-127), so the bytes equal Attention followed
// by a quantise pass. The quotient by Markstein's iteration: with inv = RN(1 / s), a step
// q' = RN(q + RN(x - q * s) * inv) (the remainder exact in one FMA) returns RN(x / s) whenever q
// is within an ulp of x / s; q0 = RN(x * inv) may be up to about 1.5 ulp off, so two steps (the
// first brings it within an ulp). No overflow or underflow here (|x| is an FP16/BF16 attention
// output, s a calibrated scale). Five instructions where `x / s` compiles to a division routine
// with range checks, 32 of them per thread, which cost the kernel 3.4 of its 19.7 us at
// 128 x 64. (x * inv alone changes a rare byte by one step, and FP8's rounding cascade turned that
// into 3% logit differences between the fused and unfused encoders.)
__device__ __forceinline__ float DivRn(float x, float s, float inv) {
  float q = x * inv;
  q = fmaf(fmaf(-q, s, x), inv, q);
  q = fmaf(fmaf(-q, s, x), inv, q);
  return copysignf(q, x);  // -0 / s is -0 (the steps would return +0: E4M3 0x00, not 0x80)
}

template <int kQ>
__device__ __forceinline__ uint32_t QuantPair(float lo, float hi, float s, float inv) {
  if constexpr (kQ == 1) {
    const uint32_t a = __nv_cvt_float_to_fp8(DivRn(lo, s, inv), __NV_SATFINITE, __NV_E4M3);
    const uint32_t b = __nv_cvt_float_to_fp8(DivRn(hi, s, inv), __NV_SATFINITE, __NV_E4M3);
    return a | (b << 8);
  } else {
    const uint32_t a = uint8_t(int8_t(max(-127, min(127, __float2int_rn(DivRn(lo, s, inv))))));
    const uint32_t b = uint8_t(int8_t(max(-127, min(127, __float2int_rn(DivRn(hi, s, inv))))));
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

// One warp's 16 query rows (qa = its row g, qb = g + 8) against one 64-key tile staged in
// shared memory (sK, sV: rows ldh elements apart, keys past the sequence zero): S = Q K^T on
// mma.sync, the online softmax on its accumulators (running maxima ma, mb and this lane's share
// of the running sums la, lb), O += P V with V read through ldmatrix.trans.
template <typename T, int D>
__device__ __forceinline__ void TileStep(const uint32_t (&qf)[D / 16][4], const T* sK,
                                         const T* sV, int k0, int len, float scale_log2,
                                         float (&o)[D / 8][4], float& ma, float& mb, float& la,
                                         float& lb) {
  constexpr int ldh = D + 8, KC = D / 16, NT = kKT / 8;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
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

// Normalises a warp's O by the softmax sums and writes rows qa, qb (those below len) of head h:
// in T into ctx [tokens, heads * D], or quantised (kQ) into ctx_q (rows ldo bytes apart).
template <typename T, int D, int kQ>
__device__ __forceinline__ void WriteOut(float (&o)[D / 8][4], float la, float lb, int qa, int qb,
                                         int len, int start, int h, int hidden, T* ctx,
                                         float out_scale, uint8_t* ctx_q, int ldo) {
  constexpr int KC = D / 16;
  const int t = threadIdx.x & 3;
  la += __shfl_xor_sync(0xffffffffu, la, 1);
  la += __shfl_xor_sync(0xffffffffu, la, 2);
  lb += __shfl_xor_sync(0xffffffffu, lb, 1);
  lb += __shfl_xor_sync(0xffffffffu, lb, 2);
  const float ia = 1.f / la, ib = 1.f / lb;
  if constexpr (kQ != 0) {
    // Each lane holds 2 bytes of every 8-byte column group i of its rows; lanes t and t ^ 1
    // trade halves so that each writes 4 bytes: the even lane group i's [2t, 2t + 4), the odd
    // lane group i + 1's [2t - 2, 2t + 2). Both lanes of a pair share their rows (same g).
    const float inv = __frcp_rn(out_scale);  // RN(1 / out_scale)
    const bool odd = t & 1;
    const int col = odd ? 8 + 2 * (t - 1) : 2 * t;  // within the pair of groups (i, i + 1)
    uint8_t* qa8 = ctx_q + int64_t(start + qa) * ldo + h * D + col;
    uint8_t* qb8 = ctx_q + int64_t(start + qb) * ldo + h * D + col;
#pragma unroll
    for (int i = 0; i < 2 * KC; i += 2) {
      uint32_t wa[2], wb[2];
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const float2 va = Unpack<T>(Pack<T>(o[i + k][0] * ia, o[i + k][1] * ia));
        const float2 vb = Unpack<T>(Pack<T>(o[i + k][2] * ib, o[i + k][3] * ib));
        wa[k] = QuantPair<kQ>(va.x, va.y, out_scale, inv);
        wb[k] = QuantPair<kQ>(vb.x, vb.y, out_scale, inv);
      }
      const uint32_t ga = __shfl_xor_sync(0xffffffffu, odd ? wa[0] : wa[1], 1);
      const uint32_t gb = __shfl_xor_sync(0xffffffffu, odd ? wb[0] : wb[1], 1);
      const uint32_t outa = odd ? (ga | (wa[1] << 16)) : (wa[0] | (ga << 16));
      const uint32_t outb = odd ? (gb | (wb[1] << 16)) : (wb[0] | (gb << 16));
      if (qa < len) *reinterpret_cast<uint32_t*>(qa8 + i * 8) = outa;
      if (qb < len) *reinterpret_cast<uint32_t*>(qb8 + i * 8) = outb;
    }
  } else {
    T* oa = ctx + int64_t(start + qa) * hidden + h * D + 2 * t;
    T* ob = ctx + int64_t(start + qb) * hidden + h * D + 2 * t;
#pragma unroll
    for (int i = 0; i < 2 * KC; ++i) {
      if (qa < len) *reinterpret_cast<uint32_t*>(oa + i * 8) = Pack<T>(o[i][0] * ia, o[i][1] * ia);
      if (qb < len) *reinterpret_cast<uint32_t*>(ob + i * 8) = Pack<T>(o[i][2] * ib, o[i][3] * ib);
    }
  }
}

// 16 bytes global -> shared, zero-filled when n = 0 (the source address must still be valid).
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, uint32_t n) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(n));
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
  // One warp (W = 1) has 16-32 copy steps: unrolled whole, their addresses spilled (255
  // registers and a stack frame at D = 128); 4 at a time keeps them in registers.
  constexpr int kUnroll = W == 1 ? 4 : kSteps;
  for (int k0 = 0; k0 < len; k0 += kKT) {
    __syncthreads();  // previous tile fully consumed
#pragma unroll kUnroll
    for (int j = 0; j < kSteps; ++j) {
      const int i = tid + j * W * 32;
      const int r = i / kVec, c = (i % kVec) * 8;
      const bool in = k0 + r < len;
      const T* base = qkv + (start + (in ? k0 + r : 0)) * ld + koff + c;
      const uint32_t n = in ? 16u : 0u;
      CpAsync16(sK + r * ldh + c, base, n);
      CpAsync16(sV + r * ldh + c, base + vfromk, n);
    }
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads();
    TileStep<T, D>(qf, sK, sV, k0, len, scale_log2, o, ma, mb, la, lb);
  }
  WriteOut<T, D, kQ>(o, la, lb, qa, qb, len, start, h, hidden, ctx, out_scale, ctx_q, ldo);
}

// Sequences of at most 64 tokens (one key tile), many of them: a block of 4 warps takes the 64
// queries of `hpb` heads of one sequence, one head after another, with Q, K and V of the next
// head copied (cp.async) into the other half of a double buffer while this head computes. A
// block then waits for device memory once, not once per head: the one-head kernel above spends
// most of its time in that wait (4 blocks of 4 warps per SM cannot hide it).
// Shared memory: 2 stages x (Q, K, V) x 64 rows x ldh (55,296 bytes at D = 64: 4 blocks per SM).
template <typename T, int D, int kQ>
__global__ void __launch_bounds__(128, D <= 64 ? 4 : 1)
    AttentionShortKernel(const T* __restrict__ qkv, const int32_t* __restrict__ cu, int heads,
                         int hpb, float scale_log2, T* __restrict__ ctx, float out_scale,
                         uint8_t* __restrict__ ctx_q, bool interleaved, int ldo) {
  constexpr int ldh = D + 8, kVec = D / 8, KC = D / 16, kTile = kKT * ldh;
  constexpr int kSteps = kKT * kVec / 128;
  static_assert(kKT * kVec % 128 == 0, "the tile's 16-byte vectors split evenly over the block");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sm = reinterpret_cast<T*>(smem_raw);  // [stage][Q, K, V][64][ldh]

  PdlWaitThenTrigger();
  const int b = blockIdx.y, h0 = blockIdx.x * hpb;
  const int start = cu[b], len = cu[b + 1] - start;
  if (len <= 0) return;  // uniform for the block: before any barrier
  const int hidden = heads * D;
  const int64_t ld = 3 * int64_t(hidden);
  const bool il = kQ != 0 && interleaved;  // as in AttentionMmaKernel
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int qa = warp * 16 + g, qb = qa + 8;

  auto issue = [&](int h, int stage) {  // head h's Q, K, V tiles into `stage`, one group
    const int qoff = il ? h * 3 * D : h * D;
    const int koff = il ? h * 3 * D + D : hidden + h * D;
    const int voff = il ? h * 3 * D + 2 * D : 2 * hidden + h * D;
    T* st = sm + stage * 3 * kTile;
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
      const int i = tid + j * 128;
      const int r = i / kVec, c = (i % kVec) * 8;
      const bool in = r < len;
      const T* row = qkv + (start + (in ? r : 0)) * ld + c;
      const uint32_t n = in ? 16u : 0u;
      CpAsync16(st + r * ldh + c, row + qoff, n);
      CpAsync16(st + kTile + r * ldh + c, row + koff, n);
      CpAsync16(st + 2 * kTile + r * ldh + c, row + voff, n);
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };
  issue(h0, 0);
  for (int j = 0; j < hpb; ++j) {
    const int h = h0 + j, stage = j & 1;
    if (j + 1 < hpb) {
      issue(h + 1, stage ^ 1);  // its stage was last read before the previous barrier below
      asm volatile("cp.async.wait_group 1;\n" ::);
    } else {
      asm volatile("cp.async.wait_group 0;\n" ::);
    }
    __syncthreads();
    const T* sQ = sm + stage * 3 * kTile;
    // Q as A fragments from shared memory (rows past the sequence are zero).
    uint32_t qf[KC][4];
#pragma unroll
    for (int kc = 0; kc < KC; ++kc) {
      const T* ra = sQ + qa * ldh + kc * 16 + 2 * t;
      const T* rb = sQ + qb * ldh + kc * 16 + 2 * t;
      qf[kc][0] = *reinterpret_cast<const uint32_t*>(ra);
      qf[kc][1] = *reinterpret_cast<const uint32_t*>(rb);
      qf[kc][2] = *reinterpret_cast<const uint32_t*>(ra + 8);
      qf[kc][3] = *reinterpret_cast<const uint32_t*>(rb + 8);
    }
    float o[2 * KC][4];
#pragma unroll
    for (int i = 0; i < 2 * KC; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float ma = -INFINITY, mb = -INFINITY, la = 0.f, lb = 0.f;
    TileStep<T, D>(qf, sQ + kTile, sQ + 2 * kTile, 0, len, scale_log2, o, ma, mb, la, lb);
    WriteOut<T, D, kQ>(o, la, lb, qa, qb, len, start, h, hidden, ctx, out_scale, ctx_q, ldo);
    __syncthreads();  // every warp is done with `stage` before it is refilled
  }
}

int SmCount() {
  int dev = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

// Heads per block of the short-sequence kernel: the fewest that fit the grid in one wave of
// `slots` resident blocks (so each block overlaps as many heads' loads as the grid leaves room
// for), dividing `heads`; all heads when even that does not fit.
int HeadsPerBlock(int batch, int heads, int slots) {
  for (int d = 1; d <= heads; ++d) {
    if (heads % d == 0 && int64_t(batch) * (heads / d) <= slots) return d;
  }
  return heads;
}

// Resident blocks per SM of the short kernel on the current device, 0 where its shared memory
// does not fit (e.g. D = 128 needs 104,448 bytes: more than sm_86 / sm_89 allow a block).
template <typename T, int D>
int ShortKernelBlocksPerSm(int smem) {
  static std::mutex mu;
  static std::map<int, int> by_device;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  auto it = by_device.find(dev);
  if (it != by_device.end()) return it->second;
  int optin = 0, n = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (smem <= optin) {
    AllowDynamicSmem(reinterpret_cast<const void*>(&AttentionShortKernel<T, D, 0>), smem);
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &n, AttentionShortKernel<T, D, 0>, 128, size_t(smem)));
  }
  by_device[dev] = n;
  return n;
}

template <typename T, int D, int kQ>
void Launch(const void* qkv, const int32_t* cu, int batch, int max_seqlen, int heads, float scale,
            void* ctx, float out_scale, void* ctx_q, bool interleaved, int ldo,
            cudaStream_t s) {
  const float sl2 = scale * 1.4426950408889634f;
  const int64_t blocks64 = int64_t((max_seqlen + 63) / 64) * heads * batch;
  T* c = static_cast<T*>(ctx);
  uint8_t* cq = static_cast<uint8_t*>(ctx_q);
  const int sms = SmCount();
  if (blocks64 < sms) {
    const dim3 grid((max_seqlen + 15) / 16, heads, batch);
    CUDA_CHECK(LaunchKernel(AttentionMmaKernel<T, D, 1, kQ>, grid, dim3(32), 0, s,
                            static_cast<const T*>(qkv), cu, heads, sl2, c, out_scale, cq,
                            interleaved, ldo));
    CUDA_CHECK_LAUNCH();
    return;
  }
  if constexpr (kQ == 0) {
    // FP16/BF16 output only: with the 8-bit output (a third of the bytes written) the one-head
    // kernel ran faster (H200, BERT-base 128 x 64: 16.3 against 17.5 us; FP16 output: 23.5
    // against 20.8). Where the short kernel's shared memory does not fit, the one-head kernel.
    constexpr int kSmem = 2 * 3 * kKT * (D + 8) * int(sizeof(T));
    int per_sm = 0;
    if (max_seqlen <= kKT && GetKernelVariants().attention == 2 &&
        (per_sm = ShortKernelBlocksPerSm<T, D>(kSmem)) > 0) {
      const int hpb = HeadsPerBlock(batch, heads, per_sm * sms);
      const dim3 grid(heads / hpb, batch);
      CUDA_CHECK(LaunchKernel(AttentionShortKernel<T, D, kQ>, grid, dim3(128), kSmem, s,
                              static_cast<const T*>(qkv), cu, heads, hpb, sl2, c, out_scale, cq,
                              interleaved, ldo));
      CUDA_CHECK_LAUNCH();
      return;
    }
  }
  const dim3 grid((max_seqlen + 63) / 64, heads, batch);
  CUDA_CHECK(LaunchKernel(AttentionMmaKernel<T, D, 4, kQ>, grid, dim3(128), 0, s,
                          static_cast<const T*>(qkv), cu, heads, sl2, c, out_scale, cq,
                          interleaved, ldo));
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
