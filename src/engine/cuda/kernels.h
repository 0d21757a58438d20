// CUDA kernels for the fused encoder ops: the device mirror of src/engine/cpu/kernels.h.
//
// Conventions (all functions): pointers are device pointers; every launch goes on `stream` and
// returns without synchronising; activations are row-major in the element type `dtype` (FP32, FP16
// or BF16) while LayerNorm parameters (gamma, beta) are FP32 and all arithmetic is FP32. Rows are
// the tokens of a packed, padding-free batch: sequence b owns rows
// [cu_seqlens[b], cu_seqlens[b+1]).
// cu_seqlens lives on the device, so kernels cannot validate it: callers validate on the host
// (see CheckPackedBatch). Bad arguments that the host can see (sizes, nulls, unsupported head
// sizes) throw hotline::Error before anything is launched. No function allocates memory, so all
// of them may be captured into a CUDA graph.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace hotline::engine::cuda {

enum class DType { kF32, kF16, kBF16 };
size_t DTypeSize(DType t);
const char* DTypeName(DType t);  // "fp32", "fp16", "bf16"

enum class Activation { kGelu /* exact erf GELU, as the CPU kernels */, kTanh };

// Host-side validation of a packed batch (cu_seqlens on the host): cu_seqlens[0] == 0,
// non-decreasing, every length in [1, max_seqlen], batch in [1, max_batch]. Throws hotline::Error
// naming the offending sequence. Returns the longest sequence.
int CheckPackedBatch(const int32_t* cu_seqlens_host, int batch, int max_batch, int max_seqlen);

// dst[i] = dtype(src[i]) and back.
void ConvertFromF32(const float* src, int64_t n, DType dst_type, void* dst, cudaStream_t stream);
void ConvertToF32(const void* src, DType src_type, int64_t n, float* dst, cudaStream_t stream);
// dst[n][k] = dtype(src[k][n]) for a row-major [K, N] FP32 matrix: the weight layout GEMMs use.
void TransposeConvert(const float* src_kn, int K, int N, DType dst_type, void* dst_nk,
                      cudaStream_t stream);

// dst[i] = dtype(scale * u), u uniform in [-1, 1) from a hash of (i, seed): reproducible random
// data for tuning scratch and benchmarks (never constant data: it runs faster than real data).
void FillRandom(DType dtype, void* dst, int64_t n, uint32_t seed, float scale,
                cudaStream_t stream);

// y = act(x) elementwise; y may alias x.
void Activate(Activation act, DType dtype, const void* x, int64_t n, void* y, cudaStream_t stream);
// y += r elementwise.
void AddInPlace(DType dtype, void* y, const void* r, int64_t n, cudaStream_t stream);

// y = LayerNorm(x + bias + residual) * gamma + beta over rows of `hidden`, statistics in FP32
// (two-pass variance). bias ([hidden], dtype) and residual ([rows, hidden]) are optional (null).
// y may alias x or residual.
void LayerNorm(DType dtype, const void* x, const void* bias, const void* residual,
               const float* gamma, const float* beta, float eps, int rows, int hidden, void* y,
               cudaStream_t stream);

// An optional second output of the embedding: xq = Q(y_stored / x_scale) in 8 bits, rounded as
// QuantizeActivations rounds (INT8 nearest-even clamped to +-127, or E4M3 saturating), so a
// quantised encoder's first GEMM input comes from the same pass. xq: [rows, hidden] bytes.
struct QuantizedCopy {
  void* xq = nullptr;   // null: no copy
  float x_scale = 1.f;  // positive and finite
  bool fp8 = false;     // E4M3, else INT8
};

// y[t] = LayerNorm(word[ids[t]] + pos[t - cu_seqlens[b(t)]] + type[type_ids[t]]) for t < rows.
// Tables are in `dtype`; type_ids may be null (all zero). Rows past cu_seqlens[batch] (bucket
// padding) are embedded as position 0 of nothing: finite values that no sequence reads. Ids and
// positions are clamped to their tables (the host validates them; clamping only keeps a bad
// request from reading out of bounds).
void EmbeddingLayerNorm(DType dtype, const int32_t* ids, const int32_t* type_ids,
                        const int32_t* cu_seqlens, int batch, int rows, const void* word,
                        int vocab, const void* pos, int max_pos, const void* type, int type_vocab,
                        const float* gamma, const float* beta, float eps, int hidden, void* y,
                        cudaStream_t stream, const QuantizedCopy& quant = {});
// The same with an INT8 word table (quantised encoders): word_q [vocab, hidden] int8 and
// word_scale [vocab] FP32, row id's word values being word_scale[id] * word_q[id][i] (in FP32),
// then summed with the position and type rows (in `dtype`) and normalised exactly as above.
void EmbeddingLayerNormInt8Word(DType dtype, const int32_t* ids, const int32_t* type_ids,
                                const int32_t* cu_seqlens, int batch, int rows,
                                const void* word_q, const float* word_scale, int vocab,
                                const void* pos, int max_pos, const void* type, int type_vocab,
                                const float* gamma, const float* beta, float eps, int hidden,
                                void* y, cudaStream_t stream, const QuantizedCopy& quant = {});

// Multi-head self-attention over packed sequences, softmax in FP32 (max-subtracted).
// qkv: [rows, 3*heads*head_dim] as Q | K | V; ctx: [rows, heads*head_dim]. `batch` and
// `max_seqlen` bound the launch grid: every sequence must be at most max_seqlen long. Rows that
// belong to no sequence are not written. FP16/BF16 with head_dim in {32, 64, 128} use tensor cores
// (WMMA, flash-style online softmax over 64-key tiles); every other case (FP32, other head sizes
// up to 256) uses a simple exact kernel.
void Attention(DType dtype, const void* qkv, const int32_t* cu_seqlens, int batch, int max_seqlen,
               int heads, int head_dim, float scale, void* ctx, cudaStream_t stream);
bool AttentionHasFastPath(DType dtype, int head_dim);

// Which implementation a kernel family uses, process-wide, read at each launch (a captured graph
// keeps the variant it was captured with). Every variant computes the same function within the
// dtype's tolerance and is tested against the CPU reference; they exist so one device run can
// compare them. Defaults: variant 1 and PDL (they passed every kernel, encoder and parity test on
// the H200 on 2026-12-01 and run BERT-base 1.3x faster at 128 x 64); the environment variable
// HOTLINE_CUDA_KERNELS ("ln=0,attn=0,pdl=0,search=0,own=0") overrides them at the first call. Reading them is
// lock-free (one atomic load per launch).
//   layernorm: 0 block per row through shared memory; 1 warp per row, 16-byte vectors, values in
//              registers (hidden <= 1024 and a multiple of the vector width; else 0)
//   attention: 0 WMMA with shared-memory accumulators; 1 mma.sync with register accumulators
//              (FP16/BF16, head size 32/64/128; else the exact kernel); 2 the same, and
//              batches of sequences of at most 64 tokens that fill the GPU take several heads
//              per block, the next head's Q/K/V loading while this one computes
//              (attention_mma.cu AttentionShortKernel; FP16/BF16 output: the quantised-output
//              attention of INT8/FP8 encoders runs variant 1's kernel)
//   pdl:       1 launches LayerNorm (variant 1), attention (variant 1) and our small GEMMs with
//              programmatic dependent launch on sm_90+ (the next kernel is scheduled while the
//              previous one finishes; each waits for its predecessor's completion before reading
//              anything: griddepcontrol.wait first thing); 0 plain launches. cuBLASLt's
//              kernels are never joined that way: they do not wait for a programmatic
//              predecessor (bench/cuda/lt_pdl_probe.cu; PERF_NOTES session 7)
//   gemm_search: 0 QuantGemm times the cuBLASLt heuristic's candidates only; 1 for fused FP8
//              GEMMs of at least 4,096 rows also the configurations around them, as a TensorRT
//              tactic search (quant_gemm.cu WideSearch: every tile of the heuristic's best
//              algorithm, then kernel options x cluster shapes x swizzles on the best three tiles
//              and the heuristic's best two; at most 480 screened, about 1 s per GEMM shape and
//              row count on an H200). Read when a QuantGemm prepares a row count, not per
//              launch: prepared GEMMs keep their choice (per process, and in the encoder's
//              timing cache file: a later process reuses it untimed). Never INT8.
//   own_gemm:  1 fused per-tensor FP8 GEMMs of at least 4,096 rows with one of the encoders'
//              epilogues (FFN1's GELU into E4M3, QKV's bias, the residual GEMMs' bias +
//              residual; fast accumulation) are also timed with our own CUTLASS-built kernels
//              (fp8_gemm_sm90.h, sm_90 only), the faster kept, per process and in the timing
//              cache as the search's choices (on the H200 ours wins FFN1 only); 0 cuBLASLt
//              only; 2 ours wherever it applies (tests, measurements). Read when a QuantGemm
//              prepares a row count (tuning on), not per launch.
struct KernelVariants {
  int layernorm = 1;
  int attention = 2;
  int pdl = 1;
  int gemm_search = 1;
  int own_gemm = 1;
};
KernelVariants GetKernelVariants();
void SetKernelVariants(const KernelVariants& v);

// Sets some kernel variants for a scope and restores all of them on exit, also when the scope
// throws (tests and benches comparing variants). A negative value keeps that field as it is.
class ScopedKernelVariants {
 public:
  explicit ScopedKernelVariants(int layernorm = -1, int attention = -1, int pdl = -1,
                                int gemm_search = -1, int own_gemm = -1)
      : saved_(GetKernelVariants()) {
    KernelVariants v = saved_;
    if (layernorm >= 0) v.layernorm = layernorm;
    if (attention >= 0) v.attention = attention;
    if (pdl >= 0) v.pdl = pdl;
    if (gemm_search >= 0) v.gemm_search = gemm_search;
    if (own_gemm >= 0) v.own_gemm = own_gemm;
    SetKernelVariants(v);
  }
  ~ScopedKernelVariants() { SetKernelVariants(saved_); }
  ScopedKernelVariants(const ScopedKernelVariants&) = delete;
  ScopedKernelVariants& operator=(const ScopedKernelVariants&) = delete;

 private:
  KernelVariants saved_;
};

// y[b] = x[cu_seqlens[b]] (the first token, [CLS], of each sequence), rows of `hidden`.
// Sequences whose first row is not below `rows` (empty padding sequences) copy row rows-1.
void GatherFirstToken(DType dtype, const void* x, const int32_t* cu_seqlens, int batch, int rows,
                      int hidden, void* y, cudaStream_t stream);

// Classifier heads: for each of `rows` rows of `n` logits (row stride `ld` >= n elements, dtype),
// writes FP32 logits [rows, n] (optional), FP32 softmax probabilities [rows, n] (optional) and the
// argmax (first maximum) [rows] (optional).
void SoftmaxArgmax(DType dtype, const void* logits, int rows, int n, int ld, float* logits_f32,
                   float* probs, int32_t* argmax, cudaStream_t stream);

}  // namespace hotline::engine::cuda
