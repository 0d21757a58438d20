// Split-K weight-streaming GEMM for M <= 64 rows (see small_gemm.h).
#include <mma.h>

#include <string>
#include <type_traits>

#include "base/error.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device_util.cuh"
#include "engine/cuda/small_gemm.h"

namespace hotline::engine::cuda {
namespace {

using namespace nvcuda;
constexpr int kTile = 64;       // rows of x (padded), output columns and k per step
constexpr int kLd = kTile + 8;  // shared-memory row stride (elements)

// Block (n tile, split): partial[split][0..63][n0..n0+63] = x[:, kslice] . w[n0.., kslice]^T.
template <typename T>
__global__ void __launch_bounds__(128)
    SplitKKernel(const T* __restrict__ x, int M, int K, const T* __restrict__ w, int ldn,
                 int k_per_split, float* __restrict__ partial) {
  __shared__ __align__(128) T xs[kTile * kLd];
  __shared__ __align__(128) T ws[kTile * kLd];
  const int n0 = blockIdx.x * kTile, split = blockIdx.y;
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
  if (!active) return;
  float* out = partial + (size_t(split) * kTile + warp * 16) * ldn + n0;
#pragma unroll
  for (int j = 0; j < 4; ++j)
    wmma::store_matrix_sync(out + j * 16, acc[j], ldn, wmma::mem_row_major);
}

template <typename T>
__global__ void ReduceKernel(const float* __restrict__ partial, int splits, int M, int ldn,
                             const T* __restrict__ bias, int act, const T* residual, T* y) {
  const int64_t n_total = int64_t(M) * ldn;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int m = int(i / ldn), n = int(i % ldn);
    float v = 0.f;
    for (int s = 0; s < splits; ++s) v += partial[(size_t(s) * kTile + m) * ldn + n];
    if (bias) v += ToF(bias[n]);
    if (act == 1) v = 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
    if (act == 2) v = 0.5f * v * (1.f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    if (act == 3) v = tanhf(v);
    if (residual) v += ToF(residual[i]);
    y[i] = FromF<T>(v);
  }
}

}  // namespace

bool SmallGemmEligible(DType dtype, int M, int K, int ldn) {
  return dtype != DType::kF32 && M >= 1 && M <= kTile && K % kTile == 0 && ldn % kTile == 0 &&
         K > 0 && ldn > 0;
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
               GemmEpilogue epilogue, const void* residual, void* y, int splits, void* workspace,
               cudaStream_t s) {
  if (!SmallGemmEligible(dtype, M, K, ldn) || splits < 1 || (K / kTile) % splits) {
    throw Error("SmallGemm: unsupported problem M=" + std::to_string(M) + " K=" +
                std::to_string(K) + " N=" + std::to_string(ldn) + " splits=" +
                std::to_string(splits) + " " + DTypeName(dtype), Code::kUnimplemented);
  }
  const int act = epilogue == GemmEpilogue::kBiasGelu       ? 1
                  : epilogue == GemmEpilogue::kBiasGeluTanh ? 2
                  : epilogue == GemmEpilogue::kBiasTanh     ? 3
                                                            : 0;
  float* partial = static_cast<float*>(workspace);
  const dim3 grid(ldn / kTile, splits);
  const int64_t n = int64_t(M) * ldn;
  DispatchDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>) {
      SplitKKernel<T><<<grid, 128, 0, s>>>(static_cast<const T*>(x), M, K,
                                           static_cast<const T*>(w), ldn, K / splits, partial);
      ReduceKernel<T><<<GridFor(n, 256), 256, 0, s>>>(
          partial, splits, M, ldn, static_cast<const T*>(bias), act,
          static_cast<const T*>(residual), static_cast<T*>(y));
    }
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace hotline::engine::cuda
