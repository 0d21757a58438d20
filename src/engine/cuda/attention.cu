// Packed variable-length multi-head attention: argument checks, the dispatch between the
// tensor-core path (attention_wmma.cu) and the exact kernel below, which serves FP32 and any head
// size: one warp per query row, scores for all keys of the sequence in shared memory.
#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include "base/error.h"
#include "engine/cuda/attention_internal.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device_util.cuh"

namespace hotline::engine::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kMaxHeadDim = 256;

template <typename T>
__global__ void AttentionExactKernel(const T* qkv, const int32_t* cu, int heads, int head_dim,
                                     float scale, int max_seqlen, T* ctx) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int b = blockIdx.z, h = blockIdx.y;
  const int q = blockIdx.x * kWarps + warp;
  const int start = cu[b], len = cu[b + 1] - start;
  if (q >= len) return;
  const int hidden = heads * head_dim, ld = 3 * hidden;
  float* qv = smem + warp * (max_seqlen + kMaxHeadDim);  // query row, then scores
  float* sc = qv + kMaxHeadDim;
  const T* qrow = qkv + int64_t(start + q) * ld + h * head_dim;
  for (int d = lane; d < head_dim; d += 32) qv[d] = ToF(qrow[d]);
  __syncwarp();
  float mx = -INFINITY;
  for (int j = lane; j < len; j += 32) {
    const T* krow = qkv + int64_t(start + j) * ld + hidden + h * head_dim;
    float dot = 0.f;
    for (int d = 0; d < head_dim; ++d) dot += qv[d] * ToF(krow[d]);
    dot *= scale;
    sc[j] = dot;
    mx = fmaxf(mx, dot);
  }
  mx = WarpMax(mx);
  float sum = 0.f;
  for (int j = lane; j < len; j += 32) {
    const float p = expf(sc[j] - mx);
    sc[j] = p;
    sum += p;
  }
  sum = WarpSum(sum);
  __syncwarp();
  const float inv = 1.f / sum;
  T* out = ctx + int64_t(start + q) * hidden + h * head_dim;
  for (int d = lane; d < head_dim; d += 32) {
    float acc = 0.f;
    const T* vcol = qkv + int64_t(start) * ld + 2 * hidden + h * head_dim + d;
    for (int j = 0; j < len; ++j) acc += sc[j] * ToF(vcol[int64_t(j) * ld]);
    out[d] = FromF<T>(acc * inv);
  }
}

}  // namespace

namespace detail {
void AllowDynamicSmem(const void* kernel, int bytes) {
  static std::mutex mu;
  static std::set<std::tuple<const void*, int, int>> done;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  if (done.count({kernel, dev, bytes})) return;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done.insert({kernel, dev, bytes});
}
}  // namespace detail

bool AttentionHasFastPath(DType dtype, int head_dim) {
  return dtype != DType::kF32 && (head_dim == 32 || head_dim == 64 || head_dim == 128);
}

void Attention(DType t, const void* qkv, const int32_t* cu_seqlens, int batch, int max_seqlen,
               int heads, int head_dim, float scale, void* ctx, cudaStream_t s) {
  if (batch < 0 || max_seqlen < 0 || heads < 1 || head_dim < 1 || head_dim > kMaxHeadDim) {
    throw Error("Attention: need batch >= 0, max_seqlen >= 0, heads >= 1 and head_dim in [1, " +
                std::to_string(kMaxHeadDim) + "], got batch=" + std::to_string(batch) +
                " max_seqlen=" + std::to_string(max_seqlen) + " heads=" + std::to_string(heads) +
                " head_dim=" + std::to_string(head_dim));
  }
  if (batch == 0 || max_seqlen == 0) return;
  if (!qkv || !cu_seqlens || !ctx) throw Error("Attention: null qkv, cu_seqlens or ctx");
  if (batch > 65535 || heads > 65535) {
    throw Error("Attention: batch and heads must be at most 65535, got " + std::to_string(batch) +
                ", " + std::to_string(heads));
  }
  if (AttentionHasFastPath(t, head_dim) && GetKernelVariants().attention >= 1 &&
      detail::LaunchAttentionMma(t, qkv, cu_seqlens, batch, max_seqlen, heads, head_dim, scale,
                                 ctx, s)) {
    return;
  }
  if (AttentionHasFastPath(t, head_dim) &&
      detail::LaunchAttentionWmma(t, qkv, cu_seqlens, batch, max_seqlen, heads, head_dim, scale,
                                  ctx, s)) {
    return;
  }
  const size_t smem = size_t(kWarps) * (max_seqlen + kMaxHeadDim) * sizeof(float);
  int max_smem = 0, dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (smem > size_t(max_smem)) {
    throw Error("Attention: max_seqlen " + std::to_string(max_seqlen) +
                " needs more shared memory than this GPU has for the exact kernel",
                Code::kOutOfRange);
  }
  const dim3 grid((max_seqlen + kWarps - 1) / kWarps, heads, batch);
  DispatchDType(t, [&](auto tag) {
    using T = decltype(tag);
    if (smem > 48 * 1024) {
      detail::AllowDynamicSmem(reinterpret_cast<const void*>(&AttentionExactKernel<T>),
                               int(smem));
    }
    AttentionExactKernel<T><<<grid, kWarps * 32, smem, s>>>(
        static_cast<const T*>(qkv), cu_seqlens, heads, head_dim, scale, max_seqlen,
        static_cast<T*>(ctx));
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace hotline::engine::cuda
