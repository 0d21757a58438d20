// The graph-captured CUDA encoder runner (see encoder.h).
#include "engine/cuda/encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "base/error.h"
#include "engine/cuda/cuda_check.h"

namespace hotline::engine::cuda {
namespace {

size_t Align(size_t n) { return (n + 255) & ~size_t(255); }
int RoundUp(int n, int m) { return (n + m - 1) / m * m; }

void CheckSize(const std::vector<float>& v, size_t want, const std::string& name) {
  if (v.size() != want) {
    throw Error("encoder weights: " + name + " has " + std::to_string(v.size()) +
                " values, expected " + std::to_string(want));
  }
}

// Words rounded up to whole 16-byte units (4 words).
size_t R4(size_t words) { return (words + 3) / 4 * 4; }

// Words of the packed staging regions for any bucket up to T tokens and B sequences
// (CudaEncoderContext::PointStaging's layouts; R4 is monotone, so the largest bucket's is the
// largest).
size_t StagingInWords(size_t T, size_t B) { return 2 * R4(T) + R4(B + 1); }
size_t StagingOutWords(size_t T, size_t B, size_t n_intents, size_t n_slots) {
  return 2 * R4(B * n_intents) + R4(B) + R4(T * n_slots) + R4(T);
}

// Carves aligned pieces out of one allocation.
struct Carver {
  char* base;
  size_t off = 0;
  template <typename T>
  T* Take(size_t bytes) {
    T* p = reinterpret_cast<T*>(base ? base + off : nullptr);
    off += Align(bytes);
    return p;
  }
};

}  // namespace

void EncoderConfig::Check() const {
  auto bad = [](const std::string& what) { throw Error("encoder config: " + what); };
  if (layers < 1 || hidden < 1 || heads < 1 || intermediate < 1) bad("sizes must be positive");
  if (hidden % heads) bad("hidden " + std::to_string(hidden) + " is not a multiple of heads " +
                          std::to_string(heads));
  if (hidden % 8 || (hidden / heads) % 8 || intermediate % 8) {
    bad("hidden, head size and intermediate must be multiples of 8 (16-byte rows), got " +
        std::to_string(hidden) + ", " + std::to_string(hidden / heads) + ", " +
        std::to_string(intermediate));
  }
  if (vocab < 1 || max_pos < 1 || type_vocab < 1 || n_intents < 1 || n_slots < 1) {
    bad("vocab, max_pos, type_vocab, n_intents and n_slots must be positive");
  }
}

void EncoderWeights::Check(const EncoderConfig& c) const {
  const size_t H = c.hidden, I = c.intermediate;
  CheckSize(word, size_t(c.vocab) * H, "word embeddings");
  CheckSize(pos, size_t(c.max_pos) * H, "position embeddings");
  CheckSize(type, size_t(c.type_vocab) * H, "token type embeddings");
  CheckSize(emb_gamma, H, "embedding LayerNorm gamma");
  CheckSize(emb_beta, H, "embedding LayerNorm beta");
  if (layers.size() != size_t(c.layers)) {
    throw Error("encoder weights: " + std::to_string(layers.size()) + " layers, config says " +
                std::to_string(c.layers));
  }
  for (size_t l = 0; l < layers.size(); ++l) {
    const auto& L = layers[l];
    const std::string p = "layer " + std::to_string(l) + " ";
    CheckSize(L.qkv_w, H * 3 * H, p + "qkv weight");
    CheckSize(L.qkv_b, 3 * H, p + "qkv bias");
    CheckSize(L.out_w, H * H, p + "attention output weight");
    CheckSize(L.out_b, H, p + "attention output bias");
    CheckSize(L.ln1_gamma, H, p + "LayerNorm 1 gamma");
    CheckSize(L.ln1_beta, H, p + "LayerNorm 1 beta");
    CheckSize(L.ff1_w, H * I, p + "FFN1 weight");
    CheckSize(L.ff1_b, I, p + "FFN1 bias");
    CheckSize(L.ff2_w, I * H, p + "FFN2 weight");
    CheckSize(L.ff2_b, H, p + "FFN2 bias");
    CheckSize(L.ln2_gamma, H, p + "LayerNorm 2 gamma");
    CheckSize(L.ln2_beta, H, p + "LayerNorm 2 beta");
  }
  if (c.pooler) {
    CheckSize(pooler_w, H * H, "pooler weight");
    CheckSize(pooler_b, H, "pooler bias");
  }
  CheckSize(intent_w, H * c.n_intents, "intent head weight");
  CheckSize(intent_b, size_t(c.n_intents), "intent head bias");
  CheckSize(slot_w, H * c.n_slots, "slot head weight");
  CheckSize(slot_b, size_t(c.n_slots), "slot head bias");
}

EncoderWeights EncoderWeights::Random(const EncoderConfig& c, uint64_t seed, float scale) {
  c.Check();
  std::mt19937_64 rng(seed);
  // A fast generator per tensor (mt19937 over 100M values would take seconds).
  auto fill = [&](size_t n, float center, float s) {
    std::vector<float> v(n);
    uint64_t x = rng() | 1;
    for (auto& f : v) {
      x ^= x << 13; x ^= x >> 7; x ^= x << 17;
      f = center + s * (float(x >> 40) * (2.f / 16777216.f) - 1.f);
    }
    return v;
  };
  const size_t H = c.hidden, I = c.intermediate;
  EncoderWeights w;
  w.word = fill(size_t(c.vocab) * H, 0.f, scale);
  w.pos = fill(size_t(c.max_pos) * H, 0.f, scale);
  w.type = fill(size_t(c.type_vocab) * H, 0.f, scale);
  w.emb_gamma = fill(H, 1.f, 0.1f);
  w.emb_beta = fill(H, 0.f, 0.1f);
  for (int l = 0; l < c.layers; ++l) {
    Layer L;
    L.qkv_w = fill(H * 3 * H, 0.f, scale);
    L.qkv_b = fill(3 * H, 0.f, scale);
    L.out_w = fill(H * H, 0.f, scale);
    L.out_b = fill(H, 0.f, scale);
    L.ln1_gamma = fill(H, 1.f, 0.1f);
    L.ln1_beta = fill(H, 0.f, 0.1f);
    L.ff1_w = fill(H * I, 0.f, scale);
    L.ff1_b = fill(I, 0.f, scale);
    L.ff2_w = fill(I * H, 0.f, scale);
    L.ff2_b = fill(H, 0.f, scale);
    L.ln2_gamma = fill(H, 1.f, 0.1f);
    L.ln2_beta = fill(H, 0.f, 0.1f);
    w.layers.push_back(std::move(L));
  }
  if (c.pooler) {
    w.pooler_w = fill(H * H, 0.f, scale);
    w.pooler_b = fill(H, 0.f, scale);
  }
  w.intent_w = fill(H * c.n_intents, 0.f, scale * 4);
  w.intent_b = fill(c.n_intents, 0.f, scale);
  w.slot_w = fill(H * c.n_slots, 0.f, scale * 4);
  w.slot_b = fill(c.n_slots, 0.f, scale);
  return w;
}

std::shared_ptr<CudaEncoder> CudaEncoder::Create(const EncoderConfig& config,
                                                 const EncoderWeights& weights,
                                                 const EncoderOptions& options) {
  config.Check();
  weights.Check(config);
  if (options.max_batch < 1 || options.max_seq < 1 || options.max_tokens < 0) {
    throw Error("encoder options: max_batch and max_seq must be >= 1, got " +
                std::to_string(options.max_batch) + ", " + std::to_string(options.max_seq));
  }
  if (options.quant_ffn_chunk_rows < 0 || options.quant_qkv_group_tokens < 0) {
    throw Error("encoder options: quant_ffn_chunk_rows and quant_qkv_group_tokens must be >= 0 "
                "(0 = off), got " + std::to_string(options.quant_ffn_chunk_rows) + ", " +
                std::to_string(options.quant_qkv_group_tokens));
  }
  if (options.max_seq > config.max_pos) {
    throw Error("encoder options: max_seq " + std::to_string(options.max_seq) +
                " exceeds the position table (" + std::to_string(config.max_pos) + ")");
  }
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  if (options.device < 0 || options.device >= count) {
    throw Error("encoder options: CUDA device " + std::to_string(options.device) +
                " does not exist (" + std::to_string(count) + " devices)", Code::kNotFound);
  }
  CUDA_CHECK(cudaSetDevice(options.device));
  std::shared_ptr<CudaEncoder> enc(new CudaEncoder(config, options));
  if (!options.timing_cache.empty()) enc->cache_.Load(options.timing_cache);
  enc->cache_saved_gen_ = enc->cache_.generation();
  enc->Upload(weights);
  return enc;
}

CudaEncoder::~CudaEncoder() {
  cudaFree(word_);
  cudaFree(word_scale_);
  cudaFree(pos_);
  cudaFree(type_);
  cudaFree(ln_params_);
}

void CudaEncoder::Upload(const EncoderWeights& w) {
  const DType dt = opt_.dtype;
  const size_t es = DTypeSize(dt), H = cfg_.hidden;
  auto table = [&](const std::vector<float>& v, void** dst) {
    CUDA_CHECK(cudaMalloc(dst, v.size() * es));
    table_bytes_ += v.size() * es;
    float* tmp = nullptr;
    CUDA_CHECK(cudaMalloc(&tmp, v.size() * sizeof(float)));
    cudaMemcpy(tmp, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice);
    ConvertFromF32(tmp, int64_t(v.size()), dt, *dst, nullptr);
    const cudaError_t err = cudaDeviceSynchronize();
    cudaFree(tmp);
    CUDA_CHECK(err);
  };
  if (opt_.quant != EncoderQuant::kNone) {
    // Quantised encoders: the word table in INT8, symmetric per row (scale = max |row| / 127,
    // nearest-even; an all-zero row keeps scale 1), dequantised by the embedding kernel.
    const size_t V = cfg_.vocab;
    std::vector<int8_t> q(V * H);
    std::vector<float> sc(V);
    for (size_t r = 0; r < V; ++r) {
      const float* row = w.word.data() + r * H;
      float m = 0.f;
      for (size_t i = 0; i < H; ++i) {
        if (!std::isfinite(row[i])) {
          throw Error("encoder weights: word embedding row " + std::to_string(r) +
                      " holds a non-finite value");
        }
        m = std::max(m, std::fabs(row[i]));
      }
      sc[r] = m > 0.f ? m / 127.f : 1.f;
      for (size_t i = 0; i < H; ++i) {
        const float v = std::nearbyint(row[i] / sc[r]);
        q[r * H + i] = int8_t(std::max(-127.f, std::min(127.f, v)));
      }
    }
    CUDA_CHECK(cudaMalloc(&word_, q.size()));
    CUDA_CHECK(cudaMemcpy(word_, q.data(), q.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMalloc(&word_scale_, V * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(word_scale_, sc.data(), V * sizeof(float), cudaMemcpyHostToDevice));
    table_bytes_ += q.size() + V * sizeof(float);
  } else {
    table(w.word, &word_);
  }
  table(w.pos, &pos_);
  table(w.type, &type_);
  // LayerNorm parameters: (1 + 2 * layers) pairs of [H] FP32.
  std::vector<float> ln;
  auto push = [&](const std::vector<float>& v) { ln.insert(ln.end(), v.begin(), v.end()); };
  push(w.emb_gamma);
  push(w.emb_beta);
  for (const auto& L : w.layers) {
    push(L.ln1_gamma);
    push(L.ln1_beta);
    push(L.ln2_gamma);
    push(L.ln2_beta);
  }
  ln_bytes_ = ln.size() * sizeof(float);
  CUDA_CHECK(cudaMalloc(&ln_params_, ln_bytes_));
  CUDA_CHECK(cudaMemcpy(ln_params_, ln.data(), ln_bytes_, cudaMemcpyHostToDevice));
  emb_g_ = ln_params_;
  emb_b_ = ln_params_ + H;
  const bool tune = opt_.tune;
  const GemmEpilogue gelu = (dt == DType::kF32 || opt_.exact_gelu) ? GemmEpilogue::kBiasGelu
                                                                   : GemmEpilogue::kBiasGeluTanh;
  const int Hi = cfg_.hidden, I = cfg_.intermediate;
  if (opt_.quant != EncoderQuant::kNone) qkv_interleaved_ = WantQkvGroups();  // encoder_quant.cc
  for (int l = 0; l < cfg_.layers; ++l) {
    const auto& L = w.layers[l];
    Layer d;
    if (opt_.quant != EncoderQuant::kNone) {
      UploadQuantLayer(L, l, &d);
    } else {
      d.qkv = std::make_unique<Gemm>(L.qkv_w.data(), Hi, 3 * Hi, L.qkv_b.data(),
                                     GemmEpilogue::kBias, dt, &cache_, tune);
      d.out = std::make_unique<Gemm>(L.out_w.data(), Hi, Hi, L.out_b.data(), GemmEpilogue::kBias,
                                     dt, &cache_, tune);
      d.ff1 = std::make_unique<Gemm>(L.ff1_w.data(), Hi, I, L.ff1_b.data(), gelu, dt, &cache_,
                                     tune);
      d.ff2 = std::make_unique<Gemm>(L.ff2_w.data(), I, Hi, L.ff2_b.data(), GemmEpilogue::kBias,
                                     dt, &cache_, tune);
    }
    const float* base = ln_params_ + H * (2 + 4 * size_t(l));
    d.ln1_g = base;
    d.ln1_b = base + H;
    d.ln2_g = base + 2 * H;
    d.ln2_b = base + 3 * H;
    layers_.push_back(std::move(d));
  }
  if (cfg_.pooler) {
    pooler_ = std::make_unique<Gemm>(w.pooler_w.data(), Hi, Hi, w.pooler_b.data(),
                                     GemmEpilogue::kBiasTanh, dt, &cache_, tune);
  }
  intent_ = std::make_unique<Gemm>(w.intent_w.data(), Hi, cfg_.n_intents, w.intent_b.data(),
                                   GemmEpilogue::kBias, dt, &cache_, tune,
                                   RoundUp(cfg_.n_intents, 8));
  slot_ = std::make_unique<Gemm>(w.slot_w.data(), Hi, cfg_.n_slots, w.slot_b.data(),
                                 GemmEpilogue::kBias, dt, &cache_, tune,
                                 RoundUp(cfg_.n_slots, 8));
}

size_t CudaEncoder::weight_bytes() const {
  size_t n = table_bytes_ + ln_bytes_;
  for (const auto& L : layers_) {
    if (L.qkv) {
      n += L.qkv->weight_bytes() + L.out->weight_bytes() + L.ff1->weight_bytes() +
           L.ff2->weight_bytes();
    }
    if (L.qqkv) {
      n += L.qqkv->weight_bytes() + L.qout->weight_bytes() + L.qff1->weight_bytes() +
           L.qff2->weight_bytes();
    }
  }
  if (pooler_) n += pooler_->weight_bytes();
  return n + intent_->weight_bytes() + slot_->weight_bytes();
}

std::map<std::string, std::string> CudaEncoder::TuningReport() const {
  std::map<std::string, std::string> r;
  for (const auto& [k, e] : cache_.Snapshot()) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), " %.4f ms of %d", e.ms, e.candidates);
    r[k] = e.desc + buf;
  }
  return r;
}

void CudaEncoder::SaveCacheIfGrown() {
  if (opt_.timing_cache.empty()) return;
  std::lock_guard<std::mutex> lock(cache_save_mu_);
  const uint64_t g = cache_.generation();
  if (g == cache_saved_gen_) return;
  cache_.Save(opt_.timing_cache);
  cache_saved_gen_ = g;
}

std::unique_ptr<CudaEncoderContext> CudaEncoder::CreateContext() {
  CUDA_CHECK(cudaSetDevice(opt_.device));
  return std::unique_ptr<CudaEncoderContext>(new CudaEncoderContext(shared_from_this()));
}

int CudaEncoderContext::TokenBucket(int t, int max_tokens) {
  int b = t <= 16 ? 16 : t <= 128 ? RoundUp(t, 16) : t <= 1024 ? RoundUp(t, 64)
          : t <= 4096 ? RoundUp(t, 256) : RoundUp(t, 512);
  return std::min(b, max_tokens);
}

int CudaEncoderContext::BatchBucket(int batch, int max_batch) {
  int b = 1;
  while (b < batch) b <<= 1;
  return std::min(b, max_batch);
}

CudaEncoderContext::CudaEncoderContext(std::shared_ptr<CudaEncoder> enc) : enc_(std::move(enc)) {
  const EncoderConfig& c = enc_->cfg_;
  const EncoderOptions& o = enc_->opt_;
  max_batch_ = o.max_batch;
  max_tokens_ = o.max_tokens ? o.max_tokens : o.max_batch * o.max_seq;
  ni_pad_ = RoundUp(c.n_intents, 8);
  ns_pad_ = RoundUp(c.n_slots, 8);
  // U holds QKV + attention context, then the FFN activation, then the slot logits.
  union_cols_ = std::max({4 * c.hidden, c.intermediate, ns_pad_});
  const size_t es = DTypeSize(o.dtype), T = max_tokens_, B = max_batch_, H = c.hidden;
  // Quantised encoders: as large as the largest bucket needs (head groups, FFN chunks).
  u_bytes_ = o.quant != EncoderQuant::kNone ? QuantUnionBytes() : T * union_cols_ * es;
  xq_ffn_in_u_ = o.quant != EncoderQuant::kNone && o.quant_ffn_chunk_rows > 0;
  auto carve_device = [&](Carver& cv) {
    d_in_ = cv.Take<int32_t>(StagingInWords(T, B) * 4);
    d_x_ = cv.Take<void>(T * H * es);
    d_u_ = cv.Take<void>(u_bytes_);
    d_cls_ = cv.Take<void>(B * H * es);
    d_pooled_ = cv.Take<void>(B * H * es);
    d_intent_ = cv.Take<void>(B * ni_pad_ * es);
    d_out_ = cv.Take<char>(StagingOutWords(T, B, c.n_intents, c.n_slots) * 4);
    d_amax_ = cv.Take<float>(size_t(c.layers) * 4 * 4);
    if (o.quant != EncoderQuant::kNone) {
      d_xq_ = cv.Take<void>(T * c.hidden);  // [T, I] copy: d_xq_ffn_, allocated when needed
    }
  };
  auto carve_host = [&](Carver& cv) {
    h_in_ = cv.Take<int32_t>(StagingInWords(T, B) * 4);
    h_out_ = cv.Take<char>(StagingOutWords(T, B, c.n_intents, c.n_slots) * 4);
  };
  Carver dsize{nullptr}, hsize{nullptr};
  carve_device(dsize);
  carve_host(hsize);
  try {
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    ws_ = std::make_unique<LtWorkspace>(o.workspace_bytes);
    CUDA_CHECK(cudaMalloc(&dev_, dsize.off));
    CUDA_CHECK(cudaHostAlloc(&host_, hsize.off, cudaHostAllocDefault));
    // Defined contents everywhere: rows no sequence owns are computed on but never read.
    CUDA_CHECK(cudaMemset(dev_, 0, dsize.off));
  } catch (...) {
    if (dev_) cudaFree(dev_);
    if (stream_) cudaStreamDestroy(stream_);
    throw;
  }
  device_bytes_ = dsize.off + o.workspace_bytes;
  Carver dc{static_cast<char*>(dev_)}, hc{static_cast<char*>(host_)};
  carve_device(dc);
  carve_host(hc);
  PointStaging(int(T), int(B));
}

void CudaEncoderContext::PointStaging(int Tb, int Bb) {
  const EncoderConfig& c = enc_->cfg_;
  // Offsets in 4-byte words, each array starting 16-byte aligned (R4 rounds up to 4 words).
  size_t w = 0;
  auto in = [&](size_t words) {
    int32_t* p = d_in_ + w;
    w += R4(words);
    return p;
  };
  d_ids_ = in(size_t(Tb));
  d_types_ = in(size_t(Tb));
  d_cu_ = in(size_t(Bb) + 1);
  in_bytes_ = w * 4;
  h_ids_ = h_in_ + (d_ids_ - d_in_);
  h_types_ = h_in_ + (d_types_ - d_in_);
  h_cu_ = h_in_ + (d_cu_ - d_in_);
  w = 0;
  auto out = [&](size_t words) {
    const size_t at = w * 4;
    w += R4(words);
    return at;
  };
  const size_t il = out(size_t(Bb) * c.n_intents), ip = out(size_t(Bb) * c.n_intents),
               ia = out(size_t(Bb)), sl = out(size_t(Tb) * c.n_slots), sa = out(size_t(Tb));
  out_bytes_ = w * 4;
  d_intent_logits_ = reinterpret_cast<float*>(d_out_ + il);
  d_intent_probs_ = reinterpret_cast<float*>(d_out_ + ip);
  d_intent_arg_ = reinterpret_cast<int32_t*>(d_out_ + ia);
  d_slot_logits_ = reinterpret_cast<float*>(d_out_ + sl);
  d_slot_arg_ = reinterpret_cast<int32_t*>(d_out_ + sa);
  h_intent_logits_ = reinterpret_cast<float*>(h_out_ + il);
  h_intent_probs_ = reinterpret_cast<float*>(h_out_ + ip);
  h_intent_arg_ = reinterpret_cast<int32_t*>(h_out_ + ia);
  h_slot_logits_ = reinterpret_cast<float*>(h_out_ + sl);
  h_slot_arg_ = reinterpret_cast<int32_t*>(h_out_ + sa);
}

void CudaEncoderContext::set_device_timing(bool on) {
  CUDA_CHECK(cudaSetDevice(enc_->opt_.device));
  if (on && !ev_start_) {
    CUDA_CHECK(cudaEventCreate(&ev_start_));
    CUDA_CHECK(cudaEventCreate(&ev_end_));
  } else if (!on && ev_start_) {
    cudaEventDestroy(ev_start_);
    cudaEventDestroy(ev_end_);
    ev_start_ = ev_end_ = nullptr;
  }
}

CudaEncoderContext::~CudaEncoderContext() {
  if (ev_start_) cudaEventDestroy(ev_start_);
  if (ev_end_) cudaEventDestroy(ev_end_);
  for (auto& [k, g] : graphs_) cudaGraphExecDestroy(g);
  if (stream_) cudaStreamSynchronize(stream_);
  ws_.reset();
  if (dev_) cudaFree(dev_);
  if (d_acc_) cudaFree(d_acc_);
  if (d_xq_ffn_) cudaFree(d_xq_ffn_);
  if (host_) cudaFreeHost(host_);
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaEncoderContext::PrepareBucket(int Tb, int Bb) {
  if (prepared_.count({Tb, Bb})) return;
  CudaEncoder& e = *enc_;
  LtWorkspace& ws = *ws_;
  if (e.opt_.quant != EncoderQuant::kNone) PrepareQuant(Tb);
  for (auto& L : e.layers_) {  // same shapes in every layer: the cache times each once
    if (!L.qkv) continue;
    L.qkv->Prepare(Tb, false, ws, stream_);
    L.out->Prepare(Tb, true, ws, stream_);
    L.ff1->Prepare(Tb, false, ws, stream_);
    L.ff2->Prepare(Tb, true, ws, stream_);
  }
  if (e.pooler_) e.pooler_->Prepare(Bb, false, ws, stream_);
  e.intent_->Prepare(Bb, false, ws, stream_);
  e.slot_->Prepare(Tb, false, ws, stream_);
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  prepared_[{Tb, Bb}] = true;
  e.SaveCacheIfGrown();
}

void CudaEncoderContext::Enqueue(int Tb, int Bb, int Sb) {
  CudaEncoder& e = *enc_;
  const EncoderConfig& c = e.cfg_;
  const DType dt = e.opt_.dtype;
  const size_t es = DTypeSize(dt);
  const int H = c.hidden;
  LtWorkspace& ws = *ws_;
  cudaStream_t s = stream_;
  // Run pointed the staging at this bucket (PointStaging): ids, types and cu_seqlens in one copy.
  CUDA_CHECK(cudaMemcpyAsync(d_in_, h_in_, in_bytes_, cudaMemcpyHostToDevice, s));
  // A quantised layer 0 with fused LayerNorms takes its QKV input from the embedding's pass
  // (EnqueueQuantLayer skips its quantise pass then).
  QuantizedCopy xq0;
  if (!e.layers_.empty() && e.layers_[0].qqkv && e.FuseLayerNormQuant()) {
    xq0 = {d_xq_, e.layers_[0].qqkv->x_scale(), e.opt_.quant == EncoderQuant::kFp8};
  }
  if (e.word_scale_) {
    EmbeddingLayerNormInt8Word(dt, d_ids_, d_types_, d_cu_, Bb, Tb, e.word_, e.word_scale_,
                               c.vocab, e.pos_, c.max_pos, e.type_, c.type_vocab, e.emb_g_,
                               e.emb_b_, c.eps, H, d_x_, s, xq0);
  } else {
    EmbeddingLayerNorm(dt, d_ids_, d_types_, d_cu_, Bb, Tb, e.word_, c.vocab, e.pos_, c.max_pos,
                       e.type_, c.type_vocab, e.emb_g_, e.emb_b_, c.eps, H, d_x_, s, xq0);
  }
  void* qkv = d_u_;
  void* ctx = static_cast<char*>(d_u_) + size_t(Tb) * 3 * H * es;
  const float scale = 1.f / std::sqrt(float(c.head_dim()));
  for (size_t l = 0; l < e.layers_.size(); ++l) {
    auto& L = e.layers_[l];
    if (L.qqkv) {
      EnqueueQuantLayer(int(l), Tb, Sb, Bb);
      continue;
    }
    const int slot = 4 * int(l);  // calibration: max |x| of each GEMM input (real tokens)
    if (calibrating_) RecordAmax(d_x_, int64_t(calib_rows_) * H, slot);
    L.qkv->Run(d_x_, Tb, qkv, nullptr, ws, s);
    Attention(dt, qkv, d_cu_, Bb, Sb, c.heads, c.head_dim(), scale, ctx, s);
    if (calibrating_) RecordAmax(ctx, int64_t(calib_rows_) * H, slot + 1);
    L.out->Run(ctx, Tb, d_x_, d_x_, ws, s);  // x = ctx . Wo + bo + x, in place
    LayerNorm(dt, d_x_, nullptr, nullptr, L.ln1_g, L.ln1_b, c.eps, Tb, H, d_x_, s);
    if (calibrating_) RecordAmax(d_x_, int64_t(calib_rows_) * H, slot + 2);
    L.ff1->Run(d_x_, Tb, d_u_, nullptr, ws, s);
    if (calibrating_) RecordAmax(d_u_, int64_t(calib_rows_) * c.intermediate, slot + 3);
    L.ff2->Run(d_u_, Tb, d_x_, d_x_, ws, s);
    LayerNorm(dt, d_x_, nullptr, nullptr, L.ln2_g, L.ln2_b, c.eps, Tb, H, d_x_, s);
  }
  GatherFirstToken(dt, d_x_, d_cu_, Bb, Tb, H, d_cls_, s);
  const void* pooled = d_cls_;
  if (e.pooler_) {
    e.pooler_->Run(d_cls_, Bb, d_pooled_, nullptr, ws, s);
    pooled = d_pooled_;
  }
  e.intent_->Run(pooled, Bb, d_intent_, nullptr, ws, s);
  e.slot_->Run(d_x_, Tb, d_u_, nullptr, ws, s);
  SoftmaxArgmax(dt, d_intent_, Bb, c.n_intents, ni_pad_, d_intent_logits_, d_intent_probs_,
                d_intent_arg_, s);
  SoftmaxArgmax(dt, d_u_, Tb, c.n_slots, ns_pad_, d_slot_logits_, nullptr, d_slot_arg_, s);
  // Every output in one copy (the bucket's packed layout, padding words included).
  CUDA_CHECK(cudaMemcpyAsync(h_out_, d_out_, out_bytes_, cudaMemcpyDeviceToHost, s));
}

void CudaEncoderContext::Run(const int32_t* ids, const int32_t* type_ids,
                             const int32_t* cu_seqlens, int batch, EncoderOutputs* out) {
  const EncoderConfig& c = enc_->cfg_;
  const EncoderOptions& o = enc_->opt_;
  if (!out) throw Error("CudaEncoderContext::Run: null outputs");
  const int longest = CheckPackedBatch(cu_seqlens, batch, max_batch_, o.max_seq);
  const int T = cu_seqlens[batch];
  if (T > max_tokens_) {
    throw Error("packed batch: " + std::to_string(T) + " tokens, this context holds at most " +
                std::to_string(max_tokens_), Code::kOutOfRange);
  }
  if (!ids) throw Error("CudaEncoderContext::Run: null ids");
  for (int t = 0; t < T; ++t) {
    if (ids[t] < 0 || ids[t] >= c.vocab) {
      throw Error("packed batch: token " + std::to_string(t) + " has id " +
                  std::to_string(ids[t]) + ", outside the vocabulary [0, " +
                  std::to_string(c.vocab) + ")");
    }
    if (type_ids && (type_ids[t] < 0 || type_ids[t] >= c.type_vocab)) {
      throw Error("packed batch: token " + std::to_string(t) + " has token type " +
                  std::to_string(type_ids[t]) + ", expected 0 to " +
                  std::to_string(c.type_vocab - 1));
    }
  }
  CUDA_CHECK(cudaSetDevice(o.device));
  const int Tb = TokenBucket(T, max_tokens_), Bb = BatchBucket(batch, max_batch_);
  const int Sb = RoundUp(longest, 64);
  PointStaging(Tb, Bb);  // before staging: the bucket's packed layout
  std::memcpy(h_ids_, ids, size_t(T) * 4);
  std::memset(h_ids_ + T, 0, size_t(Tb - T) * 4);
  if (type_ids) std::memcpy(h_types_, type_ids, size_t(T) * 4);
  else std::memset(h_types_, 0, size_t(T) * 4);
  std::memset(h_types_ + T, 0, size_t(Tb - T) * 4);
  std::memcpy(h_cu_, cu_seqlens, size_t(batch + 1) * 4);
  for (int b = batch + 1; b <= Bb; ++b) h_cu_[b] = T;  // empty padding sequences

  calib_rows_ = T;
  PrepareBucket(Tb, Bb);
  if (o.use_graphs && !calibrating_) {
    const Key key{Tb, Bb, Sb};
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
      Enqueue(Tb, Bb, Sb);  // eager first run: loads modules, checks every launch
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      cudaGraph_t graph = nullptr;
      CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      try {
        Enqueue(Tb, Bb, Sb);
      } catch (...) {
        cudaStreamEndCapture(stream_, &graph);
        if (graph) cudaGraphDestroy(graph);
        throw;
      }
      CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
      cudaGraphExec_t exec = nullptr;
      const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
      cudaGraphDestroy(graph);
      CUDA_CHECK(err);
      it = graphs_.emplace(key, exec).first;
    }
    if (ev_start_) CUDA_CHECK(cudaEventRecord(ev_start_, stream_));
    CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
    if (ev_end_) CUDA_CHECK(cudaEventRecord(ev_end_, stream_));
  } else {
    Enqueue(Tb, Bb, Sb);
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (ev_start_ && o.use_graphs && !calibrating_) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, ev_start_, ev_end_));
    last_device_ms_ = ms;
  }

  out->batch = batch;
  out->tokens = T;
  out->intent_logits.assign(h_intent_logits_, h_intent_logits_ + size_t(batch) * c.n_intents);
  out->intent_probs.assign(h_intent_probs_, h_intent_probs_ + size_t(batch) * c.n_intents);
  out->intent.assign(h_intent_arg_, h_intent_arg_ + batch);
  out->slot_logits.assign(h_slot_logits_, h_slot_logits_ + size_t(T) * c.n_slots);
  out->slots.assign(h_slot_arg_, h_slot_arg_ + T);
}

void CudaEncoderContext::Warmup(const std::vector<std::pair<int, int>>& shapes) {
  std::vector<int32_t> ids, cu;
  EncoderOutputs out;
  for (auto [b, s] : shapes) {
    ids.assign(size_t(b) * s, 101);
    cu.resize(b + 1);
    for (int i = 0; i <= b; ++i) cu[i] = i * s;
    Run(ids.data(), nullptr, cu.data(), b, &out);
  }
}

}  // namespace hotline::engine::cuda
