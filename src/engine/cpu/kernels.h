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
  // 1 onednn_f32, 2 onednn_bf16 (AVX-512 CPUs), 3 packed_f32, 4 packed_bf16 (our kernels).
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

}  // namespace hotline::engine::cpu
