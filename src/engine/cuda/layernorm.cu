// LayerNorm (with optional bias and residual) and the embedding sum + LayerNorm, one block per
// row: the row is summed into shared memory in FP32 once, then mean and the two-pass variance are
// reduced from there, so y may alias x or residual.
#include <string>

#include "base/error.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device_util.cuh"

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

template <typename T>
__global__ void EmbedKernel(const int32_t* ids, const int32_t* type_ids, const int32_t* cu,
                            int batch, const T* word, int vocab, const T* pos, int max_pos,
                            const T* type, int type_vocab, const float* gamma, const float* beta,
                            float eps, int hidden, T* y) {
  extern __shared__ float row[];
  __shared__ float red[32];
  const int t = blockIdx.x;
  // The sequence holding token t: the last b with cu[b] <= t (binary search over batch + 1).
  int lo = 0, hi = batch;  // invariant: cu[lo] <= t (or lo == 0), answer in [lo, hi)
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (cu[mid] <= t) lo = mid; else hi = mid;
  }
  int p = t < cu[batch] ? t - cu[lo] : 0;
  p = min(max(p, 0), max_pos - 1);
  const int id = min(max(ids[t], 0), vocab - 1);
  const int tt = type_ids ? min(max(type_ids[t], 0), type_vocab - 1) : 0;
  const T* w = word + int64_t(id) * hidden;
  const T* pe = pos + int64_t(p) * hidden;
  const T* te = type + int64_t(tt) * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x)
    row[i] = ToF(w[i]) + ToF(pe[i]) + ToF(te[i]);
  __syncthreads();
  NormaliseRow(row, gamma, beta, eps, hidden, y + int64_t(t) * hidden, red);
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
  DispatchDType(t, [&](auto tag) {
    using T = decltype(tag);
    AllowSmem(LayerNormKernel<T>, smem);
    LayerNormKernel<T><<<rows, kThreads, smem, s>>>(
        static_cast<const T*>(x), static_cast<const T*>(bias), static_cast<const T*>(residual),
        gamma, beta, eps, hidden, static_cast<T*>(y));
  });
  CUDA_CHECK_LAUNCH();
}

void EmbeddingLayerNorm(DType t, const int32_t* ids, const int32_t* type_ids,
                        const int32_t* cu_seqlens, int batch, int rows, const void* word,
                        int vocab, const void* pos, int max_pos, const void* type, int type_vocab,
                        const float* gamma, const float* beta, float eps, int hidden, void* y,
                        cudaStream_t s) {
  CheckHidden(hidden, "EmbeddingLayerNorm");
  if (batch < 1 || rows < 0 || vocab < 1 || max_pos < 1 || type_vocab < 1) {
    throw Error("EmbeddingLayerNorm: need batch >= 1, rows >= 0 and non-empty tables, got batch=" +
                std::to_string(batch) + " rows=" + std::to_string(rows) + " vocab=" +
                std::to_string(vocab) + " max_pos=" + std::to_string(max_pos) +
                " type_vocab=" + std::to_string(type_vocab));
  }
  if (rows == 0) return;
  if (!ids || !cu_seqlens || !word || !pos || !type || !gamma || !beta || !y) {
    throw Error("EmbeddingLayerNorm: null ids, cu_seqlens, table or output");
  }
  const size_t smem = size_t(hidden) * sizeof(float);
  DispatchDType(t, [&](auto tag) {
    using T = decltype(tag);
    AllowSmem(EmbedKernel<T>, smem);
    EmbedKernel<T><<<rows, kThreads, smem, s>>>(
        ids, type_ids, cu_seqlens, batch, static_cast<const T*>(word), vocab,
        static_cast<const T*>(pos), max_pos, static_cast<const T*>(type), type_vocab, gamma, beta,
        eps, hidden, static_cast<T*>(y));
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace hotline::engine::cuda
