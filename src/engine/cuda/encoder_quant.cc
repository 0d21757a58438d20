// Quantised layers of the CUDA encoder runner (see encoder_quant.h): weight upload, per-bucket
// preparation, the per-layer enqueue, and calibration of the activation ranges.
#include "engine/cuda/encoder_quant.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>

#include "base/error.h"
#include "engine/cuda/cuda_check.h"

namespace hotline::engine::cuda {

const char* QuantGemmInputName(int slot) {
  static const char* const kNames[] = {"qkv_in", "out_in", "ff1_in", "ff2_in"};
  return slot >= 0 && slot < kQuantGemmsPerLayer ? kNames[slot] : "?";
}

QuantType ToQuantType(EncoderQuant q) {
  if (q == EncoderQuant::kInt8) return QuantType::kInt8;
  if (q == EncoderQuant::kFp8) return QuantType::kFp8E4M3;
  throw Error("ToQuantType: the encoder is not quantised");
}

const char* EncoderQuantName(EncoderQuant q) {
  return q == EncoderQuant::kInt8 ? "int8" : q == EncoderQuant::kFp8 ? "fp8" : "none";
}

EncoderQuant ParseEncoderQuant(const std::string& name) {
  if (name == "int8") return EncoderQuant::kInt8;
  if (name == "fp8" || name == "fp8_e4m3") return EncoderQuant::kFp8;
  if (name == "none" || name.empty()) return EncoderQuant::kNone;
  throw Error("encoder quantisation: expected int8, fp8 or none, got '" + name + "'");
}

std::vector<float> ScalesFromAmax(const std::vector<float>& amax, EncoderQuant q) {
  const float qmax = QuantMax(ToQuantType(q));
  std::vector<float> s(amax.size());
  for (size_t i = 0; i < amax.size(); ++i) {
    if (!(amax[i] >= 0.f) || !std::isfinite(amax[i])) {
      throw Error("ScalesFromAmax: activation range " + std::to_string(i) + " is " +
                  std::to_string(amax[i]) + ", expected a finite value >= 0");
    }
    // An all-zero tensor quantises to zeros under any scale; keep the scale positive. FP8 keeps
    // 2x headroom (amax -> 224, not 448): E4M3's relative precision is the same at every
    // magnitude, so this costs nothing but protects values above the calibrated range.
    s[i] = std::max(amax[i], 1e-6f) / (q == EncoderQuant::kFp8 ? qmax / 2 : qmax);
  }
  return s;
}

std::vector<EncoderBatch> RandomEncoderBatches(const EncoderConfig& c, int count, int batch,
                                               int max_len, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<EncoderBatch> out(count);
  for (auto& b : out) {
    b.cu.assign(1, 0);
    for (int i = 0; i < batch; ++i) b.cu.push_back(b.cu.back() + 1 + int(rng() % max_len));
    for (int t = 0; t < b.cu.back(); ++t) {
      b.ids.push_back(int32_t(rng() % c.vocab));
      b.types.push_back(c.type_vocab > 1 ? int32_t(rng() % 2) : 0);
    }
  }
  return out;
}

std::vector<float> CalibrateEncoderAmax(const EncoderConfig& config, const EncoderWeights& weights,
                                        const EncoderOptions& options,
                                        const std::vector<EncoderBatch>& batches) {
  if (batches.empty()) throw Error("CalibrateEncoderAmax: no calibration batches");
  EncoderOptions o = options;
  o.quant = EncoderQuant::kNone;
  o.act_scales.clear();
  o.use_graphs = false;
  o.tune = false;
  o.timing_cache.clear();
  for (const auto& b : batches) {
    if (b.cu.size() < 2) throw Error("CalibrateEncoderAmax: a batch without sequences");
    o.max_batch = std::max(o.max_batch, int(b.cu.size()) - 1);
    o.max_tokens = std::max(o.max_tokens ? o.max_tokens : o.max_batch * o.max_seq, b.cu.back());
  }
  auto enc = CudaEncoder::Create(config, weights, o);
  auto ctx = enc->CreateContext();
  ctx->SetCalibration(true);
  EncoderOutputs out;
  for (const auto& b : batches) {
    ctx->Run(b.ids.data(), b.types.empty() ? nullptr : b.types.data(), b.cu.data(),
             int(b.cu.size()) - 1, &out);
  }
  return ctx->CalibrationAmax();
}

std::string Fp8WeightScalingLine(WeightScaling s) {
  return std::string("hotline-fp8-weight-scaling ") + WeightScalingName(s) + "\n";
}

bool ParseFp8WeightScalingLine(const std::string& record, WeightScaling* s) {
  std::istringstream in(record);
  const std::string head = "hotline-fp8-weight-scaling ";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(head, 0) != 0) continue;
    *s = ParseWeightScaling(line.substr(head.size()));  // throws on an unknown name
    return true;
  }
  return false;
}

std::string Fp8FastAccumLine(int max_k) {
  // Recorded within [0, kFp8FastAccumAll]: the same GEMMs, and a value every parse accepts.
  max_k = std::clamp(max_k, 0, kFp8FastAccumAll);
  return "hotline-fp8-fast-accum-max-k " + std::to_string(max_k) + "\n";
}

bool ParseFp8FastAccumLine(const std::string& record, int* max_k) {
  std::istringstream in(record);
  const std::string head = "hotline-fp8-fast-accum-max-k ";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(head, 0) != 0) continue;
    const std::string v = line.substr(head.size());
    char* end = nullptr;
    const long k = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || k < 0 || k > (1L << 30)) {
      throw Error("plan record: bad FP8 fast-accumulation line '" + line.substr(0, 80) +
                  "' (want a K bound >= 0)", Code::kInvalidArgument);
    }
    *max_k = int(k);
    return true;
  }
  return false;
}

std::string QuantScalesLine(EncoderQuant q, const std::vector<float>& scales) {
  std::string line = std::string("hotline-quant-scales ") + EncoderQuantName(q) + " " +
                     std::to_string(scales.size());
  char buf[32];
  for (float v : scales) {
    std::snprintf(buf, sizeof(buf), " %.9g", v);  // round-trips a float exactly
    line += buf;
  }
  return line + "\n";
}

bool ParseQuantScalesLine(const std::string& record, EncoderQuant q, size_t n,
                          std::vector<float>* scales) {
  std::istringstream in(record);
  const std::string head = std::string("hotline-quant-scales ") + EncoderQuantName(q) + " ";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(head, 0) != 0) continue;
    std::istringstream ls(line.substr(head.size()));
    size_t count = 0;
    if (!(ls >> count) || count != n) return false;
    std::vector<float> v(n);
    for (auto& x : v) {
      if (!(ls >> x) || !(x > 0.f) || !std::isfinite(x)) return false;
    }
    *scales = std::move(v);
    return true;
  }
  return false;
}

void CudaEncoder::UploadQuantLayer(const EncoderWeights::Layer& w, int l, Layer* d) {
  const int H = cfg_.hidden, I = cfg_.intermediate;
  const size_t want = size_t(cfg_.layers) * kQuantGemmsPerLayer;
  if (opt_.act_scales.size() != want) {
    throw Error(std::string("encoder options: a ") + EncoderQuantName(opt_.quant) +
                " encoder needs " + std::to_string(want) +
                " activation scales ([layers][4]: qkv_in, out_in, ff1_in, ff2_in), got " +
                std::to_string(opt_.act_scales.size()));
  }
  const QuantType q = ToQuantType(opt_.quant);
  const DType dt = opt_.dtype;
  const int rows = std::min(opt_.max_tokens ? opt_.max_tokens : opt_.max_batch * opt_.max_seq,
                            QuantGemm::kMaxRows);
  const float* s = opt_.act_scales.data() + size_t(l) * kQuantGemmsPerLayer;
  // Exact GELU for FP32 or when asked (our epilogue); else the tanh form cuBLASLt fuses.
  const GemmEpilogue gelu = (dt == DType::kF32 || opt_.exact_gelu) ? GemmEpilogue::kBiasGelu
                                                                   : GemmEpilogue::kBiasGeluTanh;
  const bool fp8 = q == QuantType::kFp8E4M3;
  const WeightScaling sc = fp8 ? opt_.fp8_weight_scaling : WeightScaling::kPerChannel;
  // Fast accumulation per GEMM by its K (EncoderOptions::fp8_fast_accum_max_k).
  auto fa = [&](int K) { return fp8 && K <= opt_.fp8_fast_accum_max_k; };
  if (qkv_interleaved_) {
    // Head groups: QKV columns stored per head, [Q_h K_h V_h] for h = 0..heads-1 (column c of
    // part p (Q, K, V), head h, offset d moves to h * 3D + p * D + d); per-channel scales and
    // bias move with their columns (a per-tensor scale is the same over any order). Group g of
    // G is then the contiguous column range of its heads: a view of the one GEMM.
    const int D = cfg_.head_dim(), heads = cfg_.heads;
    std::vector<float> pw(w.qkv_w.size()), pb(3 * size_t(H));
    for (int c = 0; c < 3 * H; ++c) {
      const int p = c / H, h = (c % H) / D, d = c % D;
      const int nc = h * 3 * D + p * D + d;
      pb[nc] = w.qkv_b[c];
      for (int k = 0; k < H; ++k) pw[size_t(k) * 3 * H + nc] = w.qkv_w[size_t(k) * 3 * H + c];
    }
    d->qqkv = std::make_unique<QuantGemm>(pw.data(), H, 3 * H, pb.data(), GemmEpilogue::kBias, q,
                                          s[0], dt, rows, sc, fa(H));
    d->qqkv->SetTuning(&cache_, opt_.tune);  // before the views: they take the parent's
    for (int G = 2; G <= heads; ++G) {
      if (!ValidQkvGroups(G)) continue;
      const int width = heads / G * 3 * D;
      auto& views = d->qkv_groups[G];
      for (int g = 0; g < G; ++g)
        views.push_back(std::make_unique<QuantGemm>(*d->qqkv, g * width, width));
    }
  } else {
    d->qqkv = std::make_unique<QuantGemm>(w.qkv_w.data(), H, 3 * H, w.qkv_b.data(),
                                          GemmEpilogue::kBias, q, s[0], dt, rows, sc, fa(H));
    d->qqkv->SetTuning(&cache_, opt_.tune);
  }
  d->qout = std::make_unique<QuantGemm>(w.out_w.data(), H, H, w.out_b.data(), GemmEpilogue::kBias,
                                        q, s[1], dt, rows, sc, fa(H));
  d->qff1 = std::make_unique<QuantGemm>(w.ff1_w.data(), H, I, w.ff1_b.data(), gelu, q, s[2], dt,
                                        rows, sc, fa(H));
  d->qff2 = std::make_unique<QuantGemm>(w.ff2_w.data(), I, H, w.ff2_b.data(), GemmEpilogue::kBias,
                                        q, s[3], dt, rows, sc, fa(I));
  // Their choices go into the encoder's timing cache with the FP16 GEMMs' (saved to
  // EncoderOptions::timing_cache after each bucket), so another process skips the FP8 search.
  for (QuantGemm* g : {d->qout.get(), d->qff1.get(), d->qff2.get()}) {
    g->SetTuning(&cache_, opt_.tune);
  }
  if (q == QuantType::kFp8E4M3 && opt_.quant_fp8_output && dt != DType::kF32) {
    d->qff1->SetQuantisedOutput(s[3]);  // FFN1 writes FFN2's E4M3 input where cuBLASLt can
  }
}

bool CudaEncoder::ValidQkvGroups(int G) const {
  const int heads = cfg_.heads;
  return G >= 1 && G <= heads && heads % G == 0 && (heads / G * 3 * cfg_.head_dim()) % 16 == 0;
}

bool CudaEncoder::WantQkvGroups() const {
  const int T = opt_.max_tokens ? opt_.max_tokens : opt_.max_batch * opt_.max_seq;
  if (opt_.quant == EncoderQuant::kNone || opt_.quant_qkv_group_tokens <= 0 ||
      T <= opt_.quant_qkv_group_tokens || !opt_.quant_fuse_attention ||
      !AttentionQuantSupported(opt_.dtype, cfg_.head_dim())) {
    return false;
  }
  for (int G = 2; G <= cfg_.heads; ++G)
    if (ValidQkvGroups(G)) return true;
  return false;
}

int CudaEncoder::QkvGroups(int Tb) const {
  if (!qkv_interleaved_ || Tb <= opt_.quant_qkv_group_tokens) return 1;
  // The smallest G whose group QKV output [Tb, 3H/G] (dtype) and 8-bit context [Tb, H] take no
  // more than an ungrouped bucket of quant_qkv_group_tokens tokens ([threshold, 3H], dtype).
  const double es = double(DTypeSize(opt_.dtype)), H = cfg_.hidden;
  const double limit = double(opt_.quant_qkv_group_tokens) * 3 * H * es;
  int best = 1;
  for (int G = 2; G <= cfg_.heads; ++G) {
    if (!ValidQkvGroups(G)) continue;
    best = G;
    if (double(Tb) * (3 * H / G * es + H) <= limit) return G;
  }
  return best;  // none fits: the finest grouping there is
}

int CudaEncoder::FfnChunkRows(int Tb, bool e4m3_out) const {
  const int C = opt_.quant_ffn_chunk_rows;
  if (opt_.quant == EncoderQuant::kNone || C <= 0 || Tb <= C) return Tb;
  const size_t es = DTypeSize(opt_.dtype), I = cfg_.intermediate;
  const size_t budget = size_t(C) * I * (es + 1);
  const size_t row = e4m3_out ? I : I * (es + 1);
  int most = int(std::min<size_t>(budget / row, size_t(Tb)));
  if (most >= Tb) return Tb;
  if (most >= 64) most = most / 64 * 64;  // chunks start at 64-row boundaries
  const int n = (Tb + most - 1) / most;
  const int rows = (Tb + n - 1) / n;      // equal chunks: <= most
  return most >= 64 ? std::min(most, (rows + 63) / 64 * 64) : rows;
}

std::vector<int> CudaEncoder::FfnCalls(int Tb, int C) {
  std::vector<int> r{C};
  if (Tb % C) r.push_back(Tb % C);
  return r;
}

int CudaEncoder::FfnRows(int Tb) const {
  const int C = FfnChunkRows(Tb);
  if (!Ffn1MayWriteE4M3()) return C;
  const int Ce = FfnChunkRows(Tb, true);
  for (const auto& L : layers_) {
    for (int m : FfnCalls(Tb, Ce)) {
      if (!L.qff1 || !L.qff1->QuantisedOutput(m)) return C;
    }
  }
  return Ce;
}

bool CudaEncoder::Ffn1MayWriteE4M3() const {
  // Per tensor only: cuBLASLt 13.1 refuses an E4M3 D with per-channel (outer-vector) scales, so
  // a per-channel encoder would prepare FFN1 at row counts it never runs.
  return opt_.quant == EncoderQuant::kFp8 && opt_.quant_fp8_output && opt_.dtype != DType::kF32 &&
         opt_.fp8_weight_scaling == WeightScaling::kPerTensor;
}

namespace {
size_t Align256(size_t n) { return (n + 255) & ~size_t(255); }

// Every token bucket a context of max_tokens can run (CudaEncoderContext::TokenBucket's values).
std::vector<int> AllBuckets(int max_tokens) {
  std::vector<int> b;
  for (int t = 1; t <= max_tokens; ++t) {
    const int tb = CudaEncoderContext::TokenBucket(t, max_tokens);
    if (b.empty() || b.back() != tb) b.push_back(tb);
  }
  return b;
}
}  // namespace

// d_u_ of a quantised encoder, per bucket Tb with G = QkvGroups(Tb), m = FfnChunkRows(Tb):
//   attention: ungrouped [Tb, 3H] QKV (+ [Tb, H] context in dtype unless the attention writes
//     its 8-bit output straight into d_xq_, as it always does with head groups); grouped:
//     [Tb, 3H/G] QKV then the [Tb, H] 8-bit context (d_xq_ still holds the QKV input);
//   FFN: chunks (quant_ffn_chunk_rows > 0): [m, I] FFN1 output then its [m, I] 8-bit copy;
//     else [Tb, I] (the 8-bit copy, where needed, in d_xq_ffn_);
//   slot head: [Tb, ns_pad].
size_t CudaEncoderContext::QuantUnionBytes() const {
  const CudaEncoder& e = *enc_;
  const EncoderConfig& c = e.cfg_;
  const size_t es = DTypeSize(e.opt_.dtype), H = c.hidden, I = c.intermediate;
  size_t need = 0;
  for (int tb : AllBuckets(max_tokens_)) {
    const size_t Tb = tb, G = e.QkvGroups(tb), m = e.FfnChunkRows(tb);
    size_t att = e.qkv_interleaved_ ? Tb * 3 * H * es : Tb * 4 * H * es;
    if (G > 1) att = Align256(Tb * 3 * H / G * es) + Tb * H;
    size_t ffn = e.opt_.quant_ffn_chunk_rows > 0 ? Align256(m * I * es) + m * I : Tb * I * es;
    // FFN1 writing E4M3 (decided per bucket at PrepareQuant): its chunk's [me, I] 8-bit output.
    if (e.Ffn1MayWriteE4M3()) ffn = std::max(ffn, size_t(e.FfnChunkRows(tb, true)) * I);
    need = std::max({need, att, ffn, Tb * size_t(ns_pad_) * es});
  }
  return need;
}

// The int32/FP32 scratch: the largest row block times N of any quantised GEMM call, over every
// bucket (rows per call: RunQuantGemm's acc_rows_ pieces; FFN calls within their chunks).
size_t CudaEncoderContext::QuantAccBytes() const {
  const CudaEncoder& e = *enc_;
  const EncoderConfig& c = e.cfg_;
  const size_t H = c.hidden, I = c.intermediate;
  const size_t a = size_t(acc_rows_);
  size_t need = 0;
  for (int tb : AllBuckets(max_tokens_)) {
    const size_t Tb = tb, G = e.QkvGroups(tb);
    const size_t m = std::max(e.FfnChunkRows(tb), e.Ffn1MayWriteE4M3() ? e.FfnChunkRows(tb, true)
                                                                       : 0);
    need = std::max({need, std::min(Tb, a) * 3 * H / G, std::min(Tb, a) * H,
                     std::min(m, a) * std::max(I, H)});
  }
  return need * 4;
}

std::vector<std::string> CudaEncoder::QuantPaths(int M) const {
  std::vector<std::string> r;
  if (layers_.empty() || !layers_[0].qqkv) return r;
  const Layer& L = layers_[0];
  const int G = QkvGroups(M), C = FfnRows(M);
  const std::string rows = C < M ? " (rows in chunks of " + std::to_string(C) + ")" : "";
  if (G > 1) {
    r.push_back("qkv: " + std::to_string(G) + " head groups of " +
                std::to_string(L.qkv_groups.at(G)[0]->N()) + " columns: " +
                L.qkv_groups.at(G)[0]->path(M));
  } else {
    r.push_back("qkv: " + L.qqkv->path(M));
  }
  r.push_back("out: " + L.qout->path(M));
  r.push_back("ff1: " + L.qff1->path(C) + rows);
  r.push_back("ff2: " + L.qff2->path(C) + rows);
  return r;
}

void CudaEncoderContext::SetCalibration(bool on) {
  if (on && enc_->opt_.quant != EncoderQuant::kNone) {
    throw Error("calibration runs on an unquantised encoder");
  }
  if (on && !calibrating_) {
    CUDA_CHECK(cudaMemsetAsync(d_amax_, 0, size_t(enc_->cfg_.layers) * kQuantGemmsPerLayer * 4,
                               stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  calibrating_ = on;
}

std::vector<float> CudaEncoderContext::CalibrationAmax() const {
  std::vector<float> a(size_t(enc_->cfg_.layers) * kQuantGemmsPerLayer);
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  CUDA_CHECK(cudaMemcpy(a.data(), d_amax_, a.size() * 4, cudaMemcpyDeviceToHost));
  return a;
}

void CudaEncoderContext::RecordAmax(const void* x, int64_t n, int slot) {
  AbsMaxAccumulate(enc_->opt_.dtype, x, n, d_amax_ + slot, stream_);
}

double CudaEncoder::LayerGemmMs(int M) const {
  if (layers_.empty()) return -1;
  const Layer& L = layers_[0];
  double ms = 0;
  bool all = true;
  auto add = [&](float v) {
    all = all && v > 0.f;
    ms += v;
  };
  if (!L.qqkv) {
    add(L.qkv->ChosenMs(M, false));
    add(L.out->ChosenMs(M, true));
    add(L.ff1->ChosenMs(M, false));
    add(L.ff2->ChosenMs(M, true));
    return all ? ms : -1;
  }
  const int G = QkvGroups(M);
  if (G == 1) {
    add(L.qqkv->Tuning(M, false).ms);
  } else {
    for (const auto& v : L.qkv_groups.at(G)) add(v->Tuning(M, false).ms);
  }
  add(L.qout->Tuning(M, true).ms);
  for (int m : FfnCalls(M, FfnRows(M))) {
    add(L.qff1->Tuning(m, false).ms);
    add(L.qff2->Tuning(m, true).ms);
  }
  return all ? ms : -1;
}

bool CudaEncoder::FuseLayerNormQuant() const {
  return opt_.quant_fuse_layernorm && LayerNormQuantSupported(cfg_.hidden);
}

// Prepares the quantised GEMMs for Tb rows. A GEMM on a scratch-accumulating path runs in row
// chunks of acc_rows_ (quant_chunk_rows), so each chunk size is prepared too; the scratch is
// allocated here (outside capture) the first time a bucket needs it, for the largest N.
void CudaEncoderContext::PrepareQuant(int Tb) {
  CudaEncoder& e = *enc_;
  LtWorkspace& ws = *ws_;
  const int chunk_opt = e.opt_.quant_chunk_rows > 0 ? e.opt_.quant_chunk_rows : max_tokens_;
  if (acc_rows_ == 0) acc_rows_ = std::min(chunk_opt, max_tokens_);
  bool need_acc = false, need_xq_ffn = false;
  // Prepares what RunQuantGemm(g, M rows) will run.
  auto prepare = [&](QuantGemm* g, int M, bool res) {
    if (M > acc_rows_) {  // chunk size first: a scratch path never prepares all M rows
      g->Prepare(acc_rows_, res, ws, stream_);
      const bool fused = g->Fused(acc_rows_, res);
      if (fused) g->Prepare(M, res, ws, stream_);
      if (!fused || !g->Fused(M, res)) {
        need_acc = true;
        if (M % acc_rows_) g->Prepare(M % acc_rows_, res, ws, stream_);
      }
      return;
    }
    g->Prepare(M, res, ws, stream_);
    if (!g->Fused(M, res)) need_acc = true;
  };
  const int G = e.QkvGroups(Tb);
  // FFN chunk rows: FFN1 writing E4M3 takes a third of the bytes per row, so more rows per
  // chunk fit the same buffer; only where cuBLASLt grants the E4M3 output at those row counts,
  // which preparing FFN1 at them decides (FfnRows reads the answer).
  if (e.Ffn1MayWriteE4M3()) {
    for (auto& L : e.layers_) {
      for (int m : CudaEncoder::FfnCalls(Tb, e.FfnChunkRows(Tb, true))) {
        prepare(L.qff1.get(), m, false);
      }
    }
  }
  const std::vector<int> ffn_rows = CudaEncoder::FfnCalls(Tb, e.FfnRows(Tb));
  for (auto& L : e.layers_) {
    if (G == 1) {
      prepare(L.qqkv.get(), Tb, false);
    } else {
      for (auto& v : L.qkv_groups.at(G)) prepare(v.get(), Tb, false);
    }
    prepare(L.qout.get(), Tb, true);
    for (int m : ffn_rows) {
      prepare(L.qff1.get(), m, false);
      prepare(L.qff2.get(), m, true);
      need_xq_ffn = need_xq_ffn || !L.qff1->QuantisedOutput(m);
    }
  }
  if (need_xq_ffn && !xq_ffn_in_u_ && !d_xq_ffn_) {
    const size_t bytes = size_t(max_tokens_) * e.cfg_.intermediate;
    CUDA_CHECK(cudaMalloc(&d_xq_ffn_, bytes));
    device_bytes_ += bytes;
  }
  if (need_acc && !d_acc_) {
    const size_t bytes = QuantAccBytes();  // every bucket's largest call: allocated once
    CUDA_CHECK(cudaMalloc(&d_acc_, bytes));
    device_bytes_ += bytes;
  }
}

void CudaEncoderContext::RunQuantGemm(QuantGemm& g, const void* xq, int M, void* y,
                                      const void* residual) {
  LtWorkspace& ws = *ws_;
  const bool res = residual != nullptr;
  if (M <= acc_rows_ || g.Fused(M, res)) {
    g.Run(xq, M, y, residual, d_acc_, ws, stream_);
    return;
  }
  const size_t es = DTypeSize(enc_->opt_.dtype);
  for (int r0 = 0; r0 < M; r0 += acc_rows_) {
    const int m = std::min(acc_rows_, M - r0);
    const size_t yoff = size_t(r0) * g.N() * es;
    g.Run(static_cast<const char*>(xq) + size_t(r0) * g.K(), m, static_cast<char*>(y) + yoff,
          res ? static_cast<const char*>(residual) + yoff : nullptr, d_acc_, ws, stream_);
  }
}

void CudaEncoderContext::EnqueueQuantLayer(int l, int Tb, int Sb, int Bb) {
  CudaEncoder& e = *enc_;
  const EncoderConfig& c = e.cfg_;
  const DType dt = e.opt_.dtype;
  const QuantType q = ToQuantType(e.opt_.quant);
  const size_t es = DTypeSize(dt);
  const int H = c.hidden, I = c.intermediate;
  auto& L = e.layers_[l];
  cudaStream_t s = stream_;
  void* qkv = d_u_;
  void* ctx = static_cast<char*>(d_u_) + size_t(Tb) * 3 * H * es;
  const float scale = 1.f / std::sqrt(float(c.head_dim()));
  const int64_t TH = int64_t(Tb) * H;
  // Fused LayerNorms: the previous layer's LN2 (layer 0: the embedding, Enqueue) already wrote
  // this layer's QKV input.
  const bool fuse = e.FuseLayerNormQuant();
  if (!fuse) QuantizeActivations(dt, d_x_, TH, L.qqkv->x_scale(), q, d_xq_, s);
  if (e.qkv_interleaved_ && !AttentionQuantSupported(dt, c.head_dim())) {
    throw Error("quantised encoder: its QKV weights are stored per head (quant_qkv_group_tokens "
                "> 0 at creation), which needs the quantised-output attention kernel (attention "
                "variant 1 or 2); create the encoder with quant_qkv_group_tokens = 0 to run with "
                "another attention variant", Code::kFailedPrecondition);
  }
  const int G = e.QkvGroups(Tb);
  void* cq = d_xq_;  // the output GEMM's 8-bit input (the attention context)
  if (G > 1) {
    // Head groups: group g's [Tb, 3H/G] QKV in U, its heads' context columns into an 8-bit
    // [Tb, H] context after it (d_xq_ holds the QKV input until the last group has run).
    cq = static_cast<char*>(d_u_) + Align256(size_t(Tb) * 3 * H / G * es);
    // Attention writes no row outside every sequence: zero them (the region held the FFN's
    // bytes, which as E4M3 may be NaN codes) so padding rows compute on defined, finite values
    // as everywhere else (~2% of the layer's memory traffic; only buckets above the threshold).
    CUDA_CHECK(cudaMemsetAsync(cq, 0, size_t(Tb) * H, s));
    const int hg = c.heads / G, width = hg * c.head_dim();
    const auto& views = L.qkv_groups.at(G);
    for (int g = 0; g < G; ++g) {
      RunQuantGemm(*views[g], d_xq_, Tb, qkv, nullptr);
      AttentionQuant(dt, qkv, d_cu_, Bb, Sb, hg, c.head_dim(), scale, L.qout->x_scale(), q,
                     static_cast<char*>(cq) + size_t(g) * width, s, true, H);
    }
  } else {
    RunQuantGemm(*L.qqkv, d_xq_, Tb, qkv, nullptr);
    if (e.qkv_interleaved_ ||
        (e.opt_.quant_fuse_attention && AttentionQuantSupported(dt, c.head_dim()))) {
      // The attention output straight in 8 bits: the output GEMM's input, no quantise pass.
      AttentionQuant(dt, qkv, d_cu_, Bb, Sb, c.heads, c.head_dim(), scale, L.qout->x_scale(), q,
                     d_xq_, s, e.qkv_interleaved_);
    } else {
      Attention(dt, qkv, d_cu_, Bb, Sb, c.heads, c.head_dim(), scale, ctx, s);
      QuantizeActivations(dt, ctx, TH, L.qout->x_scale(), q, d_xq_, s);
    }
  }
  RunQuantGemm(*L.qout, cq, Tb, d_x_, d_x_);  // x = ctx . Wo + bo + x, in place
  if (fuse) {
    LayerNormQuant(dt, d_x_, Tb, H, L.ln1_g, L.ln1_b, c.eps, L.qff1->x_scale(), q, d_xq_, s);
  } else {
    LayerNorm(dt, d_x_, nullptr, nullptr, L.ln1_g, L.ln1_b, c.eps, Tb, H, d_x_, s);
    QuantizeActivations(dt, d_x_, TH, L.qff1->x_scale(), q, d_xq_, s);
  }
  // FFN in row chunks of C (one chunk when off): rows are independent, x += FFN(x) in place.
  const int C = e.FfnRows(Tb);
  for (int r0 = 0; r0 < Tb; r0 += C) {
    const int m = std::min(C, Tb - r0);
    const void* xin = static_cast<const char*>(d_xq_) + size_t(r0) * H;
    void* xo = static_cast<char*>(d_x_) + size_t(r0) * H * es;
    if (L.qff1->QuantisedOutput(m)) {  // GELU output straight in E4M3, into U (free now)
      RunQuantGemm(*L.qff1, xin, m, d_u_, nullptr);
      RunQuantGemm(*L.qff2, d_u_, m, xo, xo);
    } else {
      void* uq = xq_ffn_in_u_ ? static_cast<char*>(d_u_) + Align256(size_t(m) * I * es)
                              : d_xq_ffn_;
      RunQuantGemm(*L.qff1, xin, m, d_u_, nullptr);
      QuantizeActivations(dt, d_u_, int64_t(m) * I, L.qff2->x_scale(), q, uq, s);
      RunQuantGemm(*L.qff2, uq, m, xo, xo);
    }
  }
  if (fuse && l + 1 < int(e.layers_.size())) {  // also the next layer's QKV input
    LayerNormQuant(dt, d_x_, Tb, H, L.ln2_g, L.ln2_b, c.eps, e.layers_[l + 1].qqkv->x_scale(), q,
                   d_xq_, s);
  } else {
    LayerNorm(dt, d_x_, nullptr, nullptr, L.ln2_g, L.ln2_b, c.eps, Tb, H, d_x_, s);
  }
}

}  // namespace hotline::engine::cuda
