// The CUDA encoder runner: a BERT-style joint intent + slot encoder as one fused op sequence on
// one GPU, FP32/FP16/BF16:
//   embeddings + LayerNorm -> per layer: QKV GEMM (+bias), packed attention, output GEMM (+bias
//   +residual, in place) + LayerNorm, FFN1 GEMM (+bias+GELU), FFN2 GEMM (+bias+residual) +
//   LayerNorm -> [CLS] gather -> pooler (tanh) -> intent head; slot head over every token ->
//   softmax/argmax.
//
// CudaEncoder owns the weights on the device (immutable, shared by contexts and threads).
// CudaEncoderContext owns one stream, one cuBLASLt workspace and every activation buffer, sized
// once for the options' maximum (max_batch sequences, max_seq tokens each, max_tokens in all);
// Run never allocates device memory after a bucket's first use. Batches are packed
// (padding-free); the token count is rounded up to a bucket (16..128 by 16, ..1024 by 64, ..4096
// by 256, then by 512) and the sequence count to a power of two; each (token bucket, sequence
// bucket, 64-key tile count) gets its GEMM algorithms chosen (tuned) and a CUDA graph captured on
// first use — Warmup() moves that off the hot path — and every later Run replays the graph: one
// launch, host staging copies included. Padding tokens form no sequence and are never read.
//
// One context is for one thread at a time; use one context per serving thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "engine/cuda/gemm.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/quant_gemm.h"

namespace hotline::engine::cuda {

// Quantised execution (encoder_quant.h): the four big GEMMs of each layer in INT8 or FP8.
enum class EncoderQuant { kNone, kInt8, kFp8 };

struct EncoderConfig {
  int layers = 12, hidden = 768, heads = 12, intermediate = 3072;
  int vocab = 21128, max_pos = 512, type_vocab = 2;
  int n_intents = 64, n_slots = 41;
  bool pooler = true;  // intent head over tanh(pooler(CLS)) (BERT); false: over the raw [CLS]
  float eps = 1e-12f;
  int head_dim() const { return hidden / heads; }
  void Check() const;  // throws hotline::Error naming the bad field
};

// Host FP32 weights, row-major; linear weights are [in, out] (K x N), as cpu::Gemm takes them.
struct EncoderWeights {
  std::vector<float> word, pos, type, emb_gamma, emb_beta;
  struct Layer {
    std::vector<float> qkv_w, qkv_b;  // [H, 3H] as Q | K | V
    std::vector<float> out_w, out_b, ln1_gamma, ln1_beta;
    std::vector<float> ff1_w, ff1_b, ff2_w, ff2_b, ln2_gamma, ln2_beta;
  };
  std::vector<Layer> layers;
  std::vector<float> pooler_w, pooler_b, intent_w, intent_b, slot_w, slot_b;

  // Reproducible random weights (uniform * scale; LayerNorm gamma near 1, beta near 0).
  static EncoderWeights Random(const EncoderConfig& c, uint64_t seed, float scale = 0.05f);
  void Check(const EncoderConfig& c) const;  // throws naming the tensor and both sizes
};

// EncoderOptions::fp8_fast_accum_max_k meaning "every GEMM" (no encoder has a K this large).
inline constexpr int kFp8FastAccumAll = 1 << 20;

struct EncoderOptions {
  DType dtype = DType::kF16;
  int max_batch = 128, max_seq = 128;
  int max_tokens = 0;  // 0: max_batch * max_seq
  bool use_graphs = true;
  bool tune = true;
  // FP16/BF16 use cuBLASLt's fused GELU (tanh approximation) unless exact_gelu; FP32 is exact.
  bool exact_gelu = false;
  size_t workspace_bytes = size_t(16) << 20;
  std::string timing_cache;  // optional: loaded at creation, saved after new tuning
  int device = 0;
  // kInt8 / kFp8: QKV, attention output, FFN1 and FFN2 through QuantGemm (only their 8-bit
  // weights on the device); everything else in `dtype`. act_scales: the fixed per-tensor scales
  // (amax / qmax) of those GEMMs' inputs, [layers][4] (encoder_quant.h: CalibrateEncoderAmax,
  // ScalesFromAmax). quant_chunk_rows: rows per GEMM call on the paths that accumulate into a
  // scratch (INT8; FP8 where cuBLASLt cannot fuse the scales), bounding that scratch to
  // rows x max(3H, I) x 4 bytes; 0 = every row in one call. 512 rows: BERT-base's scratch is
  // 6 MiB (72 MiB for every row of an 8,192-token bucket), which keeps an INT8 base encoder with
  // a 128 x 128 context under PERFORMANCE.md G5's 200 MiB (197 MiB on the H200). The price, INT8
  // at 128 x 64: 12.2k seq/s against 18.5k with 8,192-row calls (GEMMs of 512 rows leave SMs
  // idle); raise it where memory allows.
  // quant_fp8_output: FP8 encoders let FFN1's GEMM write its GELU output in E4M3 directly
  // (QuantGemm::SetQuantisedOutput) where cuBLASLt can, skipping a quantise pass.
  EncoderQuant quant = EncoderQuant::kNone;
  std::vector<float> act_scales;
  int quant_chunk_rows = 512;
  bool quant_fp8_output = true;
  // Quantised encoders: each LayerNorm also writes the next GEMM's 8-bit input (one pass).
  bool quant_fuse_layernorm = true;
  // FP8 encoders: how the four GEMMs' weights are scaled (quant_gemm.h). Per tensor (default):
  // one scale per weight matrix and scalar A/B scale pointers, cuBLASLt's plain FP8 GEMM (what
  // TensorRT and Transformer Engine run), which also writes FFN1's GELU output in E4M3; per
  // channel: per-channel x per-token scale vectors (OUTER_VEC_32F), for which cuBLASLt 13.1 has
  // one algorithm and no E4M3 output. H200, BERT-base 128 x 64 (2026-12-02): per tensor 51.7k
  // seq/s device against 44.8k; A2 on the v6 default model 100.00% for both (an earlier 4-layer
  // model gave 99.38% per tensor, 99.55% per channel: a model that loses accuracy per tensor
  // is built per channel). INT8 encoders are always per channel. Plans record the choice.
  WeightScaling fp8_weight_scaling = WeightScaling::kPerTensor;
  // FP8 encoders: GEMMs whose K (input width) is at most this use Hopper's fast FP8
  // accumulation (CUBLASLT_MATMUL_DESC_FAST_ACCUM: partial sums kept at reduced precision inside
  // the tensor core, not promoted to FP32 along K), as Transformer Engine does for every forward
  // GEMM. Default: every GEMM (kFp8FastAccumAll). H200, BERT-base 128 x 64 (2026-12-02):
  // 56.2k seq/s device exact, 61.8k with fast accumulation for K <= 1024 (FFN2, K = 3072,
  // exact), 62.9k for every GEMM; A2 on the v6 default model 100.00% (all its K are <= 1024).
  // Its error grows with K: a model that loses accuracy builds with a bound (e.g. 1024) or 0
  // (exact everywhere). Plans record it (a plan without the record was built exact).
  int fp8_fast_accum_max_k = kFp8FastAccumAll;
  // Quantised encoders: attention writes the output GEMM's 8-bit input itself where its kernel
  // can (AttentionQuantSupported, encoder_quant.h), skipping a quantise pass.
  bool quant_fuse_attention = true;
  // Quantised encoders, activation memory (PERFORMANCE.md G5). Both are row-independent splits,
  // so results do not depend on them beyond the GEMMs' own choice of algorithm per row count
  // (INT8: bit-identical; FP8: cuBLASLt may accumulate in another order).
  // quant_ffn_chunk_rows: a bucket of more tokens runs FFN1 -> quantise -> FFN2 (+residual) in
  // chunks of this many rows, the chunk's FFN activation and its 8-bit copy living in the shared
  // activation buffer; 0 = the whole bucket at once (FFN activation [T, I] plus a separate
  // [T, I] 8-bit buffer where FFN1 cannot write E4M3 itself).
  int quant_ffn_chunk_rows = 4096;
  // quant_qkv_group_tokens: a bucket of more tokens runs QKV GEMM + attention in G head groups
  // (G the smallest divisor of heads with tokens <= G * this, among those whose group width
  // 3 * head_dim * heads / G is a multiple of 16; else the largest such G), each group's
  // [T, 3H/G] QKV output in the shared buffer. Needs the fused quantised attention
  // (quant_fuse_attention and AttentionQuantSupported at creation); the QKV weights' columns are
  // then stored per head (Q_h K_h V_h) for every bucket. 0 = off.
  int quant_qkv_group_tokens = 8192;
};

struct EncoderOutputs {
  int batch = 0, tokens = 0;
  std::vector<float> intent_logits;  // [batch, n_intents]
  std::vector<float> intent_probs;   // [batch, n_intents] softmax
  std::vector<int32_t> intent;       // [batch] argmax
  std::vector<float> slot_logits;    // [tokens, n_slots]
  std::vector<int32_t> slots;        // [tokens] argmax
};

class CudaEncoderContext;

class CudaEncoder : public std::enable_shared_from_this<CudaEncoder> {
 public:
  static std::shared_ptr<CudaEncoder> Create(const EncoderConfig& config,
                                             const EncoderWeights& weights,
                                             const EncoderOptions& options);
  ~CudaEncoder();
  std::unique_ptr<CudaEncoderContext> CreateContext();

  const EncoderConfig& config() const { return cfg_; }
  const EncoderOptions& options() const { return opt_; }
  size_t weight_bytes() const;
  GemmTuningCache& tuning_cache() { return cache_; }
  // GEMM choices per prepared shape ("<M>x<N>x<K> fp16 bias ..." -> "algo .. 0.0123 ms of 31").
  std::map<std::string, std::string> TuningReport() const;
  // Quantised encoders: the path layer 0's four GEMMs took for M rows, "qkv: <path>", ...
  // (encoder_quant.cc; head groups: group 0's view; FFN chunks: the chunk's rows); empty when
  // not quantised.
  std::vector<std::string> QuantPaths(int M) const;
  // The timed device ms of layer 0's four GEMMs as a bucket of M rows runs them (head groups
  // and FFN chunks included), from their chosen algorithms; -1 when one is not prepared at M
  // or was not timed (tune off).
  double LayerGemmMs(int M) const;

 private:
  friend class CudaEncoderContext;
  CudaEncoder(const EncoderConfig& c, const EncoderOptions& o) : cfg_(c), opt_(o) {}
  void Upload(const EncoderWeights& w);
  void SaveCacheIfGrown();
  struct Layer;
  void UploadQuantLayer(const EncoderWeights::Layer& w, int l, Layer* d);  // encoder_quant.cc
  bool WantQkvGroups() const;  // whether the options and shapes ask for head groups
  bool ValidQkvGroups(int G) const;  // G divides heads, group width a multiple of 16 columns

  EncoderConfig cfg_;
  EncoderOptions opt_;
  GemmTuningCache cache_;
  uint64_t cache_saved_gen_ = 0;  // cache_.generation() at the last save (or the load)
  std::mutex cache_save_mu_;      // one saver at a time (contexts prepare concurrently)
  void* word_ = nullptr;       // [vocab, H] in dtype, or int8 when word_scale_ is set
  float* word_scale_ = nullptr;  // quantised encoders: per-row FP32 scales of the INT8 table
  void* pos_ = nullptr;
  void* type_ = nullptr;
  float* ln_params_ = nullptr;  // all LayerNorm gammas and betas, FP32
  size_t table_bytes_ = 0, ln_bytes_ = 0;
  struct Layer {
    std::unique_ptr<Gemm> qkv, out, ff1, ff2;          // unquantised encoders
    std::unique_ptr<QuantGemm> qqkv, qout, qff1, qff2;  // quantised encoders
    // Head groups (qkv_interleaved_): G -> G column views of qqkv, group g = heads
    // [g * heads / G, (g + 1) * heads / G) as [Q_h K_h V_h]...
    std::map<int, std::vector<std::unique_ptr<QuantGemm>>> qkv_groups;
    const float *ln1_g, *ln1_b, *ln2_g, *ln2_b;
  };
  const float *emb_g_ = nullptr, *emb_b_ = nullptr;
  std::vector<Layer> layers_;
  std::unique_ptr<Gemm> pooler_, intent_, slot_;
  // Quantised encoders (encoder_quant.cc): QKV weights stored per head for head groups.
  bool qkv_interleaved_ = false;

 public:
  // Quantised encoders: the head groups and the FFN chunk rows a bucket of Tb tokens runs with
  // (1 and Tb when the options leave them off); the activation buffer bytes it needs.
  int QkvGroups(int Tb) const;
  // Rows per FFN chunk at bucket Tb: the most rows (a multiple of 64, chunks of equal size)
  // whose FFN activation in the shared buffer fits the budget quant_ffn_chunk_rows sets, i.e.
  // quant_ffn_chunk_rows x I x (dtype + 1 byte): FFN1's output and its 8-bit copy. With
  // e4m3_out (FFN1 writes FFN2's E4M3 input itself, nothing else) a row costs I bytes, so three
  // times the rows fit the same bytes: at 8,192 tokens the FFN runs whole, at no extra memory.
  int FfnChunkRows(int Tb, bool e4m3_out = false) const;
  // The FFN's rows per call at bucket Tb: FfnChunkRows(Tb, true) where FFN1 writes E4M3 at
  // every call of that split in every layer (known once PrepareQuant prepared those row
  // counts), else FfnChunkRows(Tb). FfnCalls: the calls of a split into chunks of C rows.
  int FfnRows(int Tb) const;
  static std::vector<int> FfnCalls(int Tb, int C);
  // Whether FFN1 may write E4M3 (FP8, per tensor, quant_fp8_output; cuBLASLt decides per row
  // count at PrepareQuant).
  bool Ffn1MayWriteE4M3() const;
  // Whether each LayerNorm writes the next GEMM's 8-bit input itself (quant_fuse_layernorm and
  // a hidden size LayerNormQuant serves); the embedding then writes layer 0's QKV input too.
  bool FuseLayerNormQuant() const;
  bool qkv_interleaved() const { return qkv_interleaved_; }
};

class CudaEncoderContext {
 public:
  ~CudaEncoderContext();
  CudaEncoderContext(const CudaEncoderContext&) = delete;
  CudaEncoderContext& operator=(const CudaEncoderContext&) = delete;

  // Runs a packed batch: ids and type_ids (may be null: all zero) [cu_seqlens[batch]] and
  // cu_seqlens [batch + 1], all host memory. Throws hotline::Error on a malformed batch, a batch
  // outside the options' maximum or a token id outside the vocabulary; outputs are resized.
  void Run(const int32_t* ids, const int32_t* type_ids, const int32_t* cu_seqlens, int batch,
           EncoderOutputs* out);
  // Prepares (tunes, captures) the buckets that batches of these shapes fall into.
  void Warmup(const std::vector<std::pair<int, int>>& batch_x_seq);

  size_t device_bytes() const { return device_bytes_; }  // activations + workspace of this context
  // The shared activation buffer (QKV, attention context, FFN activation, slot logits) of it.
  size_t activation_union_bytes() const { return u_bytes_; }
  int graphs() const { return int(graphs_.size()); }
  // Device time of each Run's replayed graph (host-to-device copies, every kernel, the copies
  // back), from CUDA events around the launch: how the peers are timed. Off by default (two
  // event records per Run); last_device_ms() is the last timed Run's, -1 before one.
  void set_device_timing(bool on);
  double last_device_ms() const { return last_device_ms_; }
  static int TokenBucket(int tokens, int max_tokens);
  static int BatchBucket(int batch, int max_batch);
  cudaStream_t stream() const { return stream_; }

  // Calibration (encoder_quant.cc): while on, Run executes eagerly and records max |x| of each
  // quantisable GEMM input over the batch's real tokens; CalibrationAmax() -> [layers][4].
  // Unquantised encoders only.
  void SetCalibration(bool on);
  std::vector<float> CalibrationAmax() const;

 private:
  friend class CudaEncoder;
  explicit CudaEncoderContext(std::shared_ptr<CudaEncoder> enc);
  using Key = std::tuple<int, int, int>;  // token bucket, sequence bucket, key tiles * 64
  void Enqueue(int Tb, int Bb, int Sb);
  // Points the staging pointers (d_ids_ ... h_slot_arg_) at bucket (Tb, Bb)'s packed layout in
  // the in / out regions and sets in_bytes_ / out_bytes_.
  void PointStaging(int Tb, int Bb);
  void PrepareBucket(int Tb, int Bb);
  // Quantised layers (encoder_quant.cc).
  void PrepareQuant(int Tb);
  void EnqueueQuantLayer(int l, int Tb, int Sb, int Bb);
  void RunQuantGemm(QuantGemm& g, const void* xq, int M, void* y, const void* residual);
  void RecordAmax(const void* x, int64_t n, int slot);
  size_t QuantUnionBytes() const;  // d_u_ bytes of a quantised encoder: max over its buckets
  size_t QuantAccBytes() const;    // the scratch of non-fused quantised GEMMs: max over buckets

  std::shared_ptr<CudaEncoder> enc_;
  int max_tokens_ = 0, max_batch_ = 0;
  int ni_pad_ = 0, ns_pad_ = 0, union_cols_ = 0;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<LtWorkspace> ws_;
  void* dev_ = nullptr;    // one allocation, carved below
  void* host_ = nullptr;   // pinned staging, carved below
  size_t device_bytes_ = 0;
  size_t u_bytes_ = 0;
  // The inputs (ids, types, cu_seqlens) and the outputs (intent logits, probabilities and
  // argmax, slot logits and argmax) each packed for the bucket in one region, pinned on the host
  // and on the device (PointStaging), so that a batch crosses PCIe in one copy each way (was
  // 3 + 5 copy nodes per graph). H200, BERT-base FP8 128 x 64, three calls: device time within
  // the spread between calls, wall 59.7k -> 60.3-61.6k seq/s.
  int32_t *d_in_ = nullptr, *h_in_ = nullptr;
  char *d_out_ = nullptr, *h_out_ = nullptr;
  size_t in_bytes_ = 0, out_bytes_ = 0;  // the current bucket's
  int32_t *d_ids_, *d_types_, *d_cu_;
  void *d_x_, *d_u_, *d_cls_, *d_pooled_, *d_intent_;
  float *d_intent_logits_, *d_intent_probs_, *d_slot_logits_;
  int32_t *d_intent_arg_, *d_slot_arg_;
  int32_t *h_ids_, *h_types_, *h_cu_;
  float *h_intent_logits_, *h_intent_probs_, *h_slot_logits_;
  int32_t *h_intent_arg_, *h_slot_arg_;
  std::map<Key, cudaGraphExec_t> graphs_;
  cudaEvent_t ev_start_ = nullptr, ev_end_ = nullptr;  // set_device_timing(true)
  double last_device_ms_ = -1;
  std::map<std::pair<int, int>, bool> prepared_;
  // Quantised encoders: 8-bit copy of the current GEMM input [T, H]; of the FFN activation
  // [T, I] where FFN1 does not write it in E4M3 itself; the accumulator scratch of non-fused
  // quantised GEMMs (the last two allocated at the first bucket that needs them).
  // With FFN chunks (quant_ffn_chunk_rows), the chunk's FFN1 output and its 8-bit copy live in
  // d_u_ (xq_ffn_in_u_), and d_xq_ffn_ is never allocated.
  void* d_xq_ = nullptr;
  void* d_xq_ffn_ = nullptr;
  bool xq_ffn_in_u_ = false;
  void* d_acc_ = nullptr;
  int acc_rows_ = 0;
  float* d_amax_ = nullptr;  // [layers][4] calibration maxima
  bool calibrating_ = false;
  int calib_rows_ = 0;
};

}  // namespace hotline::engine::cuda
