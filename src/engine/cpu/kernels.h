// CPU kernels for the fused encoder ops: the contract between the plan executor (engine core)
// and the CPU backend's kernels. All activations are row-major FP32 unless stated; `rows` is the
// number of tokens of a packed batch (padding-free). Kernels parallelise internally (OpenMP) and
// never allocate on the hot path: scratch comes from the caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hotline::engine::cpu {

enum class Epilogue { kNone, kGelu /* exact erf GELU */, kTanh };
enum class GemmPrecision { kFP32, kBF16 /* bf16 inputs/weights, fp32 accumulate and output */ };

// True when this CPU executes AVX512-BF16 natively.
bool CpuHasBf16();
bool CpuHasAvx512();
bool CpuHasVnni();
// AMX-TILE + AMX-INT8 with the OS's permission for this process (asked for on the first call).
bool CpuHasAmxInt8();
// AMX-TILE + AMX-BF16 (and AVX512-BF16) with the same permission.
bool CpuHasAmxBf16();
std::string CpuIsaString();  // e.g. "avx512_core_bf16" for plan fingerprints

// Y[M,N] = X[M,K] · W[K,N] + bias[N], then epilogue; optionally + residual[M,N] (added after the
// epilogue). Weights are prepared (reordered, converted) once at construction and the caller's
// weight and bias buffers are not referenced afterwards; Run is thread-safe for different output
// buffers; residual may alias y (in-place residual add). An unavailable tactic throws
// hotline::Error (kFailedPrecondition) naming the available ones. `tactic` selects the
// implementation chosen at build time (0 lets the kernel choose); Tactics() lists the candidates
// the build-time tuner times.
class Gemm {
 public:
  Gemm(const float* weight_kn, int K, int N, const float* bias, Epilogue epilogue,
       GemmPrecision precision, int tactic = 0);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;
  void Run(const float* x, int M, float* y, const float* residual = nullptr) const;
  // Candidates available on this CPU for `precision` (stable numbers, recorded in plans):
  // 1 onednn_f32, 2 onednn_bf16 (AVX-512 CPUs), 3 packed_f32, 4 packed_bf16 (our kernels);
  // 5 onednn_s8, 6 packed_s8 (AVX2), 7 packed_vnni (AVX512-VNNI) and 8 packed_amx (AMX-INT8)
  // are GemmS8's (TacticName knows them).
  static std::vector<int> Tactics(GemmPrecision precision);
  static const char* TacticName(int tactic);  // "onednn_f32", ...; "unknown" otherwise
  int K() const;
  int N() const;
  int tactic() const;  // the tactic in use (never 0: auto is resolved at construction)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// y = LayerNorm(x (+ residual)) · gamma + beta over rows of `hidden`. x, residual, y may alias.
void LayerNorm(const float* x, const float* residual, const float* gamma, const float* beta,
               float eps, int rows, int hidden, float* y);

// y[t] = LayerNorm(word[ids[t]] + pos[t - seq_start(t)] + type[type_ids[t]]) over packed tokens.
// type_ids may be null (all zero).
void EmbeddingLayerNorm(const int32_t* ids, const int32_t* type_ids, const int32_t* cu_seqlens,
                        int batch, const float* word, int vocab, const float* pos, int max_pos,
                        const float* type, int type_vocab, const float* gamma, const float* beta,
                        float eps, int hidden, float* y);

// Multi-head self-attention over packed sequences.
// qkv: [T, 3*heads*head_dim] laid out as Q | K | V (each heads × head_dim).
// ctx: [T, heads*head_dim]. Each sequence attends only within [cu_seqlens[b], cu_seqlens[b+1]).
// scratch: at least AttentionScratchFloats(max_seqlen, threads) floats, where max_seqlen bounds
// every sequence of the batch and threads >= omp_get_max_threads() of the calling thread (each
// OpenMP thread uses its own slice). Softmax is max-subtracted (stable for any score range).
size_t AttentionScratchFloats(int max_seqlen, int threads);
void Attention(const float* qkv, const int32_t* cu_seqlens, int batch, int heads, int head_dim,
               float scale, float* ctx, float* scratch);

// Elementwise helpers for the generic (unfused) path.
void Gelu(const float* x, int64_t n, float* y);

// ---- INT8 (symmetric, per-tensor activations, per-output-channel weights; see engine/quant.h) --

// y[i] = clamp(round_half_even(x[i] * inv_scale), -127, 127).
void QuantizeS8(const float* x, int64_t n, float inv_scale, int8_t* y);

// The largest |weight| code GemmS8 accepts on this CPU: 127 where the CPU has VNNI (vpdpbusd
// accumulates u8·s8 products in int32), 63 elsewhere, where oneDNN's int8 GEMM uses vpmaddubsw,
// whose int16 sum of two u8·s8 products saturates unless 255·|w|·2 <= 32767.
int S8WeightQmax();

// Y[M,N] = act((X_q · W_q) * x_scale * w_scale[n] + bias[n]) (+ residual), X_q s8 [M,K] row-major
// (x ≈ X_q * x_scale), W_q s8 [K,N] row-major (W[:,n] ≈ W_q[:,n] * w_scale[n], |W_q| <= 
// S8WeightQmax()), int32 accumulation, scales folded into the output scales (no dynamic scale
// computation). Output fp32, or, when out_scale > 0, s8: Y_q = clamp(round(Y / out_scale), ±127)
// (the quantisation of the next GEMM's input fused into this one; no residual then).
// Weights are prepared at construction; Run is thread-safe for different outputs; residual may
// alias y. Tactics: 5 onednn_s8 everywhere; 6 packed_s8 on AVX2 CPUs without VNNI; 7 packed_vnni
// on CPUs with AVX512-VNNI; 8 packed_amx where AMX-INT8 is also usable (our packed kernels;
// auto = 0 picks packed_amx, else packed_vnni, else packed_s8, where offered).
class GemmS8 {
 public:
  GemmS8(const int8_t* weight_kn, int K, int N, const float* w_scale, float x_scale,
         const float* bias, Epilogue epilogue, float out_scale = 0.f, int tactic = 0);
  ~GemmS8();
  GemmS8(const GemmS8&) = delete;
  GemmS8& operator=(const GemmS8&) = delete;
  void Run(const int8_t* x, int M, void* y, const float* residual = nullptr) const;
  static std::vector<int> Tactics();
  int K() const;
  int N() const;
  int tactic() const;
  bool s8_output() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// LayerNorm as above that also writes yq = QuantizeS8(y, inv_scale) row by row (the row is still
// in L1): the fused producer of a quantised GEMM input. y may be null (only the s8 copy needed).
void LayerNormS8(const float* x, const float* residual, const float* gamma, const float* beta,
                 float eps, int rows, int hidden, float* y, int8_t* yq, float inv_scale);

// EmbeddingLayerNorm with an s8 word table with per-row scales (word[r] ≈ word_q[r] *
// word_scale[r]; the gather dequantises), and an optional s8 copy of the output (yq, inv_scale;
// yq null = none). word_q may instead be null with word (fp32) set.
void EmbeddingLayerNormS8(const int32_t* ids, const int32_t* type_ids, const int32_t* cu_seqlens,
                          int batch, const float* word, const int8_t* word_q,
                          const float* word_scale, int vocab, const float* pos, int max_pos,
                          const float* type, int type_vocab, const float* gamma, const float* beta,
                          float eps, int hidden, float* y, int8_t* yq, float inv_scale);

}  // namespace hotline::engine::cpu
