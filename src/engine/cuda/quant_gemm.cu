// INT8 / FP8 GEMMs with scales folded into the epilogue (see quant_gemm.h).
#include "engine/cuda/quant_gemm.h"

#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/error.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device_util.cuh"
#include "engine/cuda/fp8_gemm_sm90.h"

namespace hotline::engine::cuda {
namespace {

template <typename T, bool kFp8>
__global__ void QuantizeKernel(const T* x, int64_t n, float x_scale, uint8_t* xq) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    xq[i] = Quantize8<kFp8>(ToF(x[i]) / x_scale);  // IEEE division: the host can replay it
  }
}

// The same, 8 elements per thread (16/32-byte loads, one 8-byte store): n8 = n / 8 groups, x and
// xq aligned to the group size (the caller checks).
template <typename T, bool kFp8>
__global__ void QuantizeKernel8(const T* __restrict__ x, int64_t n8, float x_scale,
                                uint8_t* __restrict__ xq) {
  struct alignas(8 * sizeof(T)) Vec { T v[8]; };
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n8;
       i += int64_t(gridDim.x) * blockDim.x) {
    const Vec in = reinterpret_cast<const Vec*>(x)[i];
    uint64_t out = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j)
      out |= uint64_t(Quantize8<kFp8>(ToF(in.v[j]) / x_scale)) << (8 * j);
    reinterpret_cast<uint64_t*>(xq)[i] = out;
  }
}

// y[m][n] = act(acc[m][n] * scale[n] + bias[n]) (+ residual[m][n]); residual may alias y.
template <typename AccT, typename OutT>
__global__ void DequantEpilogueKernel(const AccT* __restrict__ acc, int M, int N,
                                      const float* __restrict__ scale,
                                      const float* __restrict__ bias, int act,
                                      const OutT* residual, OutT* y) {
  const int64_t total = int64_t(M) * N;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int n = int(i % N);
    float v = float(acc[i]) * scale[n];
    if (bias) v += bias[n];
    v = ApplyAct(v, act);
    if (residual) v += ToF(residual[i]);
    y[i] = FromF<OutT>(v);
  }
}

// Host quantisation of one value (same rounding as the device: nearest-even / E4M3 satfinite).
uint8_t HostQuantize(float v, QuantType q) {
  if (q == QuantType::kFp8E4M3) return uint8_t(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
  float r = std::nearbyint(v);
  r = std::max(-127.f, std::min(127.f, r));
  return uint8_t(int8_t(r));
}

// Process-wide choices per problem (algorithms depend on the shapes and types only, never on the
// weights or scale pointers): the chosen algorithm, its time and how it was chosen (for path()).
struct TuneChoice {
  cublasLtMatmulAlgo_t algo;
  float ms = -1.f;
  int candidates = 0;
  QuantTuneSource source = QuantTuneSource::kTimed;  // how it was first chosen in this process
};
std::mutex& TuneMutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, TuneChoice>& TuneMap() {
  static std::map<std::string, TuneChoice> m;
  return m;
}
// One launch on a private stream, waited for: whether `enqueue` (false: refused at launch) runs
// here. Clears the non-sticky error a refused launch leaves behind.
bool RunsOnce(const std::function<bool(cudaStream_t)>& enqueue) {
  cudaStream_t st = nullptr;
  if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  const bool ran = enqueue(st) && cudaStreamSynchronize(st) == cudaSuccess;
  cudaStreamDestroy(st);
  cudaGetLastError();
  return ran;
}
// Rows from which TryPrepare searches beyond the heuristic's candidates (KernelVariants::
// gemm_search): long GEMMs, where a few percent pay for the search (about 1 s per GEMM problem
// on an H200: the bench's warm-up grew 6.3 s for the 6 problems it searched).
constexpr int kWideSearchRows = 4096;

// The problem's key in a GemmTuningCache (and so in a timing-cache file): "quant|" keeps it apart
// from Gemm's keys ("MxNxK ..."). No device ordinal: the file's header already names the GPU
// model, SM and cuBLASLt version, which is what decides the algorithms, so a file written on
// device 0 serves an encoder on device 1 of the same model (TuneMap, per process, adds it).
// A choice made without tuning is kept under its own key ("|heuristic"), never as a tuned one.
std::string TuneKey(QuantType q, DType out, GemmEpilogue e, int M, int N, int K, bool fused,
                    bool beta_one, bool q_out, WeightScaling sc, bool fast_accum, bool wide,
                    bool tune, size_t workspace_bytes) {
  return std::string("quant|") + QuantTypeName(q) + "|" + DTypeName(out) + "|" +
         GemmEpilogueName(e) + "|" + std::to_string(M) + "x" + std::to_string(N) + "x" +
         std::to_string(K) + (fused ? "|fused" : "|acc") + (beta_one ? "|res" : "") +
         (q_out ? "|e4m3 out" : "") + "|" + WeightScalingName(sc) +
         (fast_accum ? "|fast accum" : "") + (wide ? "|wide" : "") + (tune ? "" : "|heuristic") +
         "|ws" + std::to_string(workspace_bytes);  // the candidates depend on the workspace
}

}  // namespace

const char* QuantTypeName(QuantType q) { return q == QuantType::kInt8 ? "int8" : "fp8_e4m3"; }

const char* WeightScalingName(WeightScaling s) {
  return s == WeightScaling::kPerTensor ? "per_tensor" : "per_channel";
}

WeightScaling ParseWeightScaling(const std::string& name) {
  if (name == "per_tensor" || name == "tensor") return WeightScaling::kPerTensor;
  if (name == "per_channel" || name == "channel") return WeightScaling::kPerChannel;
  throw Error("weight scaling: expected per_tensor or per_channel, got '" + name + "'");
}
const char* QuantTuneSourceName(QuantTuneSource s) {
  switch (s) {
    case QuantTuneSource::kNone: return "not prepared";
    case QuantTuneSource::kTimed: return "timed";
    case QuantTuneSource::kProcess: return "reused";
    case QuantTuneSource::kCache: return "timing cache";
    case QuantTuneSource::kHeuristic: return "heuristic, untimed";
  }
  return "?";
}

float QuantMax(QuantType q) { return q == QuantType::kInt8 ? 127.f : 448.f; }

bool QuantTypeSupported(QuantType q) {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  const int cc = major * 10 + minor;
  return q == QuantType::kInt8 ? cc >= 75 : cc >= 89;
}

void QuantizeActivations(DType src, const void* x, int64_t n, float x_scale, QuantType q,
                         void* xq, cudaStream_t s) {
  if (n < 0 || !(x_scale > 0.f) || (n > 0 && (!x || !xq))) {
    throw Error("QuantizeActivations: need n >= 0, x_scale > 0 and non-null buffers, got n=" +
                std::to_string(n) + " x_scale=" + std::to_string(x_scale));
  }
  if (n == 0) return;
  DispatchDType(src, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x);
    uint8_t* o = static_cast<uint8_t*>(xq);
    const bool vec = n % 8 == 0 && reinterpret_cast<uintptr_t>(x) % (8 * sizeof(T)) == 0 &&
                     reinterpret_cast<uintptr_t>(xq) % 8 == 0;
    if (vec) {
      const int64_t n8 = n / 8;
      if (q == QuantType::kFp8E4M3)
        QuantizeKernel8<T, true><<<GridFor(n8, 256), 256, 0, s>>>(xp, n8, x_scale, o);
      else
        QuantizeKernel8<T, false><<<GridFor(n8, 256), 256, 0, s>>>(xp, n8, x_scale, o);
    } else if (q == QuantType::kFp8E4M3) {
      QuantizeKernel<T, true><<<GridFor(n, 256), 256, 0, s>>>(xp, n, x_scale, o);
    } else {
      QuantizeKernel<T, false><<<GridFor(n, 256), 256, 0, s>>>(xp, n, x_scale, o);
    }
  });
  CUDA_CHECK_LAUNCH();
}

QuantGemm::QuantGemm(const float* weight_kn, int K, int N, const float* bias,
                     GemmEpilogue epilogue, QuantType q, float x_scale, DType out_dtype,
                     int max_rows, WeightScaling scaling, bool fast_accum)
    : K_(K), N_(N), epilogue_(epilogue), q_(q), x_scale_(x_scale), out_(out_dtype),
      max_rows_(max_rows), scaling_(scaling), fast_accum_(fast_accum) {
  if (max_rows < 1 || max_rows > kMaxRows) {
    throw Error("QuantGemm: max_rows must be in [1, " + std::to_string(kMaxRows) + "], got " +
                std::to_string(max_rows));
  }
  if (K <= 0 || N <= 0 || K % 16 || N % 16 || !weight_kn) {
    throw Error("QuantGemm: K and N must be positive multiples of 16 and weights given, got K=" +
                std::to_string(K) + " N=" + std::to_string(N), Code::kUnimplemented);
  }
  if (!(x_scale > 0.f) || !std::isfinite(x_scale)) {
    throw Error("QuantGemm: activation scale must be positive and finite, got " +
                std::to_string(x_scale));
  }
  if (!QuantTypeSupported(q)) {
    throw Error(std::string("QuantGemm: ") + QuantTypeName(q) +
                " GEMMs need a newer GPU (INT8: sm_75+, FP8: sm_89+)", Code::kUnimplemented);
  }
  if (epilogue_ == GemmEpilogue::kNone && bias) epilogue_ = GemmEpilogue::kBias;
  if (fast_accum && q != QuantType::kFp8E4M3) {
    throw Error("QuantGemm: fast accumulation is an FP8 option (int8 accumulates exactly)");
  }
  const float qmax = QuantMax(q);
  // Symmetric weight scales, per output channel or one for the whole matrix; weights transposed
  // to [N, K].
  w_scale_host_.assign(N, 1.f);
  float tensor_amax = 0.f;
  // std::max drops a NaN, so every weight is checked on its own.
  for (size_t i = 0; i < size_t(K) * N; ++i) {
    if (!std::isfinite(weight_kn[i])) {
      throw Error("QuantGemm: the weights hold a non-finite value");
    }
  }
  if (scaling == WeightScaling::kPerTensor) {
    for (size_t i = 0; i < size_t(K) * N; ++i)
      tensor_amax = std::max(tensor_amax, std::fabs(weight_kn[i]));
  }
  std::vector<uint8_t> wq(size_t(N) * K);
  for (int n = 0; n < N; ++n) {
    float amax = tensor_amax;
    if (scaling == WeightScaling::kPerChannel) {
      for (int k = 0; k < K; ++k) amax = std::max(amax, std::fabs(weight_kn[size_t(k) * N + n]));
    }
    const float sc = amax > 0.f ? amax / qmax : 1.f;
    w_scale_host_[n] = sc;
    for (int k = 0; k < K; ++k)
      wq[size_t(n) * K + k] = HostQuantize(weight_kn[size_t(k) * N + n] / sc, q);
  }
  std::vector<float> out_scale(N), xs(max_rows, x_scale), bf(N, 0.f);
  for (int n = 0; n < N; ++n) out_scale[n] = x_scale * w_scale_host_[n];
  const bool has_bias = epilogue_ != GemmEpilogue::kNone;
  if (bias && has_bias) std::copy(bias, bias + N, bf.begin());
  try {
    CUDA_CHECK(cudaMalloc(&w_, wq.size()));
    CUDA_CHECK(cudaMemcpy(w_, wq.data(), wq.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMalloc(&w_scale_, N * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(w_scale_, w_scale_host_.data(), N * sizeof(float),
                          cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMalloc(&out_scale_, N * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(out_scale_, out_scale.data(), N * sizeof(float),
                          cudaMemcpyHostToDevice));
    if (q == QuantType::kFp8E4M3 && scaling == WeightScaling::kPerChannel) {
      CUDA_CHECK(cudaMalloc(&x_scale_vec_, xs.size() * sizeof(float)));
      CUDA_CHECK(cudaMemcpy(x_scale_vec_, xs.data(), xs.size() * sizeof(float),
                            cudaMemcpyHostToDevice));
    }
    if (q == QuantType::kFp8E4M3 && scaling == WeightScaling::kPerTensor) {
      // A's and B's scale each at the start of its own 256-byte block (kScalarStride floats
      // apart): cuBLASLt's FP8 kernels may load a scale with a wide aligned access.
      std::vector<float> sv(2 * kScalarStride, 0.f);
      sv[0] = w_scale_host_[0];
      sv[kScalarStride] = x_scale;
      CUDA_CHECK(cudaMalloc(&scalars_, sv.size() * sizeof(float)));
      CUDA_CHECK(cudaMemcpy(scalars_, sv.data(), sv.size() * sizeof(float),
                            cudaMemcpyHostToDevice));
    }
    if (has_bias) {
      CUDA_CHECK(cudaMalloc(&bias_f32_, N * sizeof(float)));
      CUDA_CHECK(cudaMemcpy(bias_f32_, bf.data(), N * sizeof(float), cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMalloc(&bias_, N * DTypeSize(out_)));
      ConvertFromF32(bias_f32_, N, out_, bias_, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
    }
  } catch (...) {
    FreeDevice();
    throw;
  }
}

QuantGemm::QuantGemm(const QuantGemm& parent, int n0, int n)
    : K_(parent.K_), N_(n), epilogue_(parent.epilogue_), q_(parent.q_),
      x_scale_(parent.x_scale_), out_(parent.out_), scaling_(parent.scaling_),
      fast_accum_(parent.fast_accum_), owner_(false), max_rows_(parent.max_rows_),
      cache_(parent.cache_), tune_(parent.tune_) {
  if (n0 < 0 || n <= 0 || n0 % 16 || n % 16 || n0 + n > parent.N_) {
    throw Error("QuantGemm view: columns [" + std::to_string(n0) + ", " + std::to_string(n0 + n) +
                ") must be multiples of 16 within the parent's " + std::to_string(parent.N_));
  }
  if (parent.y_scale_inv_) {
    throw Error("QuantGemm view: the parent writes a quantised output (not supported)");
  }
  w_scale_host_.assign(parent.w_scale_host_.begin() + n0, parent.w_scale_host_.begin() + n0 + n);
  // [N, K] weights: columns n0.. are rows n0.. of the transposed copy; every [N] vector offsets.
  w_ = static_cast<char*>(parent.w_) + size_t(n0) * K_;
  w_scale_ = parent.w_scale_ + n0;
  out_scale_ = parent.out_scale_ + n0;
  x_scale_vec_ = parent.x_scale_vec_;  // per row (token): shared as is
  bias_ = parent.bias_ ? static_cast<char*>(parent.bias_) + size_t(n0) * DTypeSize(out_)
                       : nullptr;
  bias_f32_ = parent.bias_f32_ ? parent.bias_f32_ + n0 : nullptr;
  scalars_ = parent.scalars_;  // per tensor: the one weight scale and x_scale
}

QuantGemm::~QuantGemm() {
  for (auto& [k, p] : prepared_) Destroy(&p);
  if (owner_) FreeDevice();
}

void QuantGemm::FreeDevice() {
  for (void* p : {static_cast<void*>(w_), static_cast<void*>(w_scale_),
                  static_cast<void*>(out_scale_), static_cast<void*>(x_scale_vec_),
                  static_cast<void*>(bias_f32_), static_cast<void*>(bias_),
                  static_cast<void*>(y_scale_inv_), static_cast<void*>(scalars_)}) {
    cudaFree(p);  // null is a no-op
  }
}

void QuantGemm::Destroy(Prepared* p) {
  if (p->desc) cublasLtMatmulDescDestroy(p->desc);
  for (auto* l : {p->a, p->b, p->c, p->d})
    if (l) cublasLtMatrixLayoutDestroy(l);
  *p = Prepared{};
}

size_t QuantGemm::weight_bytes() const {
  if (!owner_) return 0;
  return size_t(N_) * K_ + size_t(N_) * 4 * 2 + (bias_ ? size_t(N_) * (4 + DTypeSize(out_)) : 0) +
         (x_scale_vec_ ? size_t(max_rows_) * 4 : 0) + (scalars_ ? 2 * kScalarStride * 4 : 0);
}

namespace {

struct WideSearchResult {
  cublasLtMatmulAlgo_t algo;
  float ms = -1.f;
  int timed = 0;
};

// QuantGemm::TryPrepare's search around the heuristic's timed candidates (`heuristic`: time,
// algorithm). Stage 1: every tile of the best candidate's algorithm (its other settings kept);
// stage 2: kernel options 0-7, every cluster shape and both swizzles on the three best tiles and
// the heuristic's two best. Screened by TimeInGraph(4 launches, 1 replay); the four fastest
// re-timed with (10, 3), as the heuristic's candidates are. At most kMaxTimed screenings.
template <typename Prep, typename TimeFn>
WideSearchResult WideSearch(LtWorkspace& ws, const Prep& p,
                            std::vector<std::pair<float, cublasLtMatmulAlgo_t>> heuristic,
                            const TimeFn& time_algo) {
  constexpr int kMaxTimed = 480;
  WideSearchResult r;
  if (heuristic.empty()) return r;
  auto by_time = [](const auto& a, const auto& b) { return a.first < b.first; };
  std::sort(heuristic.begin(), heuristic.end(), by_time);
  std::vector<std::pair<float, cublasLtMatmulAlgo_t>> screened;
  std::vector<cublasLtMatmulAlgo_t> seen;  // each configuration screened once
  auto same = [](const cublasLtMatmulAlgo_t& a, const cublasLtMatmulAlgo_t& b) {
    return std::memcmp(&a, &b, sizeof(a)) == 0;
  };
  auto accepted = [&](const cublasLtMatmulAlgo_t& a) {
    cublasLtMatmulHeuristicResult_t h;
    return cublasLtMatmulAlgoCheck(ws.handle(), p.desc, p.a, p.b, p.c, p.d, &a, &h) ==
               CUBLAS_STATUS_SUCCESS &&
           h.workspaceSize <= ws.workspace_bytes();
  };
  auto screen = [&](const cublasLtMatmulAlgo_t& a) {
    for (const auto& b : seen)
      if (same(a, b)) return -1.f;
    seen.push_back(a);
    if (r.timed >= kMaxTimed || !accepted(a)) return -1.f;
    ++r.timed;
    const float ms = time_algo(a, 4, 1);
    if (ms > 0) screened.push_back({ms, a});
    return ms;
  };
  // Stage 1: the tiles.
  const cublasLtMatmulAlgo_t seed = heuristic.front().second;
  std::vector<std::pair<float, cublasLtMatmulAlgo_t>> tiles;
  for (int tile : AlgoCapList<int>(seed, CUBLASLT_ALGO_CAP_TILE_IDS)) {
    cublasLtMatmulAlgo_t a = seed;
    if (!SetAlgoConfig(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, uint32_t(tile))) continue;
    const float ms = screen(a);
    if (ms > 0) tiles.push_back({ms, a});
  }
  std::sort(tiles.begin(), tiles.end(), by_time);
  std::vector<cublasLtMatmulAlgo_t> seeds;
  auto add_seed = [&](const cublasLtMatmulAlgo_t& a) {
    for (const auto& b : seeds)
      if (same(a, b)) return;
    seeds.push_back(a);
  };
  for (size_t i = 0; i < tiles.size() && i < 3; ++i) add_seed(tiles[i].second);
  for (size_t i = 0; i < heuristic.size() && i < 2; ++i) add_seed(heuristic[i].second);
  // Stage 2: options, cluster shapes, swizzles.
  for (const cublasLtMatmulAlgo_t& s : seeds) {
    const int custom_max = AlgoCap(s, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX);
    const int swizzle = AlgoCap(s, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT);
    for (int custom = 0; custom <= std::min(custom_max, 7); ++custom)
      for (int cl = 0; cl < int(CUBLASLT_CLUSTER_SHAPE_END); ++cl)
        for (int sw = 0; sw <= (swizzle ? 1 : 0); ++sw) {
          cublasLtMatmulAlgo_t a = s;
          if (SetAlgoConfig(&a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, uint32_t(custom)) &&
              SetAlgoConfig(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, uint16_t(cl)) &&
              SetAlgoConfig(&a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, uint32_t(sw)))
            screen(a);
        }
  }
  std::sort(screened.begin(), screened.end(), by_time);
  for (size_t i = 0; i < screened.size() && i < 4; ++i) {
    const float ms = time_algo(screened[i].second, 10, 3);
    if (ms > 0 && (r.ms < 0 || ms < r.ms)) {
      r.ms = ms;
      r.algo = screened[i].second;
    }
  }
  return r;
}

}  // namespace

bool QuantGemm::TryPrepare(int M, bool fused, bool beta_one, bool q_out, LtWorkspace& ws,
                           Prepared* p, std::string* why) {
  const bool int8 = q_ == QuantType::kInt8;
  const cudaDataType_t in_t = int8 ? CUDA_R_8I : CUDA_R_8F_E4M3;
  const cudaDataType_t acc_t = int8 ? CUDA_R_32I : CUDA_R_32F;
  const cudaDataType_t cd_t = fused ? CudaType(out_) : acc_t;
  const cudaDataType_t d_t = q_out ? CUDA_R_8F_E4M3 : cd_t;
  // Why a path is refused (kept for path(): which step failed and cuBLASLt's first bad status).
  const char* stage = "descriptor";
  int first_bad = CUBLAS_STATUS_SUCCESS;
  auto ok = [&first_bad](cublasStatus_t st) {
    if (st != CUBLAS_STATUS_SUCCESS && first_bad == CUBLAS_STATUS_SUCCESS) first_bad = int(st);
    return st == CUBLAS_STATUS_SUCCESS;
  };
  bool good = ok(cublasLtMatmulDescCreate(&p->desc, int8 ? CUBLAS_COMPUTE_32I : CUBLAS_COMPUTE_32F,
                                          int8 ? CUDA_R_32I : CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  good = good && ok(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                                   sizeof(ta)));
  good = good && ok(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                                   sizeof(tb)));
  if (good && fused && scaling_ == WeightScaling::kPerTensor) {
    // The plain FP8 GEMM: scalar scales (default SCALAR_32F mode), D = a * b * (A . B).
    float* a_scale = scalars_;
    float* b_scale = scalars_ + kScalarStride;
    good = ok(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                             &a_scale, sizeof(a_scale))) &&
           ok(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                             &b_scale, sizeof(b_scale)));
  } else if (good && fused) {
    // Per-channel weight scales x per-token activation scales (all equal: per tensor).
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    good = ok(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode,
                                             sizeof(mode))) &&
           ok(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode,
                                             sizeof(mode))) &&
           ok(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                             &w_scale_, sizeof(w_scale_))) &&
           ok(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                             &x_scale_vec_, sizeof(x_scale_vec_)));
  }
  if (good && fused) {
    // CUBLASLT_MATMUL_DESC_FAST_ACCUM only when asked: Hopper's fast FP8 accumulation keeps ~14
    // bits over the whole K (up to ~2% error at K = 4096, reported by others), and the 981
    // TFLOP/s of PERFORMANCE.md were measured without it.
    if (fast_accum_) {
      const int8_t fa = 1;
      good = ok(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fa,
                                               sizeof(fa)));
    }
    if (good && q_out) {  // D in E4M3: D = epilogue(...) * (1 / y_scale), saturating
      const int32_t bias_t = CudaType(out_);
      good = ok(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER,
                                               &y_scale_inv_, sizeof(y_scale_inv_))) &&
             ok(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                               &bias_t, sizeof(bias_t)));
    }
    if (good && epilogue_ != GemmEpilogue::kNone) {
      const cublasLtEpilogue_t epi = epilogue_ == GemmEpilogue::kBiasGeluTanh
                                         ? CUBLASLT_EPILOGUE_GELU_BIAS
                                         : CUBLASLT_EPILOGUE_BIAS;
      good = ok(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                               sizeof(epi))) &&
             ok(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_,
                                               sizeof(bias_)));
    }
  }
  if (good) stage = "matrix layouts";
  good = good && ok(cublasLtMatrixLayoutCreate(&p->a, in_t, K_, N_, K_)) &&
         ok(cublasLtMatrixLayoutCreate(&p->b, in_t, K_, M, K_)) &&
         ok(cublasLtMatrixLayoutCreate(&p->c, cd_t, N_, M, N_)) &&
         ok(cublasLtMatrixLayoutCreate(&p->d, d_t, N_, M, N_));
  if (good) {
    cublasLtMatmulPreference_t pref = nullptr;
    good = ok(cublasLtMatmulPreferenceCreate(&pref));
    size_t wsb = ws.workspace_bytes();
    if (good) {
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                           sizeof(wsb));
      cublasLtMatmulHeuristicResult_t res[16];
      int n = 0;
      stage = "algorithm heuristic";
      good = ok(cublasLtMatmulAlgoGetHeuristic(ws.handle(), p->desc, p->a, p->b, p->c, p->d, pref,
                                               16, res, &n)) &&
             n > 0;
      cublasLtMatmulPreferenceDestroy(pref);
      if (good) p->algo = res[0].algo;
      // The wide search (KernelVariants::gemm_search), read once: the key and the search agree.
      // Without tuning (SetTuning): the heuristic's first algorithm that runs, no search.
      const bool wide = tune_ && fused && !int8 && M >= kWideSearchRows &&
                        GetKernelVariants().gemm_search >= 1;
      const std::string key = TuneKey(q_, out_, epilogue_, M, N_, K_, fused, beta_one, q_out,
                                      scaling_, fast_accum_, wide, tune_, ws.workspace_bytes());
      int dev = 0;
      cudaGetDevice(&dev);
      const std::string map_key = std::to_string(dev) + "|" + key;
      auto entry = [&] {  // the choice as the timing cache keeps it
        GemmTuningCache::Entry e;
        e.algo = p->algo;
        e.ms = p->ms;
        e.candidates = p->candidates;
        e.desc = DescribeAlgo(p->algo);  // as the file's loader describes it
        return e;
      };
      bool chosen = false;
      if (good) {
        // Same problem chosen before in this process (e.g. the same GEMM in another layer).
        std::lock_guard<std::mutex> lock(TuneMutex());
        auto it = TuneMap().find(map_key);
        if (it != TuneMap().end()) {
          p->algo = it->second.algo;
          p->ms = it->second.ms;
          p->candidates = it->second.candidates;
          p->source = it->second.source == QuantTuneSource::kHeuristic
                          ? QuantTuneSource::kHeuristic
                          : QuantTuneSource::kProcess;
          chosen = true;
        }
      }
      if (good && chosen && cache_) {
        // Chosen for another cache (e.g. another encoder in this process): this cache's file
        // gets the entry too, so a later process finds every problem this one prepared.
        GemmTuningCache::Entry e;
        if (!cache_->Find(key, &e)) cache_->Put(key, entry());
      }
      // The timing cache (e.g. loaded from a file): used only once cuBLASLt accepts its
      // algorithm for this very problem and it runs (checked below).
      GemmTuningCache::Entry stored;
      const bool in_cache = good && !chosen && cache_ && cache_->Find(key, &stored);
      if (good && !chosen) {
        // Time the heuristic's candidates by graph replays on scratch data (random bytes: any
        // pattern is a valid int8; speed does not depend on the values' meaning). A problem
        // none of whose candidates runs is refused here, so Prepare falls back to another path
        // instead of Run failing later.
        const size_t out_es = fused ? DTypeSize(out_) : 4;
        void *xq = nullptr, *yb = nullptr;
        struct FreeOnExit {  // also when a timing throws
          void** a;
          void** b;
          ~FreeOnExit() {
            cudaFree(*a);  // null is a no-op
            cudaFree(*b);
          }
        } free_on_exit{&xq, &yb};
        // One launch as Run makes it (C: for an E4M3 D, not D itself; see Run).
        auto launch = [&](const cublasLtMatmulAlgo_t& algo, cudaStream_t st) {
          const float fa = 1.f, fb = beta_one ? 1.f : 0.f;
          const int32_t ia = 1, ib = 0;
          const void* alpha = int8 ? static_cast<const void*>(&ia) : &fa;
          const void* beta = int8 ? static_cast<const void*>(&ib) : &fb;
          return cublasLtMatmul(ws.handle(), p->desc, alpha, w_, p->a, xq, p->b, beta,
                                q_out ? xq : yb, p->c, yb, p->d, &algo, ws.workspace(),
                                ws.workspace_bytes(), st);
        };
        cublasStatus_t run_status = CUBLAS_STATUS_SUCCESS;  // the first failing launch's
        // Whether the algorithm runs here (RunsOnce), keeping cuBLASLt's first refusal.
        auto runs_once = [&](const cublasLtMatmulAlgo_t& algo) {
          return RunsOnce([&](cudaStream_t st) {
            const cublasStatus_t rs = launch(algo, st);
            if (rs != CUBLAS_STATUS_SUCCESS && run_status == CUBLAS_STATUS_SUCCESS)
              run_status = rs;
            return rs == CUBLAS_STATUS_SUCCESS;
          });
        };
        if (cudaMalloc(&xq, size_t(M) * K_) == cudaSuccess &&
            cudaMalloc(&yb, size_t(M) * N_ * out_es) == cudaSuccess) {
          FillRandom(DType::kF16, xq, int64_t(M) * K_ / 2, 0x51u, 1.f, nullptr);
          FillRandom(fused ? out_ : DType::kF32, yb, int64_t(M) * N_, 0x52u, 1.f, nullptr);
          if (cudaDeviceSynchronize() == cudaSuccess) {
            if (in_cache) {
              cublasLtMatmulHeuristicResult_t h{};
              const bool accepted =
                  cublasLtMatmulAlgoCheck(ws.handle(), p->desc, p->a, p->b, p->c, p->d,
                                          &stored.algo, &h) == CUBLAS_STATUS_SUCCESS &&
                  h.workspaceSize <= ws.workspace_bytes();
              if (accepted && runs_once(stored.algo)) {
                p->algo = stored.algo;
                p->ms = stored.ms;
                p->candidates = stored.candidates;
                p->source = QuantTuneSource::kCache;
                chosen = true;
              } else {
                std::fprintf(stderr,
                             "hotline: QuantGemm: the timing cache's algorithm for %s %s; "
                             "choosing again\n",
                             key.c_str(),
                             accepted ? "failed to run" : "is not accepted for this problem");
                run_status = CUBLAS_STATUS_SUCCESS;  // the cache's failure is not the problem's
              }
            }
            if (!chosen && !tune_) {
              // No tuning (EncoderOptions::tune false): the heuristic's first algorithm that
              // runs, untimed, as Gemm takes its first without timing (one launch each, since
              // an offered FP8 algorithm may still fail to launch).
              for (int i = 0; i < n && !chosen; ++i) {
                if (runs_once(res[i].algo)) {
                  p->algo = res[i].algo;
                  p->ms = -1.f;
                  p->candidates = 0;
                  p->source = QuantTuneSource::kHeuristic;
                  chosen = true;
                }
              }
            } else if (!chosen) {
              float best = -1.f;
              std::vector<std::pair<float, cublasLtMatmulAlgo_t>> heuristic;  // timed, ran
              p->candidates = 0;
              for (int i = 0; i < n; ++i) {
                const float ms = TimeInGraph([&](cudaStream_t st) {
                  const cublasStatus_t rs = launch(res[i].algo, st);
                  if (rs != CUBLAS_STATUS_SUCCESS && run_status == CUBLAS_STATUS_SUCCESS)
                    run_status = rs;
                  return rs == CUBLAS_STATUS_SUCCESS;
                }, 10, 3);
                if (ms > 0) {
                  ++p->candidates;
                  heuristic.push_back({ms, res[i].algo});
                }
                if (ms > 0 && (best < 0 || ms < best)) {
                  best = ms;
                  p->algo = res[i].algo;
                }
              }
              p->ms = best;
              if (best > 0 && wide) {
                // The heuristic offers a handful of configurations; its best is often not the
                // fastest for our shapes (BERT-base at 8,192 rows on the H200: 1.6-6% per
                // GEMM, lt_pdl_probe.cu's enumeration). Search around it, as a TensorRT tactic
                // search does: every tile of its algorithm, then each of the best tiles' (and
                // the heuristic's two best's) kernel options, cluster shapes and swizzles; each
                // configuration cuBLASLt accepts for this problem is screened by a short graph
                // timing and the best few re-timed as the heuristic's were.
                auto time_algo = [&](const cublasLtMatmulAlgo_t& a, int iters, int reps) {
                  return TimeInGraph(
                      [&](cudaStream_t st) { return launch(a, st) == CUBLAS_STATUS_SUCCESS; },
                      iters, reps);
                };
                const WideSearchResult w = WideSearch(ws, *p, heuristic, time_algo);
                p->candidates += w.timed;
                if (w.ms > 0 && w.ms < best) {
                  best = w.ms;
                  p->ms = w.ms;
                  p->algo = w.algo;
                }
              }
              p->source = QuantTuneSource::kTimed;
              chosen = best > 0;
            }
            if (!chosen) {
              stage = "every offered algorithm failed to run";
              ok(run_status);  // cuBLASLt's answer to the launch, if it refused one (else a
                               // kernel or graph failure: "no algorithm")
              good = false;
            }
          }
        }
        cudaGetLastError();
        if (good && !chosen) {
          // No scratch for the timing (out of memory): the heuristic's first, untimed, kept
          // neither here nor in the cache, so a later Prepare chooses again.
          p->algo = res[0].algo;
          p->ms = -1.f;
          p->candidates = 0;
          p->source = QuantTuneSource::kHeuristic;
        }
        if (good && chosen) {
          {
            std::lock_guard<std::mutex> lock(TuneMutex());
            TuneMap()[map_key] = TuneChoice{p->algo, p->ms, p->candidates, p->source};
          }
          if (cache_ && p->source != QuantTuneSource::kCache) cache_->Put(key, entry());
        }
      }
    }
  }
  p->fused = fused;
  p->beta_one = beta_one;
  p->q_out = q_out;
  if (!good) {
    Destroy(p);
    if (!why->empty()) *why += "; ";
    *why += std::string(fused ? (q_out ? "fused e4m3-out" : "fused") : "scratch") +
               " path refused at " + stage +
               (first_bad != CUBLAS_STATUS_SUCCESS ? " (cublas status " +
                                                         std::to_string(first_bad) + ")"
                                                   : std::string(" (no algorithm)"));
  }
  return good;
}

OwnFp8GemmProblem QuantGemm::OwnProblem(OwnEpilogue e, const void* xq, int M, void* y,
                                        const void* residual) const {
  OwnFp8GemmProblem o;
  o.epilogue = e;
  o.w = w_;
  o.x = xq;
  o.bias = bias_f32_;
  o.a_scale = scalars_;  // as cuBLASLt's A and B scale pointers (TryPrepare)
  o.b_scale = scalars_ + kScalarStride;
  o.d_scale = y_scale_inv_;
  o.residual = residual;
  o.y = y;
  o.M = M;
  o.N = N_;
  o.K = K_;
  return o;
}

namespace {
// An own-GEMM choice as the tuning cache keeps it (GemmTuningCache::Entry::algo holds cuBLASLt's
// opaque algorithm; here its words carry a tag, the configuration and a hash of its name, so an
// entry from a build with other configurations is not taken for this one's).
constexpr uint64_t kOwnTag = 0x4f574e4650385f31ull;  // "OWNFP8_1"
uint64_t NameHash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}
cublasLtMatmulAlgo_t EncodeOwn(int config) {
  cublasLtMatmulAlgo_t a{};
  a.data[0] = kOwnTag;
  a.data[1] = uint64_t(int64_t(config));
  a.data[2] = config >= 0 ? NameHash(OwnFp8GemmConfigName(config)) : 0;
  return a;
}
// The configuration (>= 0), -1 for "cuBLASLt", or -2 for an entry this build cannot use.
int DecodeOwn(const cublasLtMatmulAlgo_t& a) {
  if (a.data[0] != kOwnTag) return -2;
  const int64_t c = int64_t(a.data[1]);
  if (c == -1) return -1;
  if (c < 0 || c >= OwnFp8GemmConfigs() || a.data[2] != NameHash(OwnFp8GemmConfigName(int(c))))
    return -2;
  return int(c);
}
}  // namespace

void QuantGemm::ChooseOwn(int M, LtWorkspace& ws, Prepared* p) {
  if (q_ != QuantType::kFp8E4M3 || scaling_ != WeightScaling::kPerTensor || !fast_accum_ ||
      !p->fused || !bias_f32_ || !tune_ || M < kWideSearchRows ||
      GetKernelVariants().own_gemm < 1 || !OwnFp8GemmAvailable())
    return;
  // The encoders' three per-tensor epilogues (fp8_gemm_sm90.h); anything else stays cuBLASLt's.
  OwnEpilogue oe;
  if (p->q_out && epilogue_ == GemmEpilogue::kBiasGeluTanh && y_scale_inv_)
    oe = OwnEpilogue::kGeluE4m3;
  else if (!p->q_out && out_ == DType::kF16 && epilogue_ == GemmEpilogue::kBias)
    oe = p->beta_one ? OwnEpilogue::kBiasResidualF16 : OwnEpilogue::kBiasF16;
  else
    return;
  // own_gemm 2 (tests, measurements): our fastest configuration even where cuBLASLt is faster.
  const bool forced = GetKernelVariants().own_gemm == 2;
  const std::string key =
      "own|" + TuneKey(q_, out_, epilogue_, M, N_, K_, true, p->beta_one, p->q_out, scaling_,
                       fast_accum_, GetKernelVariants().gemm_search >= 1, tune_,
                       ws.workspace_bytes()) +
      (forced ? "|forced" : "");
  int dev = 0;
  cudaGetDevice(&dev);
  const std::string map_key = std::to_string(dev) + "|" + key;
  auto take = [&](int c, float own_ms, float lt_ms, QuantTuneSource src) {
    if (c < 0) return;  // cuBLASLt stays
    p->own = c;
    p->lt_ms = lt_ms;
    p->ms = own_ms;
    p->source = src;
  };
  {  // Chosen before in this process (e.g. the same GEMM in another layer): no scratch, no timing.
    std::lock_guard<std::mutex> lock(TuneMutex());
    auto it = TuneMap().find(map_key);
    if (it != TuneMap().end()) {
      const int c = DecodeOwn(it->second.algo);
      take(c, it->second.ms, -1.f, QuantTuneSource::kProcess);
      if (c >= -1) {
        if (cache_) {
          GemmTuningCache::Entry e;
          if (!cache_->Find(key, &e)) {
            e.algo = it->second.algo;
            e.ms = it->second.ms;
            e.candidates = it->second.candidates;
            cache_->Put(key, e);
          }
        }
        return;
      }
    }
  }
  // Scratch operands of this problem's shape: the weights and scales are this GEMM's own (the
  // kernels read them where Run will), the activations random bytes (every byte is an E4M3
  // value or a NaN; the time does not depend on them), the output (and the residual, in place
  // as the encoders run it) a scratch.
  const size_t y_bytes = size_t(M) * N_ * (p->q_out ? 1 : DTypeSize(out_));
  DeviceBuffer xq(size_t(M) * K_), yb(y_bytes);
  FillRandom(DType::kF16, xq.p, int64_t(M) * K_ / 2, 0x61u, 1.f, nullptr);
  if (!p->q_out) FillRandom(out_, yb.p, int64_t(M) * N_, 0x62u, 1.f, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const OwnFp8GemmProblem prob = OwnProblem(oe, xq.p, M, yb.p, p->beta_one ? yb.p : nullptr);
  // cuBLASLt's chosen algorithm launched as Run launches it (C: the residual in place, else for
  // an E4M3 D another buffer it never reads).
  const float fa = 1.f, fb = p->beta_one ? 1.f : 0.f;
  auto lt_launch = [&](cudaStream_t st) {
    return cublasLtMatmul(ws.handle(), p->desc, &fa, w_, p->a, xq.p, p->b, &fb,
                          p->q_out ? xq.p : yb.p, p->c, yb.p, p->d, &p->algo, ws.workspace(),
                          ws.workspace_bytes(), st) == CUBLAS_STATUS_SUCCESS;
  };
  auto usable = [&](int c) {
    return OwnFp8GemmConfigEpilogue(c) == oe && OwnFp8GemmCheck(c, prob).empty() &&
           OwnFp8GemmWorkspaceBytes(c, prob) <= ws.workspace_bytes();
  };
  // Configuration c launched as Run launches it; false where CUTLASS refuses it.
  auto own_launch = [&](int c, cudaStream_t st) {
    try {
      OwnFp8GemmRun(c, prob, ws.workspace(), st);
    } catch (const Error&) {
      return false;
    }
    return true;
  };
  auto runs_once = [&](int c) {
    return RunsOnce([&](cudaStream_t st) { return own_launch(c, st); });
  };
  GemmTuningCache::Entry stored;
  if (cache_ && cache_->Find(key, &stored)) {
    const int c = DecodeOwn(stored.algo);
    if (c == -1 || (c >= 0 && usable(c) && runs_once(c))) {
      take(c, stored.ms, -1.f, QuantTuneSource::kCache);
      std::lock_guard<std::mutex> lock(TuneMutex());
      TuneMap()[map_key] = TuneChoice{stored.algo, stored.ms, stored.candidates,
                                      QuantTuneSource::kCache};
      return;
    }
    std::fprintf(stderr,
                 "hotline: QuantGemm: the timing cache's own-GEMM entry for %s is not usable by "
                 "this build; choosing again\n",
                 key.c_str());
  }
  // Time cuBLASLt's chosen algorithm and every configuration of ours, alike (graph replays).
  const float lt_ms = forced ? -1.f : TimeInGraph(lt_launch, 20, 3);
  int best = -1;
  float best_ms = lt_ms;
  int timed = 0;
  for (int c = 0; c < OwnFp8GemmConfigs(); ++c) {
    if (!usable(c) || !runs_once(c)) continue;
    const float ms = TimeInGraph([&](cudaStream_t st) { return own_launch(c, st); }, 20, 3);
    cudaGetLastError();
    if (ms <= 0) continue;
    ++timed;
    if (best_ms <= 0 || ms < best_ms) {
      best = c;
      best_ms = ms;
    }
  }
  if (lt_ms <= 0 && best < 0) return;  // nothing timed: cuBLASLt's choice stands, unrecorded
  // Re-time the winner against cuBLASLt once more, interleaved, so that one noisy screening
  // does not decide: the own kernel must win both.
  if (best >= 0 && lt_ms > 0) {
    const float again = TimeInGraph([&](cudaStream_t st) { return own_launch(best, st); }, 20, 3);
    const float lt_again = TimeInGraph(lt_launch, 20, 3);
    if (!(again > 0 && lt_again > 0 && again < lt_again)) best = -1;
  }
  take(best, best_ms, lt_ms, QuantTuneSource::kTimed);
  if (best >= 0) p->candidates += timed;
  const cublasLtMatmulAlgo_t enc = EncodeOwn(best);
  const float rec_ms = best >= 0 ? best_ms : lt_ms;
  {
    std::lock_guard<std::mutex> lock(TuneMutex());
    TuneMap()[map_key] = TuneChoice{enc, rec_ms, timed, QuantTuneSource::kTimed};
  }
  if (cache_) {
    GemmTuningCache::Entry e;
    e.algo = enc;
    e.ms = rec_ms;
    e.candidates = timed;
    e.desc = best >= 0 ? "own " + OwnFp8GemmConfigName(best) : "own: cuBLASLt faster";
    cache_->Put(key, e);
  }
}

void QuantGemm::Prepare(int M, bool with_residual, LtWorkspace& ws, cudaStream_t) {
  if (M <= 0 || M > max_rows_) {
    throw Error("QuantGemm: M must be in [1, " + std::to_string(max_rows_) + "], got " +
                std::to_string(M));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (prepared_.count({M, with_residual})) return;
  }
  // Chosen without holding mu_: the timings take about a second with the wide search, and
  // other contexts' Run on prepared row counts must not wait for them. TryPrepare reads only
  // what construction, SetQuantisedOutput and SetTuning set, the process-wide TuneMap under its
  // lock and the (thread-safe) tuning cache.
  Prepared p;
  // cuBLASLt's epilogue covers bias and the tanh GELU; exact GELU and tanh, and a residual after
  // an activation, take our epilogue.
  // Fused only into FP16/BF16 (its bias vector then has the output's type, which we upload).
  const bool act_ok = out_ != DType::kF32 &&
                      (epilogue_ == GemmEpilogue::kNone || epilogue_ == GemmEpilogue::kBias ||
                       (epilogue_ == GemmEpilogue::kBiasGeluTanh && !with_residual));
  bool done = false;
  std::string refused;  // why the preferred paths were refused (TryPrepare resets p on refusal)
  if (q_ == QuantType::kFp8E4M3 && act_ok && y_scale_inv_ && !with_residual)
    done = TryPrepare(M, true, false, true, ws, &p, &refused);
  if (!done && q_ == QuantType::kFp8E4M3 && act_ok)
    done = TryPrepare(M, true, with_residual, false, ws, &p, &refused);
  if (!done) done = TryPrepare(M, false, false, false, ws, &p, &refused);
  if (!done) {
    throw Error(std::string("cuBLASLt offers no ") + QuantTypeName(q_) + " GEMM for M=" +
                std::to_string(M) + " K=" + std::to_string(K_) + " N=" + std::to_string(N_) +
                " on this GPU: " + refused, Code::kUnimplemented);
  }
  p.refused = std::move(refused);
  if (p.fused) {
    // Our own kernels are a faster alternative, never a requirement: when their timing cannot
    // run (e.g. no memory for its scratch), cuBLASLt's choice stands, said on stderr.
    try {
      ChooseOwn(M, ws, &p);
    } catch (const Error& e) {
      p.own = -1;
      std::fprintf(stderr, "hotline: QuantGemm: own FP8 GEMM not timed for M=%d (%s); cuBLASLt\n",
                   M, e.what());
      cudaGetLastError();
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!prepared_.emplace(std::make_pair(M, with_residual), p).second) {
    Destroy(&p);  // another thread prepared the same row count meanwhile: keep its choice
  }
}

size_t QuantGemm::AccBytes(int M) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (bool r : {false, true}) {
    auto it = prepared_.find({M, r});
    if (it != prepared_.end() && !it->second.fused) return size_t(M) * N_ * 4;
  }
  return 0;
}

bool QuantGemm::Fused(int M, bool with_residual) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = prepared_.find({M, with_residual});
  return it != prepared_.end() && it->second.fused;
}

bool QuantGemm::QuantisedOutput(int M) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = prepared_.find({M, false});
  return it != prepared_.end() && it->second.q_out;
}

void QuantGemm::SetQuantisedOutput(float y_scale) {
  std::lock_guard<std::mutex> lock(mu_);
  if (q_ != QuantType::kFp8E4M3 || !(y_scale > 0.f) || !std::isfinite(y_scale)) {
    throw Error("QuantGemm::SetQuantisedOutput: FP8 GEMMs only, with a positive finite scale, "
                "got " + std::to_string(y_scale));
  }
  if (!prepared_.empty()) throw Error("QuantGemm::SetQuantisedOutput: call before Prepare");
  const float inv = 1.f / y_scale;
  if (!y_scale_inv_) CUDA_CHECK(cudaMalloc(&y_scale_inv_, sizeof(float)));
  CUDA_CHECK(cudaMemcpy(y_scale_inv_, &inv, sizeof(float), cudaMemcpyHostToDevice));
}

void QuantGemm::SetTuning(GemmTuningCache* cache, bool tune) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!prepared_.empty()) throw Error("QuantGemm::SetTuning: call before Prepare");
  cache_ = cache;
  tune_ = tune;
}

QuantGemm::TuneInfo QuantGemm::Tuning(int M, bool with_residual) const {
  std::lock_guard<std::mutex> lock(mu_);
  TuneInfo t;
  auto it = prepared_.find({M, with_residual});
  if (it == prepared_.end()) return t;
  t.source = it->second.source;
  t.algo = it->second.algo;
  t.ms = it->second.ms;
  t.candidates = it->second.candidates;
  t.own = it->second.own;
  t.lt_ms = it->second.lt_ms;
  return t;
}

void QuantGemm::ForgetProcessChoices() {
  std::lock_guard<std::mutex> lock(TuneMutex());
  TuneMap().clear();
}

bool QuantGemm::IsPrepared(int M, bool with_residual) const {
  std::lock_guard<std::mutex> lock(mu_);
  return prepared_.count({M, with_residual}) != 0;
}

std::string QuantGemm::path(int M) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (bool r : {false, true}) {
    auto it = prepared_.find({M, r});
    if (it == prepared_.end()) continue;
    const Prepared& p = it->second;
    char tail[128];
    std::snprintf(tail, sizeof(tail), " (algo %d tile %d, %.4f ms of %d, %s)",
                  AlgoConfig(p.algo, CUBLASLT_ALGO_CONFIG_ID),
                  AlgoConfig(p.algo, CUBLASLT_ALGO_CONFIG_TILE_ID), p.ms, p.candidates,
                  QuantTuneSourceName(p.source));
    if (p.own >= 0) {
      char own_tail[96];
      if (p.lt_ms > 0)  // timed here beside cuBLASLt's choice
        std::snprintf(own_tail, sizeof(own_tail), " (%.4f ms; cuBLASLt's best %.4f ms; %s)",
                      p.ms, p.lt_ms, QuantTuneSourceName(p.source));
      else  // forced, or taken from the process or the cache: cuBLASLt not timed beside it
        std::snprintf(own_tail, sizeof(own_tail), " (%.4f ms; %s)", p.ms,
                      QuantTuneSourceName(p.source));
      return std::string(QuantTypeName(q_)) + " own sm90 GEMM, per-tensor scales, fast accum: " +
             OwnFp8GemmConfigName(p.own) + own_tail;
    }
    if (p.fused)
      return std::string(QuantTypeName(q_)) +
             (scaling_ == WeightScaling::kPerTensor ? " cublasLt per-tensor scales"
                                                    : " cublasLt outer-vector scales") +
             (fast_accum_ ? ", fast accum" : "") + (p.q_out ? ", e4m3 output" : "") + tail +
             (p.refused.empty() ? std::string() : " [" + p.refused + "]");
    return std::string(QuantTypeName(q_)) +
           (q_ == QuantType::kInt8 ? " imma int32 + dequant epilogue"
                                   : " fp32 acc + dequant epilogue") + tail +
           (p.refused.empty() ? std::string() : " [" + p.refused + "]");
  }
  return "(not prepared)";
}

void QuantGemm::Run(const void* xq, int M, void* y, const void* residual, void* acc,
                    LtWorkspace& ws, cudaStream_t s) {
  if (M == 0) return;
  if (!xq || !y) throw Error("QuantGemm::Run: null xq or y");
  Prepared p;
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = prepared_.find({M, residual != nullptr});
    if (it == prepared_.end()) {
      lock.unlock();
      Prepare(M, residual != nullptr, ws, s);
      lock.lock();
      it = prepared_.find({M, residual != nullptr});
    }
    p = it->second;
  }
  if (p.own >= 0) {
    const OwnEpilogue oe = OwnFp8GemmConfigEpilogue(p.own);
    OwnFp8GemmRun(p.own, OwnProblem(oe, xq, M, y, residual), ws.workspace(), s);
    return;
  }
  if (p.fused) {
    const float alpha = 1.f, beta = p.beta_one ? 1.f : 0.f;
    // C: the residual (beta 1), else unread (beta 0). cuBLASLt refuses C = D when they differ
    // in type (an E4M3 D with an FP16 C: "invalid value" at launch), so an E4M3-output GEMM
    // names another device buffer, its input, as the C it never reads.
    const void* c = p.beta_one ? residual : (p.q_out ? xq : y);
    CUBLAS_CHECK(cublasLtMatmul(ws.handle(), p.desc, &alpha, w_, p.a, xq, p.b, &beta, c, p.c, y,
                                p.d, &p.algo, ws.workspace(), ws.workspace_bytes(), s));
    return;
  }
  if (!acc) throw Error("QuantGemm::Run: this path needs an accumulator scratch (AccBytes)");
  if (q_ == QuantType::kInt8) {
    const int32_t alpha = 1, beta = 0;
    CUBLAS_CHECK(cublasLtMatmul(ws.handle(), p.desc, &alpha, w_, p.a, xq, p.b, &beta, acc, p.c,
                                acc, p.d, &p.algo, ws.workspace(), ws.workspace_bytes(), s));
  } else {
    const float alpha = 1.f, beta = 0.f;
    CUBLAS_CHECK(cublasLtMatmul(ws.handle(), p.desc, &alpha, w_, p.a, xq, p.b, &beta, acc, p.c,
                                acc, p.d, &p.algo, ws.workspace(), ws.workspace_bytes(), s));
  }
  const int act = EpilogueActCode(epilogue_);
  const int64_t total = int64_t(M) * N_;
  DispatchDType(out_, [&](auto tag) {
    using T = decltype(tag);
    if (q_ == QuantType::kInt8) {
      DequantEpilogueKernel<int32_t, T><<<GridFor(total, 256), 256, 0, s>>>(
          static_cast<const int32_t*>(acc), M, N_, out_scale_, bias_f32_, act,
          static_cast<const T*>(residual), static_cast<T*>(y));
    } else {
      DequantEpilogueKernel<float, T><<<GridFor(total, 256), 256, 0, s>>>(
          static_cast<const float*>(acc), M, N_, out_scale_, bias_f32_, act,
          static_cast<const T*>(residual), static_cast<T*>(y));
    }
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace hotline::engine::cuda
