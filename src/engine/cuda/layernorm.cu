// LayerNorm (with optional bias and residual) and the embedding sum + LayerNorm.
// Variant 0: one block per row: the row is summed into shared memory in FP32
// once, then mean and the two-pass variance are reduced from there.
// Variant 1 (KernelVariants::layernorm, hidden <= 1024 in 16-byte vectors): one warp per row, the
// row held in registers (at most 8 vectors per lane), warp-shuffle reductions, no shared memory
// and no block barriers: one read and one write of the row at full vector width.
// The embedding sum + LayerNorm follows the same switch (EmbedKernel / EmbedWarpKernel).
// Both read the whole row before writing any of it, so y may alias x or residual.
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "base/error.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device_util.cuh"
#include "engine/cuda/quant_gemm.h"

namespace hotline::engine::cuda {
namespace {

constexpr int kThreads = 256;

// Normalises row[] (FP32, shared) into y; `red` is the reduction scratch.
template <typename T>
__device__ void NormaliseRow(const float* row, const float* gamma, const float* beta, float eps,
                             int hidden, T* y, float* red) {
  float s = 0.f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) s += row[i];
  const float mean = BlockSum(s, red) / hidden;
  float v = 0.f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    const float d = row[i] - mean;
    v += d * d;
  }
  const float rstd = rsqrtf(BlockSum(v, red) / hidden + eps);
  for (int i = threadIdx.x; i < hidden; i += blockDim.x)
    y[i] = FromF<T>((row[i] - mean) * rstd * gamma[i] + beta[i]);
}

template <typename T>
__global__ void LayerNormKernel(const T* x, const T* bias, const T* residual, const float* gamma,
                                const float* beta, float eps, int hidden, T* y) {
  extern __shared__ float row[];
  __shared__ float red[32];
  const int64_t off = int64_t(blockIdx.x) * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    float v = ToF(x[off + i]);
    if (bias) v += ToF(bias[i]);
    if (residual) v += ToF(residual[off + i]);
    row[i] = v;
  }
  __syncthreads();
  NormaliseRow(row, gamma, beta, eps, hidden, y + off, red);
}

// The three embedding rows of token t of a packed batch: word (clamped id), position (t's offset in
// its sequence, found by binary search over cu[0..batch]: the last b with cu[b] <= t; 0 for rows
// past the last sequence) and token type (0 without type ids).
struct EmbedRows {
  int64_t word, pos, type;  // row indices
};
__device__ __forceinline__ EmbedRows FindEmbedRows(const int32_t* ids, const int32_t* type_ids,
                                                   const int32_t* cu, int batch, int vocab,
                                                   int max_pos, int type_vocab, int t) {
  int lo = 0, hi = batch;  // invariant: cu[lo] <= t (or lo == 0), answer in [lo, hi)
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (cu[mid] <= t) lo = mid; else hi = mid;
  }
  int p = t < cu[batch] ? t - cu[lo] : 0;
  p = min(max(p, 0), max_pos - 1);
  return {min(max(ids[t], 0), vocab - 1), p,
          type_ids ? min(max(type_ids[t], 0), type_vocab - 1) : 0};
}

// One word-table value in FP32: the table's own type, or an INT8 table (EmbeddingLayerNormInt8Word)
// dequantised with its row's scale.
template <typename T>
__device__ __forceinline__ float WordValue(T v, float) { return ToF(v); }
__device__ __forceinline__ float WordValue(int8_t v, float row_scale) {
  return row_scale * float(v);
}

// WT: the word table's element type, T or int8_t (then word_scale holds one FP32 scale per row).
template <typename T, typename WT = T>
__global__ void EmbedKernel(const int32_t* ids, const int32_t* type_ids, const int32_t* cu,
                            int batch, const WT* word, int vocab, const T* pos, int max_pos,
                            const T* type, int type_vocab, const float* gamma, const float* beta,
                            float eps, int hidden, T* y, const float* word_scale = nullptr) {
  extern __shared__ float row[];
  __shared__ float red[32];
  const int t = blockIdx.x;
  const EmbedRows r = FindEmbedRows(ids, type_ids, cu, batch, vocab, max_pos, type_vocab, t);
  const WT* w = word + r.word * hidden;
  const T* pe = pos + r.pos * hidden;
  const T* te = type + r.type * hidden;
  const float ws = word_scale ? word_scale[r.word] : 1.f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x)
    row[i] = WordValue(w[i], ws) + ToF(pe[i]) + ToF(te[i]);
  __syncthreads();
  NormaliseRow(row, gamma, beta, eps, hidden, y + int64_t(t) * hidden, red);
}

// Variant 1's second half: mean, two-pass variance from the registers, scale, shift and one
// 16-byte store per vector. `s` is this lane's sum of its elements.
// kQ (0 none, 1 INT8, 2 E4M3): also yq[i] = Quantize8(y_stored[i] / x_scale), one E-byte store per
// vector: the bytes a quantise pass over the stored row would write.
template <typename T, int NV, int kQ = 0>
__device__ __forceinline__ void WarpNormaliseStore(float (&v)[NV][16 / sizeof(T)], float s,
                                                   const float* gamma, const float* beta,
                                                   float eps, int hidden, int lane, T* y,
                                                   uint8_t* yq = nullptr, float x_scale = 1.f) {
  constexpr int E = 16 / sizeof(T);
  using QVec = std::conditional_t<E == 8, uint64_t, uint32_t>;  // E bytes (E is 4 or 8)
  const int nvec = hidden / E;
  const float mean = WarpSum(s) / hidden;
  float q = 0.f;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    if (lane + 32 * i < nvec) {
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const float d = v[i][e] - mean;
        q += d * d;
      }
    }
  }
  const float rstd = rsqrtf(WarpSum(q) / hidden + eps);
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int idx = lane + 32 * i;
    if (idx >= nvec) continue;
    alignas(16) float g[E], b[E];
#pragma unroll
    for (int e = 0; e < E; e += 4) {
      *reinterpret_cast<float4*>(g + e) = *reinterpret_cast<const float4*>(gamma + idx * E + e);
      *reinterpret_cast<float4*>(b + e) = *reinterpret_cast<const float4*>(beta + idx * E + e);
    }
    alignas(16) T o[E];
#pragma unroll
    for (int e = 0; e < E; ++e) o[e] = FromF<T>((v[i][e] - mean) * rstd * g[e] + b[e]);
    *reinterpret_cast<int4*>(y + idx * E) = *reinterpret_cast<const int4*>(o);
    if constexpr (kQ != 0) {
      QVec qv = 0;
#pragma unroll
      for (int e = 0; e < E; ++e) qv |= QVec(Quantize8<kQ == 2>(ToF(o[e]) / x_scale)) << (8 * e);
      *reinterpret_cast<QVec*>(yq + idx * E) = qv;
    }
  }
}

// The embedding sum + LayerNorm as variant 1: one warp per token row.
// WT = int8_t: the word row is E int8 values per vector (an E-byte load), times its row's scale
// (word_scale), added first as the table's value would be.
// kQ: also the row quantised (WarpNormaliseStore), into xq [rows, hidden] bytes.
template <typename T, int NV, typename WT = T, int kQ = 0>
__global__ void __launch_bounds__(256)
    EmbedWarpKernel(const int32_t* ids, const int32_t* type_ids, const int32_t* cu, int batch,
                    const WT* word, int vocab, const T* pos, int max_pos, const T* type,
                    int type_vocab, const float* gamma, const float* beta, float eps, int rows,
                    int hidden, T* y, const float* word_scale, uint8_t* xq, float x_scale) {
  constexpr int E = 16 / sizeof(T);
  constexpr bool kQ8 = std::is_same_v<WT, int8_t>;
  PdlWaitThenTrigger();
  const int t = int((blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5);
  const int lane = threadIdx.x & 31;
  if (t >= rows) return;
  const EmbedRows r = FindEmbedRows(ids, type_ids, cu, batch, vocab, max_pos, type_vocab, t);
  const T* rows3[3] = {kQ8 ? nullptr : reinterpret_cast<const T*>(word + r.word * hidden),
                       pos + r.pos * hidden, type + r.type * hidden};
  const int8_t* wq = kQ8 ? reinterpret_cast<const int8_t*>(word + r.word * hidden) : nullptr;
  const float ws = kQ8 ? word_scale[r.word] : 1.f;
  const int nvec = hidden / E;
  float v[NV][E];
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int idx = lane + 32 * i;
#pragma unroll
    for (int e = 0; e < E; ++e) v[i][e] = 0.f;
    if (idx < nvec) {
      if constexpr (kQ8) {
        using QVec = std::conditional_t<E == 8, uint2, uint32_t>;  // E bytes
        alignas(8) int8_t a[E];
        *reinterpret_cast<QVec*>(a) = *reinterpret_cast<const QVec*>(wq + idx * E);
#pragma unroll
        for (int e = 0; e < E; ++e) v[i][e] += ws * float(a[e]);
      }
#pragma unroll
      for (int r = kQ8 ? 1 : 0; r < 3; ++r) {
        alignas(16) T a[E];
        *reinterpret_cast<int4*>(a) = *reinterpret_cast<const int4*>(rows3[r] + idx * E);
#pragma unroll
        for (int e = 0; e < E; ++e) v[i][e] += ToF(a[e]);
      }
#pragma unroll
      for (int e = 0; e < E; ++e) s += v[i][e];
    }
  }
  WarpNormaliseStore<T, NV, kQ>(v, s, gamma, beta, eps, hidden, lane, y + int64_t(t) * hidden,
                                kQ ? xq + int64_t(t) * hidden : nullptr, x_scale);
}

// Variant 1: one warp per row, NV 16-byte vectors per lane at most.
template <typename T, int NV>
__global__ void __launch_bounds__(256)
    LayerNormWarpKernel(const T* x, const T* bias, const T* residual, const float* gamma,
                        const float* beta, float eps, int rows, int hidden, T* y) {
  constexpr int E = 16 / sizeof(T);  // elements per vector
  PdlWaitThenTrigger();
  const int row = int((blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;  // whole warps leave together: the shuffles below stay full-warp
  const int nvec = hidden / E;
  const int64_t off = int64_t(row) * hidden;
  float v[NV][E];
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int idx = lane + 32 * i;
#pragma unroll
    for (int e = 0; e < E; ++e) v[i][e] = 0.f;
    if (idx < nvec) {
      alignas(16) T a[E];
      *reinterpret_cast<int4*>(a) = *reinterpret_cast<const int4*>(x + off + idx * E);
#pragma unroll
      for (int e = 0; e < E; ++e) v[i][e] = ToF(a[e]);
      if (bias) {
        *reinterpret_cast<int4*>(a) = *reinterpret_cast<const int4*>(bias + idx * E);
#pragma unroll
        for (int e = 0; e < E; ++e) v[i][e] += ToF(a[e]);
      }
      if (residual) {
        *reinterpret_cast<int4*>(a) = *reinterpret_cast<const int4*>(residual + off + idx * E);
#pragma unroll
        for (int e = 0; e < E; ++e) v[i][e] += ToF(a[e]);
      }
#pragma unroll
      for (int e = 0; e < E; ++e) s += v[i][e];
    }
  }
  WarpNormaliseStore<T, NV>(v, s, gamma, beta, eps, hidden, lane, y + off);
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Launches variant 1 when it applies; false otherwise.
template <typename T>
bool LaunchLayerNormWarp(const T* x, const T* bias, const T* residual, const float* gamma,
                         const float* beta, float eps, int rows, int hidden, T* y,
                         cudaStream_t s) {
  constexpr int E = 16 / sizeof(T);
  if (hidden % E || hidden > 1024 || !Aligned16(x) || !Aligned16(y) ||
      (bias && !Aligned16(bias)) || (residual && !Aligned16(residual)) || !Aligned16(gamma) ||
      !Aligned16(beta)) {
    return false;
  }
  const int per_lane = (hidden / E + 31) / 32;  // 1..8 (fp32) or 1..4 (16-bit types)
  const unsigned grid = unsigned((int64_t(rows) * 32 + 255) / 256);
  switch (per_lane) {
#define HL_LN_CASE(NV)                                                                      \
  case NV:                                                                                  \
    CUDA_CHECK(LaunchKernel(LayerNormWarpKernel<T, NV>, dim3(grid), dim3(256), 0, s, x, bias,  \
                            residual, gamma, beta, eps, rows, hidden, y));                  \
    return true;
    HL_LN_CASE(1) HL_LN_CASE(2) HL_LN_CASE(3) HL_LN_CASE(4)
    HL_LN_CASE(5) HL_LN_CASE(6) HL_LN_CASE(7) HL_LN_CASE(8)
#undef HL_LN_CASE
    default: return false;
  }
}

void CheckHidden(int hidden, const char* who) {
  if (hidden < 1 || hidden > 12288) {
    throw Error(std::string(who) + ": hidden must be in [1, 12288], got " +
                std::to_string(hidden));
  }
}

template <typename K>
void AllowSmem(K kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(bytes)));
}

}  // namespace

void LayerNorm(DType t, const void* x, const void* bias, const void* residual, const float* gamma,
               const float* beta, float eps, int rows, int hidden, void* y, cudaStream_t s) {
  CheckHidden(hidden, "LayerNorm");
  if (rows < 0) throw Error("LayerNorm: rows must be >= 0, got " + std::to_string(rows));
  if (rows == 0) return;
  if (!x || !gamma || !beta || !y) throw Error("LayerNorm: null x, gamma, beta or y");
  const size_t smem = size_t(hidden) * sizeof(float);
  const bool warp_variant = GetKernelVariants().layernorm == 1;
  DispatchDType(t, [&](auto tag) {
    using T = decltype(tag);
    if (warp_variant &&
        LaunchLayerNormWarp<T>(static_cast<const T*>(x), static_cast<const T*>(bias),
                               static_cast<const T*>(residual), gamma, beta, eps, rows, hidden,
                               static_cast<T*>(y), s)) {
      return;
    }
    AllowSmem(LayerNormKernel<T>, smem);
    LayerNormKernel<T><<<rows, kThreads, smem, s>>>(
        static_cast<const T*>(x), static_cast<const T*>(bias), static_cast<const T*>(residual),
        gamma, beta, eps, hidden, static_cast<T*>(y));
  });
  CUDA_CHECK_LAUNCH();
}

namespace {

// The embedding launch for a word table of WT (the activation type, or int8_t with row scales).
// With quant.xq, the quantised copy is written by the warp kernel in the same pass where it
// applies, else by a quantise pass over y after the block kernel (the same bytes either way).
template <bool kQ8>
void LaunchEmbedding(const char* who, DType t, const int32_t* ids, const int32_t* type_ids,
                     const int32_t* cu_seqlens, int batch, int rows, const void* word,
                     const float* word_scale, int vocab, const void* pos, int max_pos,
                     const void* type, int type_vocab, const float* gamma, const float* beta,
                     float eps, int hidden, void* y, cudaStream_t s, const QuantizedCopy& quant) {
  CheckHidden(hidden, who);
  if (batch < 1 || rows < 0 || vocab < 1 || max_pos < 1 || type_vocab < 1) {
    throw Error(std::string(who) + ": need batch >= 1, rows >= 0 and non-empty tables, got batch=" +
                std::to_string(batch) + " rows=" + std::to_string(rows) + " vocab=" +
                std::to_string(vocab) + " max_pos=" + std::to_string(max_pos) +
                " type_vocab=" + std::to_string(type_vocab));
  }
  if (quant.xq && !(quant.x_scale > 0.f && std::isfinite(quant.x_scale))) {
    throw Error(std::string(who) + ": the quantised copy needs a positive finite x_scale, got " +
                std::to_string(quant.x_scale));
  }
  if (rows == 0) return;
  if (!ids || !cu_seqlens || !word || !pos || !type || !gamma || !beta || !y ||
      (kQ8 && !word_scale)) {
    throw Error(std::string(who) + ": null ids, cu_seqlens, table, scales or output");
  }
  const size_t smem = size_t(hidden) * sizeof(float);
  const bool warp_variant = GetKernelVariants().layernorm == 1;
  bool fused = false;
  DispatchDType(t, [&](auto tag) {
    using T = decltype(tag);
    using WT = std::conditional_t<kQ8, int8_t, T>;
    constexpr int E = 16 / sizeof(T);
    if (warp_variant && hidden % E == 0 && hidden <= 1024 && Aligned16(word) && Aligned16(pos) &&
        Aligned16(type) && Aligned16(y) && Aligned16(gamma) && Aligned16(beta) &&
        (!quant.xq || reinterpret_cast<uintptr_t>(quant.xq) % E == 0)) {
      // Plain launch (no PDL): its predecessors in a graph are the host-to-device copies.
      const unsigned grid = unsigned((int64_t(rows) * 32 + 255) / 256);
      const auto* w = static_cast<const WT*>(word);
      const auto* pe = static_cast<const T*>(pos);
      const auto* te = static_cast<const T*>(type);
      auto* out = static_cast<T*>(y);
      auto* xq = static_cast<uint8_t*>(quant.xq);
      const int kq = !quant.xq ? 0 : quant.fp8 ? 2 : 1;
      auto launch = [&](auto nv_tag, auto kq_tag) {
        constexpr int NV = decltype(nv_tag)::value, KQ = decltype(kq_tag)::value;
        EmbedWarpKernel<T, NV, WT, KQ><<<grid, 256, 0, s>>>(
            ids, type_ids, cu_seqlens, batch, w, vocab, pe, max_pos, te, type_vocab, gamma, beta,
            eps, rows, hidden, out, word_scale, xq, quant.x_scale);
      };
      auto with_nv = [&](auto nv_tag) {
        if (kq == 0) launch(nv_tag, std::integral_constant<int, 0>{});
        else if (kq == 1) launch(nv_tag, std::integral_constant<int, 1>{});
        else launch(nv_tag, std::integral_constant<int, 2>{});
        fused = true;
      };
      switch ((hidden / E + 31) / 32) {
#define HL_EMB_CASE(NV) \
  case NV: with_nv(std::integral_constant<int, NV>{}); return;
        HL_EMB_CASE(1) HL_EMB_CASE(2) HL_EMB_CASE(3) HL_EMB_CASE(4)
        HL_EMB_CASE(5) HL_EMB_CASE(6) HL_EMB_CASE(7) HL_EMB_CASE(8)
#undef HL_EMB_CASE
        default: break;
      }
    }
    AllowSmem(EmbedKernel<T, WT>, smem);
    EmbedKernel<T, WT><<<rows, kThreads, smem, s>>>(
        ids, type_ids, cu_seqlens, batch, static_cast<const WT*>(word), vocab,
        static_cast<const T*>(pos), max_pos, static_cast<const T*>(type), type_vocab, gamma, beta,
        eps, hidden, static_cast<T*>(y), word_scale);
  });
  CUDA_CHECK_LAUNCH();
  if (quant.xq && !fused) {
    QuantizeActivations(t, y, int64_t(rows) * hidden, quant.x_scale,
                        quant.fp8 ? QuantType::kFp8E4M3 : QuantType::kInt8, quant.xq, s);
  }
}

}  // namespace

void EmbeddingLayerNorm(DType t, const int32_t* ids, const int32_t* type_ids,
                        const int32_t* cu_seqlens, int batch, int rows, const void* word,
                        int vocab, const void* pos, int max_pos, const void* type, int type_vocab,
                        const float* gamma, const float* beta, float eps, int hidden, void* y,
                        cudaStream_t s, const QuantizedCopy& quant) {
  LaunchEmbedding<false>("EmbeddingLayerNorm", t, ids, type_ids, cu_seqlens, batch, rows, word,
                         nullptr, vocab, pos, max_pos, type, type_vocab, gamma, beta, eps, hidden,
                         y, s, quant);
}

void EmbeddingLayerNormInt8Word(DType t, const int32_t* ids, const int32_t* type_ids,
                                const int32_t* cu_seqlens, int batch, int rows,
                                const void* word_q, const float* word_scale, int vocab,
                                const void* pos, int max_pos, const void* type, int type_vocab,
                                const float* gamma, const float* beta, float eps, int hidden,
                                void* y, cudaStream_t s, const QuantizedCopy& quant) {
  LaunchEmbedding<true>("EmbeddingLayerNormInt8Word", t, ids, type_ids, cu_seqlens, batch, rows,
                        word_q, word_scale, vocab, pos, max_pos, type, type_vocab, gamma, beta,
                        eps, hidden, y, s, quant);
}

}  // namespace hotline::engine::cuda
