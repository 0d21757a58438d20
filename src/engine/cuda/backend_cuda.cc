// The engine's Backend for CUDA (CreateCudaBackend, used by backend.cc's registry).
//
// Two paths:
// - PrepareGraph: a fused plan that is exactly the BERT joint encoder (encoder_graph.h) runs as
//   one CudaEncoder (encoder.h): FP32/FP16/BF16 activations end to end, CUDA graphs per token
//   bucket, one stream per context. This is the only path for FP16/BF16 plans; a graph that does
//   not match is refused at those precisions, naming why.
// - Node by node (FP32 only; the plan executor keeps one FP32 buffer per value): Dense,
//   DenseLayerNorm, LayerNorm, EmbedLayerNorm, Attention, FirstToken, Gelu, Tanh, Identity with
//   cuBLASLt FP32 GEMMs (no TF32) and our FP32 kernels, on the legacy default stream, so work from
//   several contexts is ordered on the device and one cuBLASLt workspace serves them.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <vector>

#include "base/error.h"
#include "engine/backend.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/encoder.h"
#include "engine/cuda/encoder_quant.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/kernels.h"
#include "engine/encoder_graph.h"
#include "engine/fused_attrs.h"

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
  const FusedOpAttrs a = FusedOpAttrs::From(n);
  const cuda::GemmEpilogue e = a.epilogue == FusedEpilogue::kGelu   ? cuda::GemmEpilogue::kBiasGelu
                               : a.epilogue == FusedEpilogue::kTanh ? cuda::GemmEpilogue::kBiasTanh
                               : bias.empty()                       ? cuda::GemmEpilogue::kNone
                                                                    : cuda::GemmEpilogue::kBias;
  return std::make_unique<cuda::Gemm>(w->f.data(), K, N, bias.empty() ? nullptr : bias.data(), e,
                                      DType::kF32, &sh->cache, a.tactic != 1);
}

class DenseOp : public PreparedOp {
 public:
  DenseOp(const Graph& g, const Node& n, const OpShapes& s, Shared* sh, bool layer_norm)
      : s_(s), sh_(sh), gemm_(MakeGemm(g, n, sh)), ln_(layer_norm),
        eps_(FusedOpAttrs::From(n).eps) {
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
      : s_(s), hidden_(int(s.out_inner[0])), eps_(FusedOpAttrs::From(n).eps),
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
  EmbedLayerNormOp(const Graph& g, const Node& n) : eps_(FusedOpAttrs::From(n).eps) {
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
  explicit AttentionOp(const Node& n, const OpShapes& s) {
    const FusedOpAttrs a = FusedOpAttrs::From(n);
    heads_ = a.heads;
    head_dim_ = a.head_dim;
    scale_ = a.scale;
    if (!s.in_inner.empty() && s.in_inner[0] != 3 * int64_t(a.hidden())) {
      throw Error(n.Describe() + ": input rows hold " + std::to_string(s.in_inner[0]) +
                  " values, expected 3 x heads x head_dim = " + std::to_string(3 * a.hidden()));
    }
    if (head_dim_ > 256) {
      throw Error(n.Describe() + ": head_dim " + std::to_string(head_dim_) +
                  " exceeds the CUDA attention kernels' 256", Code::kUnimplemented);
    }
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
  UnaryOp(const Node& n, const OpShapes& s) : op_(n.op), inner_(s.out_inner[0]) {
    if (n.op == "Gelu" && n.s("approximate", "none") != "none") {  // only the erf GELU here
      throw Error(n.Describe() + ": the CUDA node ops have no GELU approximate=" +
                  n.s("approximate", ""), Code::kUnimplemented);
    }
  }
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


// ---- the whole-encoder path ----

std::vector<float> Host(const HTensor* t) { return t ? t->f : std::vector<float>(); }

std::string TempPath(const char* what) {
  char buf[] = "/tmp/hotline-XXXXXX";
  const int fd = mkstemp(buf);
  if (fd < 0) throw Error(std::string("cannot create a temporary file for ") + what);
  close(fd);
  return buf;
}

// Runs a packed batch through one CudaEncoderContext and lays out the plan's two outputs.
class EncoderRunnerContext : public GraphRunnerContext {
 public:
  EncoderRunnerContext(std::unique_ptr<cuda::CudaEncoderContext> ctx, std::vector<OutputInfo> outs,
                       int intent_k, int slot_k)
      : ctx_(std::move(ctx)), outs_(std::move(outs)), intent_k_(intent_k), slot_k_(slot_k) {}

  void Run(const PackedBatch& b, std::vector<Output>* outputs) override {
    ctx_->Run(b.input_ids.data(), b.token_type_ids.empty() ? nullptr : b.token_type_ids.data(),
              b.cu_seqlens.data(), b.batch(), &eo_);
    outputs->resize(outs_.size());
    Output& in = (*outputs)[intent_k_];
    in.name = outs_[intent_k_].name;
    in.kind = Output::Kind::kPerSequence;
    in.shape = {int64_t(b.batch()), outs_[intent_k_].inner_shape[0]};
    in.data.assign(eo_.intent_logits.begin(), eo_.intent_logits.end());
    Output& sl = (*outputs)[slot_k_];
    sl.name = outs_[slot_k_].name;
    sl.kind = Output::Kind::kPerToken;
    sl.shape = {int64_t(b.total_tokens()), outs_[slot_k_].inner_shape[0]};
    sl.data.assign(eo_.slot_logits.begin(), eo_.slot_logits.end());
  }

 private:
  std::unique_ptr<cuda::CudaEncoderContext> ctx_;
  std::vector<OutputInfo> outs_;
  int intent_k_, slot_k_;
  cuda::EncoderOutputs eo_;
};

class EncoderRunner : public GraphRunner {
 public:
  // extra_record: appended to the tuning record (an FP8 or INT8 plan's activation scales).
  EncoderRunner(std::shared_ptr<cuda::CudaEncoder> enc, std::vector<OutputInfo> outs, int intent_k,
                int slot_k, std::string describe, std::string extra_record = "")
      : enc_(std::move(enc)), outs_(std::move(outs)), intent_k_(intent_k), slot_k_(slot_k),
        describe_(std::move(describe)), extra_record_(std::move(extra_record)) {}

  std::unique_ptr<GraphRunnerContext> CreateContext() const override {
    return std::make_unique<EncoderRunnerContext>(enc_->CreateContext(), outs_, intent_k_,
                                                  slot_k_);
  }
  void Warmup(const std::vector<std::pair<int, int>>& shapes) override {
    const auto& o = enc_->options();
    std::vector<std::pair<int, int>> ok;
    for (auto [b, s] : shapes) {
      b = std::max(1, std::min(b, o.max_batch));
      s = std::max(1, std::min(s, o.max_seq));
      const int max_tokens = o.max_tokens ? o.max_tokens : o.max_batch * o.max_seq;
      if (int64_t(b) * s > max_tokens) b = std::max(1, max_tokens / s);
      ok.push_back({b, s});
    }
    enc_->CreateContext()->Warmup(ok);  // GEMM choices stay in the encoder's shared cache
  }
  std::string TuningRecord() const override {
    if (enc_->tuning_cache().size() == 0) return extra_record_;
    const std::string path = TempPath("the GEMM tuning record");
    enc_->tuning_cache().Save(path);
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    std::remove(path.c_str());
    return ss.str() + extra_record_;  // the cache's loader skips lines it does not know
  }
  std::string Describe() const override { return describe_; }

 private:
  std::shared_ptr<cuda::CudaEncoder> enc_;
  std::vector<OutputInfo> outs_;
  int intent_k_, slot_k_;
  std::string describe_;
  std::string extra_record_;
};

cuda::EncoderConfig ConfigOf(const BertEncoderGraph& m) {
  cuda::EncoderConfig c;
  c.layers = m.layers;
  c.hidden = m.hidden;
  c.heads = m.heads;
  c.intermediate = m.intermediate;
  c.vocab = m.vocab;
  c.max_pos = m.max_pos;
  c.type_vocab = m.type ? m.type_vocab : 1;
  c.n_intents = m.n_intents;
  c.n_slots = m.n_slots;
  c.pooler = m.pooler;
  c.eps = m.eps;
  return c;
}

// Why the encoder runner cannot take a matched graph ("" when it can).
std::string EncoderUnsupported(const BertEncoderGraph& m) {
  const cuda::EncoderConfig c = ConfigOf(m);
  try {
    c.Check();
  } catch (const Error& e) {
    return e.what();
  }
  const float want_scale = 1.f / std::sqrt(float(c.head_dim()));
  if (std::fabs(m.scale - want_scale) > 1e-4f * want_scale) {
    return "attention scale " + std::to_string(m.scale) + " is not 1/sqrt(head_dim) = " +
           std::to_string(want_scale);
  }
  if (c.head_dim() > 256) return "head size " + std::to_string(c.head_dim()) + " exceeds 256";
  return "";
}

std::unique_ptr<GraphRunner> MakeEncoderRunner(const BertEncoderGraph& m, const PlanInfo& info,
                                               const GraphOptions& opt) {
  const cuda::EncoderConfig c = ConfigOf(m);
  cuda::EncoderWeights w;
  w.word = Host(m.word);
  w.pos = Host(m.pos);
  w.type = m.type ? Host(m.type) : std::vector<float>(size_t(c.hidden), 0.f);
  w.emb_gamma = Host(m.emb_gamma);
  w.emb_beta = Host(m.emb_beta);
  for (const auto& L : m.layer) {
    cuda::EncoderWeights::Layer d;
    d.qkv_w = Host(L.qkv_w);
    d.qkv_b = Host(L.qkv_b);
    d.out_w = Host(L.out_w);
    d.out_b = Host(L.out_b);
    d.ln1_gamma = Host(L.ln1_gamma);
    d.ln1_beta = Host(L.ln1_beta);
    d.ff1_w = Host(L.ff1_w);
    d.ff1_b = Host(L.ff1_b);
    d.ff2_w = Host(L.ff2_w);
    d.ff2_b = Host(L.ff2_b);
    d.ln2_gamma = Host(L.ln2_gamma);
    d.ln2_beta = Host(L.ln2_beta);
    w.layers.push_back(std::move(d));
  }
  w.pooler_w = Host(m.pooler_w);
  w.pooler_b = Host(m.pooler_b);
  w.intent_w = Host(m.intent_w);
  w.intent_b = Host(m.intent_b);
  w.slot_w = Host(m.slot_w);
  w.slot_b = Host(m.slot_b);

  cuda::EncoderOptions o;
  o.dtype = info.precision == Precision::kFP16   ? DType::kF16
            : info.precision == Precision::kBF16 ? DType::kBF16
                                                 : DType::kF32;
  o.max_batch = info.profile.max_batch;
  o.max_seq = info.profile.max_seq;
  o.max_tokens = info.profile.max_batch * info.profile.max_seq;
  o.tune = opt.tune;
  o.timing_cache = opt.timing_cache;
  o.device = opt.device;
  // FP8 plans (encoder_quant.h): QKV/out/FFN GEMMs in E4M3, the rest FP16. The activation
  // scales travel in the plan's tuning record; a build (no record yet) calibrates them on the
  // device (amax) over the build's --calib text, or over seeded random token batches when none
  // was given, and records them, so a load needs no calibration data and gets the same scales.
  std::string scales_line, scales_source;
  if (info.precision == Precision::kFP8) {
    o.dtype = DType::kF16;
    o.quant = cuda::EncoderQuant::kFp8;
    const size_t n = size_t(c.layers) * cuda::kQuantGemmsPerLayer;
    scales_source = "scales from the plan";
    const bool from_plan = cuda::ParseQuantScalesLine(opt.tuning, o.quant, n, &o.act_scales);
    // Weight scaling and fast accumulation: what the plan records. A plan with scales but no
    // such line predates the choice: it was built per channel, and exact. A build takes the
    // build options (hotline build --fp8-weight-scaling / --fp8-fast-accum-max-k), else
    // HOTLINE_FP8_WEIGHT_SCALING, else the defaults (encoder.h); the choice is named in the
    // runner's description and recorded in the plan.
    if (!cuda::ParseFp8WeightScalingLine(opt.tuning, &o.fp8_weight_scaling)) {
      if (from_plan) {
        o.fp8_weight_scaling = cuda::WeightScaling::kPerChannel;
      } else if (!opt.fp8_weight_scaling.empty()) {
        o.fp8_weight_scaling = cuda::ParseWeightScaling(opt.fp8_weight_scaling);
      } else if (const char* env = std::getenv("HOTLINE_FP8_WEIGHT_SCALING"); env && *env) {
        o.fp8_weight_scaling = cuda::ParseWeightScaling(env);
      }
    }
    if (!cuda::ParseFp8FastAccumLine(opt.tuning, &o.fp8_fast_accum_max_k)) {
      if (from_plan) {
        o.fp8_fast_accum_max_k = 0;
      } else if (opt.fp8_fast_accum_max_k >= 0) {  // above every K: "every GEMM"
        o.fp8_fast_accum_max_k = std::min(opt.fp8_fast_accum_max_k, cuda::kFp8FastAccumAll);
      }
    }
    if (!from_plan) {
      std::vector<cuda::EncoderBatch> batches;
      if (!opt.calib_sequences.empty()) {
        // The build's calibration text (--calib): batches of up to 32 sequences, each cut to
        // the profile's longest sequence.
        for (size_t a = 0; a < opt.calib_sequences.size(); a += 32) {
          cuda::EncoderBatch b;
          b.cu.push_back(0);
          for (size_t k = a; k < std::min(opt.calib_sequences.size(), a + 32); ++k) {
            const auto& seq = opt.calib_sequences[k];
            const size_t len = std::min(seq.size(), size_t(std::max(1, o.max_seq)));
            if (len == 0) continue;
            b.ids.insert(b.ids.end(), seq.begin(), seq.begin() + len);
            b.cu.push_back(int32_t(b.ids.size()));
          }
          if (b.cu.size() > 1) batches.push_back(std::move(b));
        }
        scales_source = "scales calibrated (amax over " +
                        std::to_string(opt.calib_sequences.size()) + " calibration sequences)";
      } else {
        const int len = std::max(1, std::min(128, o.max_seq));
        batches = cuda::RandomEncoderBatches(c, 8, 32, len, 20261201);
        scales_source = "scales calibrated (amax, random tokens: no --calib text given)";
      }
      o.act_scales = cuda::ScalesFromAmax(cuda::CalibrateEncoderAmax(c, w, o, batches), o.quant);
    }
    scales_line = cuda::QuantScalesLine(o.quant, o.act_scales) +
                  cuda::Fp8WeightScalingLine(o.fp8_weight_scaling) +
                  cuda::Fp8FastAccumLine(o.fp8_fast_accum_max_k);
    scales_source += std::string(", fp8 weights ") + cuda::WeightScalingName(o.fp8_weight_scaling) +
                     (o.fp8_fast_accum_max_k >= cuda::kFp8FastAccumAll
                          ? std::string(", fast accumulation for every GEMM")
                      : o.fp8_fast_accum_max_k <= 0
                          ? std::string(", exact accumulation")
                          : ", fast accumulation for K <= " +
                                std::to_string(o.fp8_fast_accum_max_k));
  } else if (info.precision == Precision::kINT8) {
    // INT8 plans: the same four GEMMs in INT8 (IMMA, per-channel weight scales), scales amax /
    // 127 of the ranges the build calibrated with its --calib-method on the fp32 plan
    // (builder.cc, calib.cc: percentile by default, clipping INT8's outliers), handed over in
    // int8_act_amax; the runner records the scales in the tuning record like FP8's, and a load
    // takes them from there (the record wins over the plan's int8 ranges).
    o.dtype = DType::kF16;
    o.quant = cuda::EncoderQuant::kInt8;
    const size_t n = size_t(c.layers) * cuda::kQuantGemmsPerLayer;
    if (cuda::ParseQuantScalesLine(opt.tuning, o.quant, n, &o.act_scales)) {
      scales_source = "int8 scales from the plan";
    } else if (opt.int8_act_amax.size() == n) {
      o.act_scales = cuda::ScalesFromAmax(opt.int8_act_amax, o.quant);
      scales_source = "int8 scales from the build's calibration (" +
                      (opt.int8_calib.empty() ? std::string("?") : opt.int8_calib) + ")";
    } else {
      throw Error("backend cuda: this int8 plan records no activation scales for its " +
                      std::to_string(c.layers) + " layers (want " + std::to_string(n) +
                      " ranges, the plan has " + std::to_string(opt.int8_act_amax.size()) +
                      "): rebuild it with hotline build --backend cuda --precision int8 --calib",
                  Code::kFailedPrecondition);
    }
    scales_line = cuda::QuantScalesLine(o.quant, o.act_scales);
  }
  auto enc = cuda::CudaEncoder::Create(c, w, o);
  w = cuda::EncoderWeights();  // host copies are not needed any more
  if (!opt.tuning.empty()) {  // the plan's recorded choices: no timing for those shapes
    const std::string path = TempPath("the plan's GEMM tuning record");
    { std::ofstream(path) << opt.tuning; }
    enc->tuning_cache().Load(path);
    std::remove(path.c_str());
  }
  const std::string describe =
      "cuda encoder " + std::string(PrecisionName(info.precision)) + ": " +
      std::to_string(c.layers) + " layers, hidden " + std::to_string(c.hidden) + ", heads " +
      std::to_string(c.heads) + ", ffn " + std::to_string(c.intermediate) +
      (c.pooler ? ", pooler" : "") + ", GPU " + std::to_string(opt.device) + ", weights " +
      std::to_string(enc->weight_bytes() >> 20) + " MiB" +
      (scales_source.empty() ? "" : ", " + scales_source);
  return std::make_unique<EncoderRunner>(std::move(enc), info.outputs, m.intent_output,
                                         m.slot_output, describe, scales_line);
}

// Memoised TimeGemm results in a GemmTuningCache file (key "timegemm <tactic> MxKxN dtype").
std::string TimeKey(int tactic, int M, int K, int N, DType dt) {
  return "timegemm " + std::to_string(tactic) + " " + std::to_string(M) + "x" + std::to_string(K) +
         "x" + std::to_string(N) + " " + cuda::DTypeName(dt) + " bias";
}

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
    // FP8 E4M3 (sm_89+) and INT8 (IMMA, sm_80+ as our attention kernels): whole-encoder plans only (encoder_quant.h);
    // the INT8 plan keeps the fp32 graph and the calibrated ranges (builder.cc), the runner
    // quantises the weights.
    if (p == Precision::kFP8 && sm >= 89) return;
    if (p == Precision::kINT8 && sm >= 80) return;  // our kernels: cp.async, mma.m16n8k16
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
  // The executor starts every run with a copy: selecting the device there makes the ops that
  // follow on this thread launch on this backend's GPU (engines with several devices).
  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    CUDA_CHECK(cudaSetDevice(device_));
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    CUDA_CHECK(cudaSetDevice(device_));
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
  }
  void Synchronize() override {
    CUDA_CHECK(cudaSetDevice(device_));
    CUDA_CHECK(cudaDeviceSynchronize());
  }

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
    if (n.op == "Attention") return std::make_unique<AttentionOp>(n, s);
    if (n.op == "FirstToken") {
      FusedOpAttrs::From(n);
      return std::make_unique<FirstTokenOp>(s);
    }
    return std::make_unique<UnaryOp>(n, s);
  }

  std::unique_ptr<GraphRunner> PrepareGraph(const Graph& g, const PlanInfo& info,
                                            const GraphOptions& opt) override {
    BertEncoderGraph m;
    std::string why = MatchBertEncoder(g, info, &m);
    if (why.empty()) why = EncoderUnsupported(m);
    if (!why.empty()) {
      if (info.precision == Precision::kFP32) return nullptr;  // node by node
      throw Error("backend cuda runs " + std::string(PrecisionName(info.precision)) +
                      " plans only as a whole BERT encoder, and cannot run this graph so: " + why +
                      " (build it at fp32, or on the cpu backend)", Code::kUnimplemented);
    }
    GraphOptions o = opt;
    o.device = device_;
    return MakeEncoderRunner(m, info, o);
  }

  void UseTimingCache(const std::string& path) override {
    timing_cache_ = path;
    if (!path.empty()) {
      CUDA_CHECK(cudaSetDevice(device_));
      time_cache_.Load(path);  // a file of another GPU or library version is ignored
    }
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
    const std::string key = TimeKey(tactic, M, K, N, dt);
    cuda::GemmTuningCache::Entry hit;
    if (time_cache_.Find(key, &hit) && hit.ms > 0) return hit.ms;  // timed before on this GPU
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
    if (best > 0) {
      cuda::GemmTuningCache::Entry e{};
      e.ms = float(best);
      e.candidates = 1;
      time_cache_.Put(key, e);
      if (!timing_cache_.empty()) time_cache_.Save(timing_cache_);
    }
    return best;
  }

 private:
  int device_;
  cudaDeviceProp props_{};
  std::string timing_cache_;          // UseTimingCache's file ("" none)
  cuda::GemmTuningCache time_cache_;  // TimeGemm results, loaded from / saved to that file
  Shared shared_;  // outlives no op: ops are destroyed before their engine's backend
};

}  // namespace

std::unique_ptr<Backend> CreateCudaBackend(int device) {
  return std::make_unique<CudaBackend>(device);
}

}  // namespace hotline::engine
