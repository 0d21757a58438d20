// GEMMs through cuBLASLt: Y[M,N] = X[M,K] · W[K,N] + bias[N], then an epilogue, optionally
// + residual[M,N] — the device mirror of cpu::Gemm. Weights are uploaded once at construction
// (transposed to [N,K] in the GEMM's element type, the "TN" layout tensor cores prefer).
//
// Tactic selection: for each row count M a Gemm runs with, the algorithm comes from a shared
// GemmTuningCache. When tuning is on, the first use of an M times the heuristic's top candidates
// plus split-K variants of the best ones (on scratch buffers of random data, so the caller's
// buffers are untouched; each candidate timed by graph replays, TimeInGraph, so that small GEMMs
// are not ranked by their host launch cost) and keeps the fastest; the cache can be saved to and
// loaded from a file so a rebuild on the same GPU does not time again. Without tuning the heuristic's first choice
// is used. Call Prepare(M) for every M before capturing a CUDA graph (Run then only looks up).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/cuda/kernels.h"

namespace hotline::engine::cuda {

enum class GemmEpilogue {
  kNone,
  kBias,
  kBiasGelu,      // exact erf GELU (bias epilogue, then an elementwise pass): matches the CPU
  kBiasGeluTanh,  // cuBLASLt's fused GELU, the tanh approximation (max abs diff ~1e-3 vs erf)
  kBiasTanh,      // bias epilogue, then tanh (BERT's pooler)
};
const char* GemmEpilogueName(GemmEpilogue e);
// The activation of an epilogue as our epilogue kernels take it (ApplyAct, device_util.cuh):
// 0 none, 1 erf GELU, 2 tanh GELU, 3 tanh.
int EpilogueActCode(GemmEpilogue e);
// cuBLASLt's data type for a DType; one config attribute of an algorithm (-1 if unreadable).
cudaDataType_t CudaType(DType t);
int AlgoConfig(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr);
// "algo 66 tile 20 stages 35 splitk 1" (+ " option O cluster C swizzle S" where any is set):
// the tuning caches' description of a choice, for reports.
std::string DescribeAlgo(const cublasLtMatmulAlgo_t& algo);
// Sets one config attribute of an algorithm, in the attribute's own type (uint32_t for tiles,
// kernel options and swizzles, uint16_t for cluster shapes); false if cuBLASLt refuses it.
template <typename T>
bool SetAlgoConfig(cublasLtMatmulAlgo_t* algo, cublasLtMatmulAlgoConfigAttributes_t attr, T v) {
  return cublasLtMatmulAlgoConfigSetAttribute(algo, attr, &v, sizeof(v)) == CUBLAS_STATUS_SUCCESS;
}
// A scalar capability of an algorithm (CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX,
// ..._CTA_SWIZZLING_SUPPORT, ...); 0 if unreadable.
inline int AlgoCap(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t attr) {
  int v = 0;
  size_t written = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, &v, sizeof(v), &written) !=
      CUBLAS_STATUS_SUCCESS)
    return 0;
  return v;
}
// A list-valued capability (CUBLASLT_ALGO_CAP_TILE_IDS, ..._STAGES_IDS); empty if none.
template <typename T>
std::vector<T> AlgoCapList(const cublasLtMatmulAlgo_t& algo,
                           cublasLtMatmulAlgoCapAttributes_t attr) {
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, nullptr, 0, &bytes) !=
          CUBLAS_STATUS_SUCCESS ||
      bytes == 0)
    return {};
  std::vector<T> v(bytes / sizeof(T));
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, v.data(), bytes, &bytes) !=
      CUBLAS_STATUS_SUCCESS)
    return {};
  return v;
}

// Device buffer freed on scope exit (tuning scratch and construction temporaries only). Throws
// hotline::Error when the allocation fails.
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// Mean device time (ms) of one `enqueue` (which launches work on the stream it is given and
// returns false if it could not): `iters` back-to-back copies are captured into a CUDA graph on a
// private stream and the graph is replayed `reps` times between two events, so host launch costs
// are excluded while the gaps between dependent kernels (as in our encoder graphs) are included.
// Runs enqueue twice eagerly first (module loading, lazy initialisation). Returns -1 if enqueue
// failed or the work could not be captured. Synchronises; never call it during a capture.
float TimeInGraph(const std::function<bool(cudaStream_t)>& enqueue, int iters = 20,
                  int reps = 3);

// One cuBLASLt handle and workspace; use one per stream/context (not shared between threads).
// Also holds zeroed counters for our fused split-K reduction (small_gemm.h).
class LtWorkspace {
 public:
  explicit LtWorkspace(size_t workspace_bytes = size_t(16) << 20);
  ~LtWorkspace();
  LtWorkspace(const LtWorkspace&) = delete;
  LtWorkspace& operator=(const LtWorkspace&) = delete;
  cublasLtHandle_t handle() const { return handle_; }
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return bytes_; }
  int* counters() const { return counters_; }

 private:
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  int* counters_ = nullptr;
  size_t bytes_ = 0;
};

// Chosen algorithms per GEMM problem (M, N, K, dtype, epilogue, residual). Thread-safe.
class GemmTuningCache {
 public:
  struct Entry {
    cublasLtMatmulAlgo_t algo;
    float ms = -1.f;       // measured time of the chosen algorithm (-1: not timed)
    int candidates = 0;    // how many were timed
    int small_splits = 0;  // > 0: our split-K small-M kernel (small_gemm.h) with these splits
    bool small_fused = false;  // ... with its reduction in the same launch
    int small_kslice = 0;      // > 0: the cp.async variant with this k slice (small_splits unused)
    std::string desc;      // "algo 21 tile 18 splitk 4" for reports
  };
  bool Find(const std::string& key, Entry* out) const;
  void Put(const std::string& key, const Entry& e);
  size_t size() const;
  // Counts changes (Put, Load): a holder saves its file when this moved since its last save,
  // also when an entry was replaced (e.g. a cached algorithm refused and timed again).
  uint64_t generation() const;
  std::map<std::string, Entry> Snapshot() const;
  // Text file: one line per entry, with a header naming the GPU and cuBLASLt version; a file
  // written for another GPU or library version is ignored (returns false), never misused.
  bool Load(const std::string& path);
  void Save(const std::string& path) const;
  static std::string Fingerprint();  // "NVIDIA H200|sm90|cublasLt 130000"

 private:
  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;
  uint64_t generation_ = 0;
};

class Gemm {
 public:
  // weight_kn: host FP32 [K, N] row-major; bias: host FP32 [N] or null. `n_padded` >= N rounds
  // the output row stride up (zero weights and bias in the padding), e.g. for classifier heads
  // whose N is not a multiple of 8. Throws hotline::Error on bad sizes.
  Gemm(const float* weight_kn, int K, int N, const float* bias, GemmEpilogue epilogue,
       DType dtype, GemmTuningCache* cache, bool tune, int n_padded = 0);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // Chooses (times, when tuning) the algorithm for M rows. Allocates scratch when tuning: call
  // outside graph capture and off the hot path.
  void Prepare(int M, bool with_residual, LtWorkspace& ws, cudaStream_t stream);
  // y[M, ld] = epilogue(x · W + bias) (+ residual). x: [M, K], y and residual: [M, n_padded].
  // residual may alias y, except after an activation epilogue (throws). Calls Prepare first if
  // M was never prepared (which may time).
  void Run(const void* x, int M, void* y, const void* residual, LtWorkspace& ws,
           cudaStream_t stream);

  int K() const { return K_; }
  int N() const { return N_; }
  int ld() const { return ldn_; }
  DType dtype() const { return dtype_; }
  size_t weight_bytes() const;
  std::string ChoiceFor(int M, bool with_residual) const;  // for reports
  float ChosenMs(int M, bool with_residual) const;  // timed ms of M's choice; -1 if none

 private:
  std::string Key(int M, bool with_residual) const;
  GemmTuningCache::Entry Choose(int M, bool with_residual, LtWorkspace& ws, cudaStream_t stream);

  int K_, N_, ldn_;
  GemmEpilogue epilogue_;
  DType dtype_;
  GemmTuningCache* cache_;
  bool tune_;
  void* w_ = nullptr;     // [ldn, K] dtype
  void* bias_ = nullptr;  // [ldn] dtype or null
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatmulDesc_t desc_residual_ = nullptr;
  mutable std::mutex mu_;
  struct Prepared {
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo;
    int small_splits = 0;
    bool small_fused = false;
    int small_kslice = 0;
  };
  std::map<std::pair<int, bool>, Prepared> prepared_;
};

}  // namespace hotline::engine::cuda
