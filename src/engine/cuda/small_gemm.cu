// Split-K weight-streaming GEMM for M <= 64 rows (see small_gemm.h).
#include <mma.h>

#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <utility>

#include "base/error.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device_util.cuh"
#include "engine/cuda/small_gemm.h"

namespace hotline::engine::cuda {
namespace {

using namespace nvcuda;
constexpr int kTile = 64;       // rows of x (padded), output columns and k per step
constexpr int kLd = kTile + 8;  // shared-memory row stride (elements)

// The fused reduction (see small_gemm.h): every block publishes its partial sums and counts in
// on its tile's counter (the threadFenceReduction pattern); the last one sums the splits in fixed
// order with the epilogue and resets the counter. Called by all threads of the block.
template <typename T>
__device__ __forceinline__ void FusedTileReduce(const float* partial, int splits, int M, int ldn,
                                                int n0, const T* bias, int act, const T* residual,
                                                T* y, int* counters) {
  __shared__ int is_last;
  const int tid = threadIdx.x;
  __threadfence();
  __syncthreads();
  if (tid == 0) is_last = atomicAdd(&counters[blockIdx.x], 1) == splits - 1;
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  // 4 consecutive columns per thread: 16 threads cover the tile's 64 columns of a row.
  for (int i = tid; i < M * (kTile / 4); i += blockDim.x) {
    const int m = i / (kTile / 4), n = n0 + (i % (kTile / 4)) * 4;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int sp = 0; sp < splits; ++sp) {
      const float4 p = __ldcg(reinterpret_cast<const float4*>(
          partial + (size_t(sp) * kTile + m) * ldn + n));
      v.x += p.x; v.y += p.y; v.z += p.z; v.w += p.w;
    }
    const float o[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float t = o[e];
      if (bias) t += ToF(bias[n + e]);
      t = ApplyAct(t, act);
      if (residual) t += ToF(residual[size_t(m) * ldn + n + e]);
      y[size_t(m) * ldn + n + e] = FromF<T>(t);
    }
  }
  if (tid == 0) counters[blockIdx.x] = 0;  // ready for the next launch
}

// Block (n tile, split): partial[split][0..63][n0..n0+63] = x[:, kslice] . w[n0.., kslice]^T.
// kFused: the last block of the n tile to finish also reduces it (see small_gemm.h).
template <typename T, bool kFused>
__global__ void __launch_bounds__(128)
    SplitKKernel(const T* __restrict__ x, int M, int K, const T* __restrict__ w, int ldn,
                 int k_per_split, float* __restrict__ partial, const T* __restrict__ bias,
                 int act, const T* residual, T* y, int* counters) {
  __shared__ __align__(128) T xs[kTile * kLd];
  __shared__ __align__(128) T ws[kTile * kLd];
  PdlWaitThenTrigger();
  const int n0 = blockIdx.x * kTile, split = blockIdx.y, splits = gridDim.y;
  const int k_begin = split * k_per_split, k_end = k_begin + k_per_split;
  const int tid = threadIdx.x, warp = tid >> 5;
  const bool active = warp * 16 < M;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) wmma::fill_fragment(acc[j], 0.f);
  const int4 zero = make_int4(0, 0, 0, 0);
  for (int k0 = k_begin; k0 < k_end; k0 += kTile) {
    __syncthreads();
    // 64 rows x 64 elements = 512 vectors of 8 elements per matrix; 4 per thread each.
    for (int i = tid; i < kTile * 8; i += 128) {
      const int r = i >> 3, c = (i & 7) * 8;
      const int4 xv = r < M ? *reinterpret_cast<const int4*>(x + size_t(r) * K + k0 + c) : zero;
      *reinterpret_cast<int4*>(xs + r * kLd + c) = xv;
      *reinterpret_cast<int4*>(ws + r * kLd + c) =
          *reinterpret_cast<const int4*>(w + size_t(n0 + r) * K + k0 + c);
    }
    __syncthreads();
    if (active) {
#pragma unroll
      for (int kk = 0; kk < kTile / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::load_matrix_sync(fa, xs + warp * 16 * kLd + kk * 16, kLd);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          // B(k, n) = w[n][k]: column-major with ld kLd.
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
          wmma::load_matrix_sync(fb, ws + j * 16 * kLd + kk * 16, kLd);
          wmma::mma_sync(acc[j], fa, fb, acc[j]);
        }
      }
    }
  }
  if (active) {
    float* out = partial + (size_t(split) * kTile + warp * 16) * ldn + n0;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      wmma::store_matrix_sync(out + j * 16, acc[j], ldn, wmma::mem_row_major);
  }
  if constexpr (kFused) {
    FusedTileReduce<T>(partial, splits, M, ldn, n0, bias, act, residual, y, counters);
  }
}

// Variant 2 (v2): each block takes one KS-wide k slice of a 64-column tile and loads all of it
// (x rows and weight rows) with cp.async before computing, so a block waits for one round trip
// instead of KS / 64; splits = K / KS; the reduction is always fused.
template <typename T, int KS>
__global__ void __launch_bounds__(128)
    SplitKAsyncKernel(const T* __restrict__ x, int M, int K, const T* __restrict__ w, int ldn,
                      float* __restrict__ partial, const T* __restrict__ bias, int act,
                      const T* residual, T* y, int* counters) {
  constexpr int ld = KS + 8;  // elements; 16-byte rows, staggered banks
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* xs = reinterpret_cast<T*>(smem_raw);
  T* ws = xs + kTile * ld;
  PdlWaitThenTrigger();
  const int n0 = blockIdx.x * kTile, split = blockIdx.y, splits = gridDim.y;
  const int k0 = split * KS;
  const int tid = threadIdx.x, warp = tid >> 5;
  constexpr int kVecs = KS / 8;  // 16-byte vectors per row
  for (int i = tid; i < kTile * kVecs; i += 128) {
    const int r = i / kVecs, c = (i % kVecs) * 8;
    const uint32_t wdst = static_cast<uint32_t>(__cvta_generic_to_shared(ws + r * ld + c));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(wdst),
                 "l"(w + size_t(n0 + r) * K + k0 + c));
    if (r < M) {
      const uint32_t xdst = static_cast<uint32_t>(__cvta_generic_to_shared(xs + r * ld + c));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(xdst),
                   "l"(x + size_t(r) * K + k0 + c));
    }
  }
  asm volatile("cp.async.commit_group;\n" ::);
  asm volatile("cp.async.wait_group 0;\n" ::);
  __syncthreads();
  const bool active = warp * 16 < M;
  if (active) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) wmma::fill_fragment(acc[j], 0.f);
    // Rows of x past M were never loaded: the warps that own only such rows do not compute, and
    // a partly valid warp (rows 16w..16w+15 straddling M) reads rows past M that may hold stale
    // data: their outputs land in partial rows >= M, which the reduction never reads.
#pragma unroll 4
    for (int kk = 0; kk < KS / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
      wmma::load_matrix_sync(fa, xs + warp * 16 * ld + kk * 16, ld);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
        wmma::load_matrix_sync(fb, ws + j * 16 * ld + kk * 16, ld);
        wmma::mma_sync(acc[j], fa, fb, acc[j]);
      }
    }
    float* out = partial + (size_t(split) * kTile + warp * 16) * ldn + n0;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      wmma::store_matrix_sync(out + j * 16, acc[j], ldn, wmma::mem_row_major);
  }
  FusedTileReduce<T>(partial, splits, M, ldn, n0, bias, act, residual, y, counters);
}

template <typename T>
__global__ void ReduceKernel(const float* __restrict__ partial, int splits, int M, int ldn,
                             const T* __restrict__ bias, int act, const T* residual, T* y) {
  PdlWaitThenTrigger();
  const int64_t n_total = int64_t(M) * ldn;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int m = int(i / ldn), n = int(i % ldn);
    float v = 0.f;
    for (int s = 0; s < splits; ++s) v += partial[(size_t(s) * kTile + m) * ldn + n];
    if (bias) v += ToF(bias[n]);
    v = ApplyAct(v, act);
    if (residual) v += ToF(residual[i]);
    y[i] = FromF<T>(v);
  }
}

}  // namespace

bool SmallGemmEligible(DType dtype, int M, int K, int ldn) {
  return dtype != DType::kF32 && M >= 1 && M <= kTile && K % kTile == 0 && ldn % kTile == 0 &&
         K > 0 && ldn > 0 && ldn / kTile <= kSmallGemmMaxTiles;
}

std::vector<int> SmallGemmSplits(int K) {
  std::vector<int> out;
  const int tiles = K / kTile;
  for (int s : {1, 2, 3, 4, 6, 8, 12, 16})
    if (tiles % s == 0) out.push_back(s);
  return out;
}

size_t SmallGemmWorkspaceBytes(int ldn, int splits) {
  return size_t(splits) * kTile * ldn * sizeof(float);
}

void SmallGemm(DType dtype, const void* x, int M, int K, const void* w, int ldn, const void* bias,
               GemmEpilogue epilogue, const void* residual, void* y, int splits, bool fused,
               void* workspace, int* counters, cudaStream_t s) {
  if (!SmallGemmEligible(dtype, M, K, ldn) || splits < 1 || (K / kTile) % splits ||
      (fused && !counters)) {
    throw Error("SmallGemm: unsupported problem M=" + std::to_string(M) + " K=" +
                std::to_string(K) + " N=" + std::to_string(ldn) + " splits=" +
                std::to_string(splits) + " " + DTypeName(dtype), Code::kUnimplemented);
  }
  const int act = EpilogueActCode(epilogue);
  float* partial = static_cast<float*>(workspace);
  const dim3 grid(ldn / kTile, splits);
  const int64_t n = int64_t(M) * ldn;
  DispatchDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>) {
      const T* xb = static_cast<const T*>(x);
      const T* wb = static_cast<const T*>(w);
      const T* bb = static_cast<const T*>(bias);
      const T* rb = static_cast<const T*>(residual);
      T* yb = static_cast<T*>(y);
      if (fused) {
        CUDA_CHECK(LaunchKernel(SplitKKernel<T, true>, grid, dim3(128), 0, s, xb, M, K, wb, ldn,
                                K / splits, partial, bb, act, rb, yb, counters));
        return;
      }
      CUDA_CHECK(LaunchKernel(SplitKKernel<T, false>, grid, dim3(128), 0, s, xb, M, K, wb, ldn,
                              K / splits, partial, static_cast<const T*>(nullptr), 0,
                              static_cast<const T*>(nullptr), static_cast<T*>(nullptr),
                              static_cast<int*>(nullptr)));
      CUDA_CHECK(LaunchKernel(ReduceKernel<T>, dim3(GridFor(n, 256)), dim3(256), 0, s,
                              static_cast<const float*>(partial), splits, M, ldn, bb, act, rb,
                              yb));
    }
  });
  CUDA_CHECK_LAUNCH();
}

std::vector<int> SmallGemmAsyncSlices(int K) {
  std::vector<int> out;
  for (int ks : {128, 256, 384})
    if (K % ks == 0) out.push_back(ks);
  return out;
}

size_t SmallGemmAsyncSmemBytes(DType dtype, int kslice) {
  return size_t(2) * kTile * (kslice + 8) * DTypeSize(dtype);
}

void SmallGemmAsync(DType dtype, const void* x, int M, int K, const void* w, int ldn,
                    const void* bias, GemmEpilogue epilogue, const void* residual, void* y,
                    int kslice, void* workspace, int* counters, cudaStream_t s) {
  if (!SmallGemmEligible(dtype, M, K, ldn) || (kslice != 128 && kslice != 256 && kslice != 384) ||
      K % kslice || !counters || !workspace) {
    throw Error("SmallGemmAsync: unsupported problem M=" + std::to_string(M) + " K=" +
                std::to_string(K) + " N=" + std::to_string(ldn) + " kslice=" +
                std::to_string(kslice) + " " + DTypeName(dtype), Code::kUnimplemented);
  }
  const int act = EpilogueActCode(epilogue);
  const dim3 grid(ldn / kTile, K / kslice);
  const size_t smem = SmallGemmAsyncSmemBytes(dtype, kslice);
  DispatchDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>) {
      auto launch = [&](auto kernel) {
        static std::mutex mu;
        static std::set<std::pair<int, const void*>> done;
        int dev = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        {
          std::lock_guard<std::mutex> lock(mu);
          if (!done.count({dev, reinterpret_cast<const void*>(kernel)})) {
            CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            int(SmallGemmAsyncSmemBytes(dtype, 384))));
            done.insert({dev, reinterpret_cast<const void*>(kernel)});
          }
        }
        CUDA_CHECK(LaunchKernel(kernel, grid, dim3(128), smem, s, static_cast<const T*>(x), M, K,
                                static_cast<const T*>(w), ldn, static_cast<float*>(workspace),
                                static_cast<const T*>(bias), act,
                                static_cast<const T*>(residual), static_cast<T*>(y), counters));
      };
      if (kslice == 128) launch(SplitKAsyncKernel<T, 128>);
      else if (kslice == 256) launch(SplitKAsyncKernel<T, 256>);
      else launch(SplitKAsyncKernel<T, 384>);
    }
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace hotline::engine::cuda
