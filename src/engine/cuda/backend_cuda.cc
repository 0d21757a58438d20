// The engine's Backend for CUDA (CreateCudaBackend, used by backend.cc's registry).
//
// The plan executor keeps one FP32 buffer per value, so this backend offers the fused encoder ops
// in FP32 (cuBLASLt FP32 GEMMs without TF32, our FP32 kernels): Dense, DenseLayerNorm, LayerNorm,
// EmbedLayerNorm, Attention, FirstToken, Gelu, Tanh, Identity. Other ops and FP16/BF16 plans are
// refused by SupportsOp (the runtime then names the op); the FP16/BF16 fast path is the
// whole-encoder runner CudaEncoder (encoder.h), which the runtime is to hand fused BERT graphs to
// (README.md). All launches go to the legacy default stream, so work from several contexts is
// ordered on the device and one cuBLASLt workspace serves them (calls into it are serialised).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <climits>
#include <mutex>
#include <set>
#include <vector>

#include "base/error.h"
#include "engine/backend.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/kernels.h"

namespace hotline::engine {
namespace {

using cuda::DType;

std::vector<float> ConstF32(const Graph& g, const Node& n, size_t k, int64_t want = -1) {
  const HTensor* t = k < n.inputs.size() && !n.inputs[k].empty() ? g.Const(n.inputs[k]) : nullptr;
  if (!t) return {};
  if (!t->is_float() || (want >= 0 && t->numel() != want)) {
    throw Error(n.Describe() + ": constant input #" + std::to_string(k) + " must be float32 with " +
                std::to_string(want) + " values, got " + DTypeName(t->dtype) + " " +
                ShapeString(t->shape));
  }
  return t->f;
}

// Device copy of a host FP32 vector, freed with the op.
class DeviceF32 {
 public:
  DeviceF32() = default;
  explicit DeviceF32(const std::vector<float>& v) {
    if (v.empty()) return;
    CUDA_CHECK(cudaMalloc(&p_, v.size() * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(p_, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
  ~DeviceF32() { cudaFree(p_); }
  DeviceF32(const DeviceF32&) = delete;
  DeviceF32& operator=(const DeviceF32&) = delete;
  const float* get() const { return p_; }

 private:
  float* p_ = nullptr;
};

// What every op shares: one cuBLASLt workspace and tuning cache per backend.
struct Shared {
  std::mutex gemm_mu;
  std::unique_ptr<cuda::LtWorkspace> ws;
  cuda::GemmTuningCache cache;
};

const void* In(const LaunchArgs& a, const OpShapes& s, size_t k) {
  return k < s.in_inner.size() ? a.in[k] : nullptr;
}

std::unique_ptr<cuda::Gemm> MakeGemm(const Graph& g, const Node& n, Shared* sh) {
  const HTensor* w = g.Const(n.inputs[1]);
  if (!w || w->shape.size() != 2 || !w->is_float()) {
    throw Error(n.Describe() + ": weights must be a constant float32 [K, N] matrix");
  }
  const int K = int(w->shape[0]), N = int(w->shape[1]);
  std::vector<float> bias = ConstF32(g, n, 2, N);
  const std::string epi = n.s("epilogue", "none");
  if (epi != "none" && epi != "gelu" && epi != "tanh") {
    throw Error(n.Describe() + ": unknown epilogue '" + epi + "' (none, gelu, tanh)",
                Code::kUnimplemented);
  }
  const cuda::GemmEpilogue e = epi == "gelu"   ? cuda::GemmEpilogue::kBiasGelu
                               : epi == "tanh" ? cuda::GemmEpilogue::kBiasTanh
                               : bias.empty()  ? cuda::GemmEpilogue::kNone
                                               : cuda::GemmEpilogue::kBias;
  return std::make_unique<cuda::Gemm>(w->f.data(), K, N, bias.empty() ? nullptr : bias.data(), e,
                                      DType::kF32, &sh->cache, n.i("tactic", 2) != 1);
}

class DenseOp : public PreparedOp {
 public:
  DenseOp(const Graph& g, const Node& n, const OpShapes& s, Shared* sh, bool layer_norm)
      : s_(s), sh_(sh), gemm_(MakeGemm(g, n, sh)), ln_(layer_norm),
        eps_(n.f("epsilon", 1e-12f)) {
    if (ln_) {
      gamma_ = std::make_unique<DeviceF32>(ConstF32(g, n, 4, gemm_->N()));
      beta_ = std::make_unique<DeviceF32>(ConstF32(g, n, 5, gemm_->N()));
      if (!gamma_->get() || !beta_->get()) throw Error(n.Describe() + ": gamma/beta missing");
    }
  }
  void Run(const LaunchArgs& a) const override {
    const void* res = In(a, s_, 3);
    std::lock_guard<std::mutex> lock(sh_->gemm_mu);
    if (!ln_) {
      gemm_->Run(a.in[0], a.rows, a.out[0], res, *sh_->ws, nullptr);
      return;
    }
    gemm_->Run(a.in[0], a.rows, a.out[0], nullptr, *sh_->ws, nullptr);
    cuda::LayerNorm(DType::kF32, a.out[0], nullptr, res, gamma_->get(), beta_->get(), eps_,
                    a.rows, gemm_->N(), a.out[0], nullptr);
  }
  std::string precision() const override { return "fp32"; }

 private:
  OpShapes s_;
  Shared* sh_;
  std::unique_ptr<cuda::Gemm> gemm_;
  bool ln_;
  float eps_;
  std::unique_ptr<DeviceF32> gamma_, beta_;
};

class LayerNormOp : public PreparedOp {
 public:
  LayerNormOp(const Graph& g, const Node& n, const OpShapes& s)
      : s_(s), hidden_(int(s.out_inner[0])), eps_(n.f("epsilon", 1e-12f)),
        gamma_(ConstF32(g, n, 1, hidden_)), beta_(ConstF32(g, n, 2, hidden_)) {
    if (!gamma_.get() || !beta_.get()) throw Error(n.Describe() + ": gamma/beta missing");
  }
  void Run(const LaunchArgs& a) const override {
    cuda::LayerNorm(DType::kF32, a.in[0], nullptr, In(a, s_, 3), gamma_.get(), beta_.get(), eps_,
                    a.rows, hidden_, a.out[0], nullptr);
  }
  std::string precision() const override { return "fp32"; }

 private:
  OpShapes s_;
  int hidden_;
  float eps_;
  DeviceF32 gamma_, beta_;
};

class EmbedLayerNormOp : public PreparedOp {
 public:
  EmbedLayerNormOp(const Graph& g, const Node& n) : eps_(n.f("epsilon", 1e-12f)) {
    const HTensor* word = g.Const(n.inputs[2]);
    const HTensor* pos = g.Const(n.inputs[3]);
    if (!word || !pos || word->shape.size() != 2 || pos->shape.size() != 2 ||
        word->shape[1] != pos->shape[1]) {
      throw Error(n.Describe() + ": word/position tables must be constant [rows, hidden]");
    }
    hidden_ = int(word->shape[1]);
    vocab_ = int(word->shape[0]);
    max_pos_ = int(pos->shape[0]);
    std::vector<float> type = ConstF32(g, n, 4);
    if (type.empty()) type.assign(hidden_, 0.f);
    type_vocab_ = int(type.size() / hidden_);
    word_ = std::make_unique<DeviceF32>(word->f);
    pos_ = std::make_unique<DeviceF32>(pos->f);
    type_ = std::make_unique<DeviceF32>(type);
    gamma_ = std::make_unique<DeviceF32>(ConstF32(g, n, 5, hidden_));
    beta_ = std::make_unique<DeviceF32>(ConstF32(g, n, 6, hidden_));
    if (!gamma_->get() || !beta_->get()) throw Error(n.Describe() + ": gamma/beta missing");
  }
  void Run(const LaunchArgs& a) const override {
    if (a.batch == 0) return;
    cuda::EmbeddingLayerNorm(DType::kF32, static_cast<const int32_t*>(a.in[0]),
                             static_cast<const int32_t*>(a.in[1]), a.cu_seqlens, a.batch, a.rows,
                             word_->get(), vocab_, pos_->get(), max_pos_, type_->get(),
                             type_vocab_, gamma_->get(), beta_->get(), eps_, hidden_, a.out[0],
                             nullptr);
  }
  std::string precision() const override { return "fp32"; }

 private:
  int hidden_, vocab_, max_pos_, type_vocab_;
  float eps_;
  std::unique_ptr<DeviceF32> word_, pos_, type_, gamma_, beta_;
};

class AttentionOp : public PreparedOp {
 public:
  explicit AttentionOp(const Node& n)
      : heads_(int(n.i("heads", 0))), head_dim_(int(n.i("head_dim", 0))),
        scale_(n.f("scale", 1.f)) {
    if (heads_ <= 0 || head_dim_ <= 0) throw Error(n.Describe() + ": heads/head_dim missing");
  }
  void Run(const LaunchArgs& a) const override {
    cuda::Attention(DType::kF32, a.in[0], a.cu_seqlens, a.batch, a.max_seqlen, heads_, head_dim_,
                    scale_, a.out[0], nullptr);
  }
  std::string precision() const override { return "fp32"; }

 private:
  int heads_, head_dim_;
  float scale_;
};

class FirstTokenOp : public PreparedOp {
 public:
  explicit FirstTokenOp(const OpShapes& s) : inner_(int(s.out_inner[0])) {}
  void Run(const LaunchArgs& a) const override {
    cuda::GatherFirstToken(DType::kF32, a.in[0], a.cu_seqlens, a.batch, INT_MAX, inner_, a.out[0],
                           nullptr);
  }
  std::string precision() const override { return "fp32"; }

 private:
  int inner_;
};

class UnaryOp : public PreparedOp {
 public:
  UnaryOp(const Node& n, const OpShapes& s) : op_(n.op), inner_(s.out_inner[0]) {}
  void Run(const LaunchArgs& a) const override {
    const int64_t n = int64_t(a.rows) * inner_;
    if (op_ == "Identity") {
      if (a.out[0] != a.in[0]) {
        CUDA_CHECK(cudaMemcpyAsync(a.out[0], a.in[0], size_t(n) * sizeof(float),
                                   cudaMemcpyDeviceToDevice, nullptr));
      }
      return;
    }
    cuda::Activate(op_ == "Gelu" ? cuda::Activation::kGelu : cuda::Activation::kTanh,
                   DType::kF32, a.in[0], n, a.out[0], nullptr);
  }
  std::string precision() const override { return "fp32"; }

 private:
  std::string op_;
  int64_t inner_;
};

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
      throw Error(std::string("backend cuda: no usable GPU here (") +
                      (err != cudaSuccess ? cudaGetErrorString(err) : "0 devices") + ")",
                  Code::kFailedPrecondition);
    }
    if (device < 0 || device >= count) {
      throw Error("backend cuda: device " + std::to_string(device) + " does not exist (" +
                      std::to_string(count) + " GPUs)", Code::kNotFound);
    }
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaGetDeviceProperties(&props_, device));
  }

  BackendKind kind() const override { return BackendKind::kCUDA; }

  std::map<std::string, std::string> Fingerprint() const override {
    int rt = 0;
    cudaRuntimeGetVersion(&rt);
    return {{"backend", "cuda"},
            {"gpu", props_.name},
            {"sm", std::to_string(props_.major * 10 + props_.minor)},
            {"cuda", std::to_string(rt)},
            {"cublaslt", std::to_string(cublasLtGetVersion())}};
  }

  void CheckPrecision(Precision p) const override {
    const int sm = props_.major * 10 + props_.minor;
    if (p == Precision::kFP32 || p == Precision::kFP16) return;
    if (p == Precision::kBF16 && sm >= 80) return;
    throw Error("backend cuda: precision " + std::string(PrecisionName(p)) +
                    " is not supported on " + props_.name + " (sm " + std::to_string(sm) + ")",
                Code::kUnimplemented);
  }

  bool SupportsOp(const Node& n, Precision p) const override {
    static const std::set<std::string> kOps = {"Dense",     "DenseLayerNorm", "LayerNorm",
                                               "EmbedLayerNorm", "Attention", "FirstToken",
                                               "Gelu",      "Tanh",           "Identity"};
    return p == Precision::kFP32 && kOps.count(n.op) != 0;
  }

  void* Allocate(size_t bytes) override {
    CUDA_CHECK(cudaSetDevice(device_));
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
  }
  void Free(void* p) override { cudaFree(p); }
  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
  }
  void Synchronize() override { CUDA_CHECK(cudaDeviceSynchronize()); }

  std::unique_ptr<PreparedOp> Prepare(const Node& n, const Graph& g, const OpShapes& s,
                                      Precision p) override {
    if (!SupportsOp(n, p)) {
      throw Error("backend cuda: " + n.Describe() + " is not supported at " +
                      std::string(PrecisionName(p)) + " by the plan executor (FP16/BF16 run "
                      "through the whole-encoder runner)", Code::kUnimplemented);
    }
    CUDA_CHECK(cudaSetDevice(device_));
    if (!shared_.ws) shared_.ws = std::make_unique<cuda::LtWorkspace>();
    if (n.op == "Dense") return std::make_unique<DenseOp>(g, n, s, &shared_, false);
    if (n.op == "DenseLayerNorm") return std::make_unique<DenseOp>(g, n, s, &shared_, true);
    if (n.op == "LayerNorm") return std::make_unique<LayerNormOp>(g, n, s);
    if (n.op == "EmbedLayerNorm") return std::make_unique<EmbedLayerNormOp>(g, n);
    if (n.op == "Attention") return std::make_unique<AttentionOp>(n);
    if (n.op == "FirstToken") return std::make_unique<FirstTokenOp>(s);
    return std::make_unique<UnaryOp>(n, s);
  }

  // 1: cuBLASLt's heuristic choice; 2: the fastest of its candidates and split-K variants.
  std::vector<int> GemmTactics(Precision p) const override { return {1, 2}; }
  std::string TacticName(int t) const override {
    return t == 1 ? "cublaslt_heuristic" : t == 2 ? "cublaslt_tuned" : "unknown";
  }
  double TimeGemm(int tactic, int M, int K, int N, Precision p) override {
    if (tactic != 1 && tactic != 2) {
      throw Error("backend cuda: unknown GEMM tactic " + std::to_string(tactic) +
                      " (available: 1 cublaslt_heuristic, 2 cublaslt_tuned)",
                  Code::kFailedPrecondition);
    }
    CheckPrecision(p);
    CUDA_CHECK(cudaSetDevice(device_));
    const cuda::DType dt = p == Precision::kFP16   ? cuda::DType::kF16
                           : p == Precision::kBF16 ? cuda::DType::kBF16
                                                   : cuda::DType::kF32;
    std::vector<float> w(size_t(K) * N, 0.01f), b(N, 0.f);
    cuda::GemmTuningCache cache;
    cuda::Gemm g(w.data(), K, N, b.data(), cuda::GemmEpilogue::kBias, dt, &cache, tactic == 2);
    cuda::LtWorkspace ws;
    void *x = nullptr, *y = nullptr;
    CUDA_CHECK(cudaMalloc(&x, size_t(M) * K * cuda::DTypeSize(dt)));
    CUDA_CHECK(cudaMalloc(&y, size_t(M) * N * cuda::DTypeSize(dt)));
    double best = -1;
    try {
      cuda::FillRandom(dt, x, int64_t(M) * K, 7u, 1.f, nullptr);
      g.Prepare(M, false, ws, nullptr);
      cudaEvent_t e0, e1;
      CUDA_CHECK(cudaEventCreate(&e0));
      CUDA_CHECK(cudaEventCreate(&e1));
      for (int rep = 0; rep < 5; ++rep) {
        CUDA_CHECK(cudaEventRecord(e0, nullptr));
        g.Run(x, M, y, nullptr, ws, nullptr);
        CUDA_CHECK(cudaEventRecord(e1, nullptr));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        if (rep > 0 && (best < 0 || ms < best)) best = ms;
      }
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
    } catch (...) {
      cudaFree(x);
      cudaFree(y);
      throw;
    }
    cudaFree(x);
    cudaFree(y);
    return best;
  }

 private:
  int device_;
  cudaDeviceProp props_{};
  Shared shared_;  // outlives no op: ops are destroyed before their engine's backend
};

}  // namespace

std::unique_ptr<Backend> CreateCudaBackend(int device) {
  return std::make_unique<CudaBackend>(device);
}

}  // namespace hotline::engine
