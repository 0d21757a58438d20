// The CPU backend: host memory, oneDNN/vectorised kernels from src/engine/cpu/kernels.h.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "base/error.h"
#include "engine/backend.h"
#include "engine/cpu/kernels.h"
#include "engine/quant.h"

namespace hotline::engine {
namespace {

std::vector<float> CopyConst(const Graph& g, const Node& n, size_t k, int64_t want = -1) {
  const HTensor* t = k < n.inputs.size() && !n.inputs[k].empty() ? g.Const(n.inputs[k]) : nullptr;
  if (!t) return {};
  if (!t->is_float() || (want >= 0 && t->numel() != want)) {
    throw Error(n.Describe() + ": constant input #" + std::to_string(k) + " must be float32 with " +
                std::to_string(want) + " values, got " + DTypeName(t->dtype) + " " +
                ShapeString(t->shape));
  }
  return t->f;
}

cpu::GemmPrecision GemmPrec(Precision p) {
  return p == Precision::kBF16 ? cpu::GemmPrecision::kBF16 : cpu::GemmPrecision::kFP32;
}

std::unique_ptr<cpu::Gemm> MakeGemm(const Graph& g, const Node& n, Precision p) {
  const HTensor* w = g.Const(n.inputs[1]);
  if (!w || w->shape.size() != 2 || !w->is_float()) {
    throw Error(n.Describe() + ": weights must be a constant float32 [K, N] matrix");
  }
  const int K = int(w->shape[0]), N = int(w->shape[1]);
  std::vector<float> bias = CopyConst(g, n, 2, N);
  const std::string epi = n.s("epilogue", "none");
  const cpu::Epilogue e = epi == "gelu" ? cpu::Epilogue::kGelu
                          : epi == "tanh" ? cpu::Epilogue::kTanh : cpu::Epilogue::kNone;
  return std::make_unique<cpu::Gemm>(w->f.data(), K, N, bias.empty() ? nullptr : bias.data(), e,
                                     GemmPrec(p), int(n.i("tactic", 0)));
}

// GEMMs that an INT8 plan keeps in fp32 compute (and report) fp32.
Precision FloatPrecision(Precision p) { return p == Precision::kINT8 ? Precision::kFP32 : p; }

class DenseOp : public PreparedOp {
 public:
  DenseOp(const Graph& g, const Node& n, Precision p)
      : gemm_(MakeGemm(g, n, FloatPrecision(p))), p_(FloatPrecision(p)),
        residual_(n.inputs.size() > 3 && !n.inputs[3].empty()) {}
  void Run(const LaunchArgs& a) const override {
    gemm_->Run(static_cast<const float*>(a.in[0]), a.rows, static_cast<float*>(a.out[0]),
               residual_ ? static_cast<const float*>(a.in[3]) : nullptr);
  }
  std::string precision() const override { return std::string(PrecisionName(p_)); }

 private:
  std::unique_ptr<cpu::Gemm> gemm_;
  Precision p_;
  bool residual_;
};

// The static inverse scale of an s8 copy a LayerNorm-family op writes as its second output
// (attr q_amax, set by the INT8 rewrite in calib.cc); 0 when it writes none.
float QuantOutInvScale(const Node& n) {
  if (!n.has("q_amax")) return 0.f;
  const float amax = n.f("q_amax", 0.f);
  if (!(amax > 0) || n.outputs.size() != 2) {
    throw Error(n.Describe() + ": q_amax must be positive with a second (s8) output");
  }
  return 127.f / amax;
}

class DenseLayerNormOp : public PreparedOp {
 public:
  DenseLayerNormOp(const Graph& g, const Node& n, Precision p)
      : gemm_(MakeGemm(g, n, FloatPrecision(p))), p_(FloatPrecision(p)),
        eps_(n.f("epsilon", 1e-12f)), q_inv_(QuantOutInvScale(n)) {
    gamma_ = CopyConst(g, n, 4, gemm_->N());
    beta_ = CopyConst(g, n, 5, gemm_->N());
  }
  void Run(const LaunchArgs& a) const override {
    float* y = static_cast<float*>(a.out[0]);
    gemm_->Run(static_cast<const float*>(a.in[0]), a.rows, y, nullptr);
    if (q_inv_ > 0) {
      cpu::LayerNormS8(y, static_cast<const float*>(a.in[3]), gamma_.data(), beta_.data(), eps_,
                       a.rows, gemm_->N(), y, static_cast<int8_t*>(a.out[1]), q_inv_);
      return;
    }
    cpu::LayerNorm(y, static_cast<const float*>(a.in[3]), gamma_.data(), beta_.data(), eps_,
                   a.rows, gemm_->N(), y);
  }
  std::string precision() const override { return std::string(PrecisionName(p_)); }

 private:
  std::unique_ptr<cpu::Gemm> gemm_;
  Precision p_;
  float eps_, q_inv_;
  std::vector<float> gamma_, beta_;
};

class LayerNormOp : public PreparedOp {
 public:
  LayerNormOp(const Graph& g, const Node& n, const OpShapes& s)
      : hidden_(int(s.out_inner[0])), eps_(n.f("epsilon", 1e-12f)), q_inv_(QuantOutInvScale(n)),
        residual_(n.inputs.size() > 3 && !n.inputs[3].empty()) {
    gamma_ = CopyConst(g, n, 1, hidden_);
    beta_ = CopyConst(g, n, 2, hidden_);
  }
  void Run(const LaunchArgs& a) const override {
    const float* x = static_cast<const float*>(a.in[0]);
    const float* r = residual_ ? static_cast<const float*>(a.in[3]) : nullptr;
    if (q_inv_ > 0) {
      cpu::LayerNormS8(x, r, gamma_.data(), beta_.data(), eps_, a.rows, hidden_,
                       static_cast<float*>(a.out[0]), static_cast<int8_t*>(a.out[1]), q_inv_);
      return;
    }
    cpu::LayerNorm(x, r, gamma_.data(), beta_.data(), eps_, a.rows, hidden_,
                   static_cast<float*>(a.out[0]));
  }
  std::string precision() const override { return "fp32"; }

 private:
  int hidden_;
  float eps_, q_inv_;
  bool residual_;
  std::vector<float> gamma_, beta_;
};

class EmbedLayerNormOp : public PreparedOp {
 public:
  EmbedLayerNormOp(const Graph& g, const Node& n)
      : eps_(n.f("epsilon", 1e-12f)), q_inv_(QuantOutInvScale(n)) {
    const HTensor* word = g.Const(n.inputs[2]);
    const HTensor* pos = g.Const(n.inputs[3]);
    if (!word || !pos || word->shape.size() != 2 || pos->shape.size() != 2) {
      throw Error(n.Describe() + ": word/position tables must be constant [rows, hidden]");
    }
    vocab_ = int(word->shape[0]);
    hidden_ = int(pos->shape[1]);
    max_pos_ = int(pos->shape[0]);
    if (n.has("word_scale")) {  // s8 word table with per-row scales (INT8 plans)
      if (n.i("hidden", 0) != hidden_) {
        throw Error(n.Describe() + ": s8 word table has hidden " +
                    std::to_string(n.i("hidden", 0)) + ", positions have " +
                    std::to_string(hidden_));
      }
      const int8_t* q = S8Data(*word, int64_t(vocab_) * hidden_);
      word_q_.assign(q, q + size_t(vocab_) * hidden_);
      const HTensor* sc = g.Const(n.s("word_scale", ""));
      if (!sc || !sc->is_float() || sc->numel() != vocab_) {
        throw Error(n.Describe() + ": word_scale must be " + std::to_string(vocab_) + " floats");
      }
      word_scale_ = sc->f;
    } else {
      if (word->shape[1] != pos->shape[1]) {
        throw Error(n.Describe() + ": word/position tables must be constant [rows, hidden]");
      }
      word_ = word->f;
    }
    pos_ = pos->f;
    type_ = CopyConst(g, n, 4);
    if (type_.empty()) type_.assign(hidden_, 0.f);  // no token-type table: one zero row
    type_vocab_ = int(type_.size() / hidden_);
    gamma_ = CopyConst(g, n, 5, hidden_);
    beta_ = CopyConst(g, n, 6, hidden_);
  }
  void Run(const LaunchArgs& a) const override {
    cpu::EmbeddingLayerNormS8(
        static_cast<const int32_t*>(a.in[0]), static_cast<const int32_t*>(a.in[1]), a.cu_seqlens,
        a.batch, word_.empty() ? nullptr : word_.data(),
        word_q_.empty() ? nullptr : word_q_.data(), word_scale_.data(), vocab_, pos_.data(),
        max_pos_, type_.data(), type_vocab_, gamma_.data(), beta_.data(), eps_, hidden_,
        static_cast<float*>(a.out[0]), q_inv_ > 0 ? static_cast<int8_t*>(a.out[1]) : nullptr,
        q_inv_);
  }
  std::string precision() const override { return word_q_.empty() ? "fp32" : "int8"; }

 private:
  int hidden_, vocab_, max_pos_, type_vocab_;
  float eps_, q_inv_;
  std::vector<float> word_, pos_, type_, gamma_, beta_, word_scale_;
  std::vector<int8_t> word_q_;
};

// An INT8 GEMM (Dense or DenseLayerNorm with attr quant=int8, calib.cc): s8 weights with
// per-channel scales, the input either already s8 (in_s8: written by its producer) or quantised
// here with the static calibrated scale; output fp32, or s8 for the next GEMM (out_amax).
class Int8DenseOp : public PreparedOp {
 public:
  Int8DenseOp(const Graph& g, const Node& n, bool layer_norm)
      : layer_norm_(layer_norm), in_s8_(n.i("in_s8", 0) != 0),
        residual_(n.inputs.size() > 3 && !n.inputs[3].empty()),
        K_(int(n.i("K", 0))), N_(int(n.i("N", 0))), eps_(n.f("epsilon", 1e-12f)),
        q_inv_(layer_norm ? QuantOutInvScale(n) : 0.f) {
    const float in_amax = n.f("in_amax", 0.f);
    if (K_ <= 0 || N_ <= 0 || !(in_amax > 0)) {
      throw Error(n.Describe() + ": int8 GEMM needs positive K, N and in_amax attributes");
    }
    in_inv_ = 127.f / in_amax;
    const int8_t* w = S8Data(*g.Const(n.inputs[1]), int64_t(K_) * N_);
    const HTensor* ws = g.Const(n.s("w_scale", ""));
    if (!ws || !ws->is_float() || ws->numel() != N_) {
      throw Error(n.Describe() + ": w_scale must be " + std::to_string(N_) + " floats");
    }
    std::vector<float> bias = CopyConst(g, n, 2, N_);
    const std::string epi = n.s("epilogue", "none");
    const cpu::Epilogue e = epi == "gelu" ? cpu::Epilogue::kGelu
                            : epi == "tanh" ? cpu::Epilogue::kTanh : cpu::Epilogue::kNone;
    const float out_amax = n.f("out_amax", 0.f);
    if (out_amax > 0 && (layer_norm || residual_)) {
      throw Error(n.Describe() + ": an s8 output (out_amax) needs a plain Dense without residual");
    }
    gemm_ = std::make_unique<cpu::GemmS8>(w, K_, N_, ws->f.data(), in_amax / 127.f,
                                          bias.empty() ? nullptr : bias.data(), e,
                                          out_amax > 0 ? out_amax / 127.f : 0.f,
                                          int(n.i("tactic", 0)));
    if (layer_norm_) {
      gamma_ = CopyConst(g, n, 4, N_);
      beta_ = CopyConst(g, n, 5, N_);
    }
  }
  void Run(const LaunchArgs& a) const override {
    const int8_t* xq = static_cast<const int8_t*>(a.in[0]);
    if (!in_s8_) {  // static-scale quantisation of an fp32 input (attention output, pooler)
      int8_t* q = static_cast<int8_t*>(a.scratch);
      cpu::QuantizeS8(static_cast<const float*>(a.in[0]), int64_t(a.rows) * K_, in_inv_, q);
      xq = q;
    }
    if (!layer_norm_) {
      gemm_->Run(xq, a.rows, a.out[0], residual_ ? static_cast<const float*>(a.in[3]) : nullptr);
      return;
    }
    float* y = static_cast<float*>(a.out[0]);
    gemm_->Run(xq, a.rows, y, nullptr);
    const float* r = static_cast<const float*>(a.in[3]);
    if (q_inv_ > 0) {
      cpu::LayerNormS8(y, r, gamma_.data(), beta_.data(), eps_, a.rows, N_, y,
                       static_cast<int8_t*>(a.out[1]), q_inv_);
    } else {
      cpu::LayerNorm(y, r, gamma_.data(), beta_.data(), eps_, a.rows, N_, y);
    }
  }
  size_t ScratchBytes(int max_tokens, int) const override {
    return in_s8_ ? 0 : size_t(max_tokens) * size_t(K_);
  }
  std::string precision() const override { return "int8"; }

 private:
  bool layer_norm_, in_s8_, residual_;
  int K_, N_;
  float eps_, q_inv_, in_inv_ = 0.f;
  std::unique_ptr<cpu::GemmS8> gemm_;
  std::vector<float> gamma_, beta_;
};

class AttentionOp : public PreparedOp {
 public:
  explicit AttentionOp(const Node& n)
      : heads_(int(n.i("heads", 0))), head_dim_(int(n.i("head_dim", 0))),
        scale_(n.f("scale", 1.f)) {
    if (heads_ <= 0 || head_dim_ <= 0) throw Error(n.Describe() + ": heads/head_dim missing");
  }
  void Run(const LaunchArgs& a) const override {
    cpu::Attention(static_cast<const float*>(a.in[0]), a.cu_seqlens, a.batch, heads_, head_dim_,
                   scale_, static_cast<float*>(a.out[0]), static_cast<float*>(a.scratch));
  }
  size_t ScratchBytes(int, int max_seqlen) const override {
    return cpu::AttentionScratchFloats(max_seqlen, std::max(omp_get_max_threads(), 1)) *
           sizeof(float);
  }
  std::string precision() const override { return "fp32"; }

 private:
  int heads_, head_dim_;
  float scale_;
};

// [tokens, inner] → [batch, inner]: the first token of each sequence.
class FirstTokenOp : public PreparedOp {
 public:
  explicit FirstTokenOp(const OpShapes& s) : inner_(s.out_inner[0]) {}
  void Run(const LaunchArgs& a) const override {
    const float* x = static_cast<const float*>(a.in[0]);
    float* y = static_cast<float*>(a.out[0]);
    for (int b = 0; b < a.batch; ++b) {
      std::memcpy(y + b * inner_, x + int64_t(a.cu_seqlens[b]) * inner_, inner_ * sizeof(float));
    }
  }
  std::string precision() const override { return "fp32"; }

 private:
  int64_t inner_;
};

// Unary elementwise, and binary elementwise of two same-layout values or with a constant that
// broadcasts over the last axis (scalar or [inner]).
class ElementwiseOp : public PreparedOp {
 public:
  ElementwiseOp(const Graph& g, const Node& n, const OpShapes& s)
      : op_(n.op), inner_(s.out_inner[0]),
        gelu_tanh_(n.op == "Gelu" && n.s("approximate", "none") == "tanh") {
    if (n.inputs.size() == 2) {
      for (int k = 0; k < 2; ++k) {
        if (s.in_const[k]) {
          konst_ = CopyConst(g, n, k);
          const_index_ = k;
        }
      }
    }
  }
  void Run(const LaunchArgs& a) const override {
    const int64_t n = int64_t(a.rows) * inner_;
    float* y = static_cast<float*>(a.out[0]);
    const float* x = static_cast<const float*>(a.in[const_index_ == 0 ? 1 : 0]);
    if (gelu_tanh_) {  // GELU's tanh form (e.g. ALBERT's gelu_new), as ONNX defines it
#pragma omp parallel for schedule(static)
      for (int64_t e = 0; e < n; ++e) {
        const float v = x[e];
        y[e] = 0.5f * v * (1.f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v)));
      }
      return;
    }
    if (op_ == "Gelu") {
      cpu::Gelu(x, n, y);
      return;
    }
    if (op_ == "Tanh" || op_ == "Relu" || op_ == "Sigmoid" || op_ == "Erf" || op_ == "Identity") {
#pragma omp parallel for schedule(static)
      for (int64_t e = 0; e < n; ++e) {
        const float v = x[e];
        y[e] = op_[0] == 'T' ? std::tanh(v) : op_[0] == 'R' ? std::max(v, 0.f)
               : op_[0] == 'S' ? 1.f / (1.f + std::exp(-v)) : op_[0] == 'E' ? std::erf(v) : v;
      }
      return;
    }
    const char o = op_[0] == 'A' ? '+' : op_[0] == 'S' ? '-' : op_[0] == 'M' ? '*' : '/';
    const float* b = const_index_ >= 0 ? konst_.data() : static_cast<const float*>(a.in[1]);
    const int64_t bn = const_index_ >= 0 ? int64_t(konst_.size()) : n;
    const bool swap = const_index_ == 0;  // constant is the left operand
#pragma omp parallel for schedule(static)
    for (int64_t e = 0; e < n; ++e) {
      const float p = x[e];
      const float q = bn == 1 ? b[0] : bn == n ? b[e] : b[e % bn];
      const float l = swap ? q : p, r = swap ? p : q;
      y[e] = o == '+' ? l + r : o == '-' ? l - r : o == '*' ? l * r : l / r;
    }
  }
  std::string precision() const override { return "fp32"; }

 private:
  std::string op_;
  int64_t inner_;
  bool gelu_tanh_;
  std::vector<float> konst_;
  int const_index_ = -1;
};

class CpuBackend : public Backend {
 public:
  BackendKind kind() const override { return BackendKind::kCPU; }
  std::map<std::string, std::string> Fingerprint() const override {
    return {{"backend", "cpu"}, {"cpu_isa", cpu::CpuIsaString()}};
  }
  void CheckPrecision(Precision p) const override {
    if (p == Precision::kFP32) return;
    // bf16 runs on every CPU: weights are stored in bf16 and the kernels use AVX512-BF16 dot
    // products where the CPU has them (CpuHasBf16) and widen to fp32 in registers elsewhere.
    // The plan's fingerprint records cpu_isa, so a plan tuned for one ISA is not loaded on another.
    if (p == Precision::kBF16) return;
    // int8: oneDNN s8 matmuls (VNNI where the CPU has it; 7-bit weights elsewhere, see
    // cpu::S8WeightQmax), calibrated static activation scales (quant.h).
    if (p == Precision::kINT8) return;
    throw Error("precision " + std::string(PrecisionName(p)) +
                    " is not supported on cpu backend (supported: fp32, bf16, int8)",
                Code::kUnimplemented);
  }
  bool SupportsOp(const Node& n, Precision) const override {
    static const char* kOps[] = {"Dense", "DenseLayerNorm", "LayerNorm", "EmbedLayerNorm",
                                 "Attention", "FirstToken", "Gelu", "Tanh", "Relu", "Sigmoid",
                                 "Erf", "Identity", "Add", "Sub", "Mul", "Div"};
    return std::find(std::begin(kOps), std::end(kOps), n.op) != std::end(kOps);
  }
  void* Allocate(size_t bytes) override {
    void* p = std::aligned_alloc(64, (std::max<size_t>(bytes, 64) + 63) / 64 * 64);
    if (!p) throw Error("out of memory allocating " + std::to_string(bytes) + " bytes",
                        Code::kResourceExhausted);
    return p;
  }
  void Free(void* p) override { std::free(p); }
  void CopyToDevice(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void CopyToHost(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void Synchronize() override {}

  std::unique_ptr<PreparedOp> Prepare(const Node& n, const Graph& g, const OpShapes& s,
                                      Precision p) override {
    const bool int8 = n.s("quant", "") == "int8";
    if (int8 && p != Precision::kINT8) {
      throw Error(n.Describe() + " holds int8 weights in a " + std::string(PrecisionName(p)) +
                  " plan");
    }
    if (n.op == "Dense") {
      if (int8) return std::make_unique<Int8DenseOp>(g, n, false);
      return std::make_unique<DenseOp>(g, n, p);
    }
    if (n.op == "DenseLayerNorm") {
      if (int8) return std::make_unique<Int8DenseOp>(g, n, true);
      return std::make_unique<DenseLayerNormOp>(g, n, p);
    }
    if (n.op == "LayerNorm") return std::make_unique<LayerNormOp>(g, n, s);
    if (n.op == "EmbedLayerNorm") return std::make_unique<EmbedLayerNormOp>(g, n);
    if (n.op == "Attention") return std::make_unique<AttentionOp>(n);
    if (n.op == "FirstToken") return std::make_unique<FirstTokenOp>(s);
    if (SupportsOp(n, p)) return std::make_unique<ElementwiseOp>(g, n, s);
    throw Error(n.Describe() + " is not supported by the cpu backend", Code::kUnimplemented);
  }

  std::vector<int> GemmTactics(Precision p) const override {
    if (p == Precision::kINT8) return cpu::GemmS8::Tactics();
    return cpu::Gemm::Tactics(GemmPrec(p));
  }
  std::string TacticName(int t) const override { return cpu::Gemm::TacticName(t); }
  double TimeGemm(int tactic, int M, int K, int N, Precision p) override {
    if (p == Precision::kINT8) return TimeGemmS8(tactic, M, K, N);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-0.1f, 0.1f);
    std::vector<float> w(size_t(K) * N), b(N), x(size_t(M) * K), y(size_t(M) * N);
    for (auto& v : w) v = u(rng);
    for (auto& v : x) v = u(rng);
    cpu::Gemm gemm(w.data(), K, N, b.data(), cpu::Epilogue::kNone, GemmPrec(p), tactic);
    gemm.Run(x.data(), M, y.data());  // warm-up
    double best = 1e30;
    for (int r = 0; r < 3; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      gemm.Run(x.data(), M, y.data());
      const auto t1 = std::chrono::steady_clock::now();
      best = std::min(best, std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    return best;
  }

 private:
  static double TimeGemmS8(int tactic, int M, int K, int N) {
    std::mt19937 rng(1);
    const int qmax = cpu::S8WeightQmax();
    std::uniform_int_distribution<int> wq(-qmax, qmax), xq(-127, 127);
    std::vector<int8_t> w(size_t(K) * N), x(size_t(M) * K);
    std::vector<float> ws(N, 0.01f), b(N, 0.f), y(size_t(M) * N);
    for (auto& v : w) v = int8_t(wq(rng));
    for (auto& v : x) v = int8_t(xq(rng));
    cpu::GemmS8 gemm(w.data(), K, N, ws.data(), 0.01f, b.data(), cpu::Epilogue::kNone, 0.f,
                     tactic);
    gemm.Run(x.data(), M, y.data());  // warm-up
    double best = 1e30;
    for (int r = 0; r < 3; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      gemm.Run(x.data(), M, y.data());
      const auto t1 = std::chrono::steady_clock::now();
      best = std::min(best, std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    return best;
  }
};

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend() { return std::make_unique<CpuBackend>(); }

}  // namespace hotline::engine
