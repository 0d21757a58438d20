// Conversions, activations, [CLS] gather and the classifier heads' softmax/argmax.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "base/error.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device_util.cuh"

namespace hotline::engine::cuda {

size_t DTypeSize(DType t) { return t == DType::kF32 ? 4 : 2; }
const char* DTypeName(DType t) {
  return t == DType::kF32 ? "fp32" : t == DType::kF16 ? "fp16" : "bf16";
}

namespace {
// The variants packed into one word (layernorm | attention << 8 | pdl << 16 | gemm_search << 24 |
// own_gemm << 32) so that every launch reads them with one atomic load; the environment is
// parsed once.
std::atomic<uint64_t> g_variants_word{0};
std::once_flag g_variants_once;

uint64_t Pack(const KernelVariants& v) {
  return uint64_t(v.layernorm & 0xff) | uint64_t(v.attention & 0xff) << 8 |
         uint64_t(v.pdl & 0xff) << 16 | uint64_t(v.gemm_search & 0xff) << 24 |
         uint64_t(v.own_gemm & 0xff) << 32;
}

void InitVariants() {
  KernelVariants v;
  if (const char* env = std::getenv("HOTLINE_CUDA_KERNELS")) {
    // "ln=0,attn=1": unknown keys are ignored (this is a measurement switch, not a contract).
    std::string s(env);
    size_t pos = 0;
    while (pos < s.size()) {
      size_t end = s.find(',', pos);
      if (end == std::string::npos) end = s.size();
      const std::string item = s.substr(pos, end - pos);
      const size_t eq = item.find('=');
      if (eq != std::string::npos) {
        const std::string k = item.substr(0, eq);
        const int val = std::atoi(item.c_str() + eq + 1);
        if (k == "ln") v.layernorm = val;
        if (k == "attn") v.attention = val;
        if (k == "pdl") v.pdl = val;
        if (k == "search") v.gemm_search = val;
        if (k == "own") v.own_gemm = val;
      }
      pos = end + 1;
    }
  }
  g_variants_word.store(Pack(v), std::memory_order_relaxed);
}
}  // namespace

KernelVariants GetKernelVariants() {
  std::call_once(g_variants_once, InitVariants);
  const uint64_t w = g_variants_word.load(std::memory_order_relaxed);
  KernelVariants v;
  v.layernorm = int(w & 0xff);
  v.attention = int(w >> 8 & 0xff);
  v.pdl = int(w >> 16 & 0xff);
  v.gemm_search = int(w >> 24 & 0xff);
  v.own_gemm = int(w >> 32 & 0xff);
  return v;
}

void SetKernelVariants(const KernelVariants& v) {
  std::call_once(g_variants_once, InitVariants);
  g_variants_word.store(Pack(v), std::memory_order_relaxed);
}

bool PdlActive() {
  if (GetKernelVariants().pdl != 1) return false;
  static std::atomic<int> cc_of[64];  // 0: not read yet
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
  int cc = cc_of[dev].load(std::memory_order_relaxed);
  if (!cc) {
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    cc = major * 10 + minor;
    cc_of[dev].store(cc, std::memory_order_relaxed);
  }
  return cc >= 90;
}

int CheckPackedBatch(const int32_t* cu, int batch, int max_batch, int max_seqlen) {
  if (batch < 1 || batch > max_batch) {
    throw Error("packed batch: expected 1 to " + std::to_string(max_batch) +
                " sequences, got " + std::to_string(batch), Code::kOutOfRange);
  }
  if (cu == nullptr) throw Error("packed batch: cu_seqlens is null");
  if (cu[0] != 0) {
    throw Error("packed batch: cu_seqlens[0] must be 0, got " + std::to_string(cu[0]));
  }
  int longest = 0;
  for (int b = 0; b < batch; ++b) {
    const int len = cu[b + 1] - cu[b];
    if (len < 1 || len > max_seqlen) {
      throw Error("packed batch: sequence " + std::to_string(b) + " has " + std::to_string(len) +
                      " tokens, expected 1 to " + std::to_string(max_seqlen),
                  len < 0 ? Code::kInvalidArgument : Code::kOutOfRange);
    }
    longest = len > longest ? len : longest;
  }
  return longest;
}

namespace {

template <typename T>
__global__ void FromF32Kernel(const float* src, int64_t n, T* dst) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = FromF<T>(src[i]);
}
template <typename T>
__global__ void ToF32Kernel(const T* src, int64_t n, float* dst) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = ToF(src[i]);
}
// 32x32 tiles through shared memory: coalesced reads of [K, N] and writes of [N, K].
template <typename T>
__global__ void TransposeKernel(const float* src, int K, int N, T* dst) {
  __shared__ float tile[32][33];
  const int n0 = blockIdx.x * 32, k0 = blockIdx.y * 32;
  for (int r = threadIdx.y; r < 32; r += blockDim.y) {
    const int k = k0 + r, n = n0 + threadIdx.x;
    if (k < K && n < N) tile[r][threadIdx.x] = src[int64_t(k) * N + n];
  }
  __syncthreads();
  for (int r = threadIdx.y; r < 32; r += blockDim.y) {
    const int n = n0 + r, k = k0 + threadIdx.x;
    if (n < N && k < K) dst[int64_t(n) * K + k] = FromF<T>(tile[threadIdx.x][r]);
  }
}
template <typename T>
__global__ void FillKernel(T* dst, int64_t n, uint32_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u ^ (uint32_t(i >> 32) * 0x85ebca6bu) ^ seed;
    x ^= x >> 13; x *= 0x5bd1e995u; x ^= x >> 15; x *= 0x27d4eb2du; x ^= x >> 16;
    dst[i] = FromF<T>(scale * (float(x >> 8) * (1.f / 8388608.f) - 1.f));
  }
}
template <typename T>
__global__ void ActivateKernel(Activation act, const T* x, int64_t n, T* y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float v = ToF(x[i]);
    y[i] = FromF<T>(act == Activation::kGelu ? 0.5f * v * (1.f + erff(v * 0.70710678118654752f))
                                             : tanhf(v));
  }
}
template <typename T>
__global__ void AddKernel(T* y, const T* r, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = FromF<T>(ToF(y[i]) + ToF(r[i]));
}
template <typename T>
__global__ void GatherKernel(const T* x, const int32_t* cu, int rows, int hidden, T* y) {
  const int b = blockIdx.x;
  int row = cu[b];
  if (row >= rows) row = rows - 1;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x)
    y[int64_t(b) * hidden + i] = x[int64_t(row) * hidden + i];
}
// One warp per row.
template <typename T>
__global__ void SoftmaxArgmaxKernel(const T* logits, int rows, int n, int ld, float* out_logits,
                                    float* probs, int32_t* argmax) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (row >= rows) return;
  const T* x = logits + int64_t(row) * ld;
  float best = -INFINITY;
  int best_i = 0x7fffffff;
  for (int i = lane; i < n; i += 32) {
    const float v = ToF(x[i]);
    if (out_logits) out_logits[int64_t(row) * n + i] = v;
    if (v > best || (v == best && i < best_i) || best_i == 0x7fffffff) { best = v; best_i = i; }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, best_i, o);
    if (ov > best || (ov == best && oi < best_i)) { best = ov; best_i = oi; }
  }
  if (argmax && lane == 0) argmax[row] = best_i;
  if (!probs) return;
  float sum = 0.f;
  for (int i = lane; i < n; i += 32) sum += __expf(ToF(x[i]) - best);
  sum = WarpSum(sum);
  const float inv = 1.f / sum;
  for (int i = lane; i < n; i += 32) probs[int64_t(row) * n + i] = __expf(ToF(x[i]) - best) * inv;
}

void CheckN(int64_t n, const char* who) {
  if (n < 0) throw Error(std::string(who) + ": negative element count " + std::to_string(n));
}

}  // namespace

void ConvertFromF32(const float* src, int64_t n, DType t, void* dst, cudaStream_t s) {
  CheckN(n, "ConvertFromF32");
  if (n == 0) return;
  DispatchDType(t, [&](auto tag) {
    using T = decltype(tag);
    FromF32Kernel<T><<<GridFor(n, 256), 256, 0, s>>>(src, n, static_cast<T*>(dst));
  });
  CUDA_CHECK_LAUNCH();
}

void ConvertToF32(const void* src, DType t, int64_t n, float* dst, cudaStream_t s) {
  CheckN(n, "ConvertToF32");
  if (n == 0) return;
  DispatchDType(t, [&](auto tag) {
    using T = decltype(tag);
    ToF32Kernel<T><<<GridFor(n, 256), 256, 0, s>>>(static_cast<const T*>(src), n, dst);
  });
  CUDA_CHECK_LAUNCH();
}

void TransposeConvert(const float* src, int K, int N, DType t, void* dst, cudaStream_t s) {
  if (K <= 0 || N <= 0) {
    throw Error("TransposeConvert: need K, N > 0, got " + std::to_string(K) + ", " +
                std::to_string(N));
  }
  DispatchDType(t, [&](auto tag) {
    using T = decltype(tag);
    TransposeKernel<T><<<dim3((N + 31) / 32, (K + 31) / 32), dim3(32, 8), 0, s>>>(
        src, K, N, static_cast<T*>(dst));
  });
  CUDA_CHECK_LAUNCH();
}

void FillRandom(DType t, void* dst, int64_t n, uint32_t seed, float scale, cudaStream_t s) {
  CheckN(n, "FillRandom");
  if (n == 0) return;
  DispatchDType(t, [&](auto tag) {
    using T = decltype(tag);
    FillKernel<T><<<GridFor(n, 256), 256, 0, s>>>(static_cast<T*>(dst), n, seed, scale);
  });
  CUDA_CHECK_LAUNCH();
}

void Activate(Activation act, DType t, const void* x, int64_t n, void* y, cudaStream_t s) {
  CheckN(n, "Activate");
  if (n == 0) return;
  DispatchDType(t, [&](auto tag) {
    using T = decltype(tag);
    ActivateKernel<T><<<GridFor(n, 256), 256, 0, s>>>(act, static_cast<const T*>(x), n,
                                                        static_cast<T*>(y));
  });
  CUDA_CHECK_LAUNCH();
}

void AddInPlace(DType t, void* y, const void* r, int64_t n, cudaStream_t s) {
  CheckN(n, "AddInPlace");
  if (n == 0) return;
  DispatchDType(t, [&](auto tag) {
    using T = decltype(tag);
    AddKernel<T><<<GridFor(n, 256), 256, 0, s>>>(static_cast<T*>(y), static_cast<const T*>(r), n);
  });
  CUDA_CHECK_LAUNCH();
}

void GatherFirstToken(DType t, const void* x, const int32_t* cu, int batch, int rows, int hidden,
                      void* y, cudaStream_t s) {
  if (batch < 0 || rows < 1 || hidden < 1) {
    throw Error("GatherFirstToken: need batch >= 0, rows >= 1, hidden >= 1, got " +
                std::to_string(batch) + ", " + std::to_string(rows) + ", " +
                std::to_string(hidden));
  }
  if (batch == 0) return;
  DispatchDType(t, [&](auto tag) {
    using T = decltype(tag);
    GatherKernel<T><<<batch, 128, 0, s>>>(static_cast<const T*>(x), cu, rows, hidden,
                                           static_cast<T*>(y));
  });
  CUDA_CHECK_LAUNCH();
}

void SoftmaxArgmax(DType t, const void* logits, int rows, int n, int ld, float* logits_f32,
                   float* probs, int32_t* argmax, cudaStream_t s) {
  if (rows < 0 || n < 1 || ld < n) {
    throw Error("SoftmaxArgmax: need rows >= 0, n >= 1, ld >= n, got " + std::to_string(rows) +
                ", " + std::to_string(n) + ", " + std::to_string(ld));
  }
  if (rows == 0) return;
  DispatchDType(t, [&](auto tag) {
    using T = decltype(tag);
    SoftmaxArgmaxKernel<T><<<(rows + 3) / 4, 128, 0, s>>>(static_cast<const T*>(logits), rows, n,
                                                          ld, logits_f32, probs, argmax);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace hotline::engine::cuda
