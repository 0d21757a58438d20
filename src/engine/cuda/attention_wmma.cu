// Tensor-core attention for FP16/BF16 over packed sequences (flash-style): a block takes 64
// queries of one (sequence, head), four warps of 16 queries each; key/value tiles of 64 rows are
// staged in shared memory; S = Q·K^T and O += P·V run on WMMA 16x16x16 fragments with FP32
// accumulation; the online softmax (running max m and sum l per row, O rescaled by exp(m_old -
// m_new)) runs in FP32 with two lanes per row. Keys past the sequence's end score -inf; query rows
// past it are computed on zeros and not written.
#include <mma.h>

#include "engine/cuda/attention_internal.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device_util.cuh"

namespace hotline::engine::cuda::detail {
namespace {

using namespace nvcuda;

constexpr int kQ = 64;       // queries per block
constexpr int kKT = 64;      // keys per tile
constexpr int kWarps = 4;    // 16 queries each

template <int D>
struct Layout {
  static constexpr int ldh = D + 8;    // Q, K, V tiles (elements); +8 staggers banks
  static constexpr int lds = kKT + 4;  // per-warp scores (floats)
  static constexpr int ldp = kKT + 8;  // per-warp probabilities (elements)
  static constexpr int ldo = D + 4;    // per-warp output accumulator (floats)
  static constexpr size_t bytes = size_t(kQ + 2 * kKT) * ldh * 2 +
                                  size_t(kWarps) * 16 * (lds * 4 + ldp * 2 + ldo * 4);
};

template <typename T, int D>
__global__ void __launch_bounds__(kWarps * 32)
    AttentionWmmaKernel(const T* __restrict__ qkv, const int32_t* __restrict__ cu, int heads,
                        float scale, T* __restrict__ ctx) {
  using L = Layout<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem);
  T* sK = sQ + kQ * L::ldh;
  T* sV = sK + kKT * L::ldh;
  float* sS = reinterpret_cast<float*>(sV + kKT * L::ldh);
  T* sP = reinterpret_cast<T*>(sS + kWarps * 16 * L::lds);
  float* sO = reinterpret_cast<float*>(sP + kWarps * 16 * L::ldp);

  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kQ;
  const int start = cu[b], len = cu[b + 1] - start;
  if (q0 >= len) return;  // uniform for the block: before any barrier
  const int hidden = heads * D;
  const int64_t ld = 3 * int64_t(hidden);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  constexpr int kVec = D / 8;  // 16-byte vectors per row
  const int4 zero = make_int4(0, 0, 0, 0);

  for (int i = tid; i < kQ * kVec; i += kWarps * 32) {
    const int r = i / kVec, c = (i % kVec) * 8;
    int4 v = zero;
    if (q0 + r < len) v = *reinterpret_cast<const int4*>(qkv + (start + q0 + r) * ld + h * D + c);
    *reinterpret_cast<int4*>(sQ + r * L::ldh + c) = v;
  }
  float* myS = sS + warp * 16 * L::lds;
  T* myP = sP + warp * 16 * L::ldp;
  float* myO = sO + warp * 16 * L::ldo;
  for (int i = lane; i < 16 * L::ldo; i += 32) myO[i] = 0.f;
  const int r = lane >> 1, half = lane & 1;
  float m = -INFINITY, l = 0.f;

  for (int k0 = 0; k0 < len; k0 += kKT) {
    __syncthreads();  // previous tile fully consumed
    for (int i = tid; i < kKT * kVec; i += kWarps * 32) {
      const int rr = i / kVec, c = (i % kVec) * 8;
      int4 kv = zero, vv = zero;
      if (k0 + rr < len) {
        const T* base = qkv + (start + k0 + rr) * ld + hidden + h * D + c;
        kv = *reinterpret_cast<const int4*>(base);
        vv = *reinterpret_cast<const int4*>(base + hidden);
      }
      *reinterpret_cast<int4*>(sK + rr * L::ldh + c) = kv;
      *reinterpret_cast<int4*>(sV + rr * L::ldh + c) = vv;
    }
    __syncthreads();

#pragma unroll
    for (int j = 0; j < kKT / 16; ++j) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.f);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
        wmma::load_matrix_sync(fa, sQ + warp * 16 * L::ldh + kk * 16, L::ldh);
        wmma::load_matrix_sync(fb, sK + j * 16 * L::ldh + kk * 16, L::ldh);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(myS + j * 16, acc, L::lds, wmma::mem_row_major);
    }
    __syncwarp();

    const float* srow = myS + r * L::lds + half * 32;
    float sv[32];
    float mx = -INFINITY;
#pragma unroll
    for (int c = 0; c < 32; ++c) {
      const int key = k0 + half * 32 + c;
      sv[c] = key < len ? srow[c] * scale : -INFINITY;
      mx = fmaxf(mx, sv[c]);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_new = fmaxf(m, mx);  // finite: every tile holds at least one key
    const float corr = __expf(m - m_new);
    float sum = 0.f;
    T* prow = myP + r * L::ldp + half * 32;
#pragma unroll
    for (int c = 0; c < 32; ++c) {
      const float p = __expf(sv[c] - m_new);
      sum += p;
      prow[c] = FromF<T>(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * corr + sum;
    m = m_new;
    float* orow = myO + r * L::ldo + half * (D / 2);
#pragma unroll
    for (int d = 0; d < D / 2; ++d) orow[d] *= corr;
    __syncwarp();

#pragma unroll
    for (int jd = 0; jd < D / 16; ++jd) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, myO + jd * 16, L::ldo, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kKT / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, myP + kk * 16, L::ldp);
        wmma::load_matrix_sync(fb, sV + kk * 16 * L::ldh + jd * 16, L::ldh);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(myO + jd * 16, acc, L::ldo, wmma::mem_row_major);
    }
    __syncwarp();
  }

  const int q = q0 + warp * 16 + r;
  if (q < len) {
    const float inv = 1.f / l;
    T* out = ctx + int64_t(start + q) * hidden + h * D + half * (D / 2);
    const float* orow = myO + r * L::ldo + half * (D / 2);
#pragma unroll
    for (int d = 0; d < D / 2; d += 2) {
      out[d] = FromF<T>(orow[d] * inv);
      out[d + 1] = FromF<T>(orow[d + 1] * inv);
    }
  }
}

template <typename T, int D>
void Launch(const void* qkv, const int32_t* cu, int batch, int max_seqlen, int heads, float scale,
            void* ctx, cudaStream_t s) {
  AllowDynamicSmem(reinterpret_cast<const void*>(&AttentionWmmaKernel<T, D>),
                   int(Layout<D>::bytes));
  const dim3 grid((max_seqlen + kQ - 1) / kQ, heads, batch);
  AttentionWmmaKernel<T, D><<<grid, kWarps * 32, Layout<D>::bytes, s>>>(
      static_cast<const T*>(qkv), cu, heads, scale, static_cast<T*>(ctx));
  CUDA_CHECK_LAUNCH();
}

}  // namespace

bool LaunchAttentionWmma(DType dtype, const void* qkv, const int32_t* cu, int batch,
                         int max_seqlen, int heads, int head_dim, float scale, void* ctx,
                         cudaStream_t s) {
  return DispatchHalfHeadDim(dtype, head_dim, [&](auto tag, auto dim) {
    Launch<decltype(tag), decltype(dim)::value>(qkv, cu, batch, max_seqlen, heads, scale, ctx, s);
  });
}

}  // namespace hotline::engine::cuda::detail
