// INT8 and FP8 (E4M3) GEMMs through cuBLASLt with the quantisation scales folded into the
// epilogue: y[M, N] = epilogue(x_scale * w_scale[n] * (xq[M, K] . wq[K, N]) + bias[n])
// (+ residual), written in FP16, BF16 or FP32.
//
// Scales: activations per tensor (x_scale = calibrated amax / qmax, fixed when the plan is built:
// no dynamic range computation on the hot path); weights symmetric, quantised here from the FP32
// weights, either per output channel (w_scale[n] = max_k |W[k][n]| / qmax, WeightScaling::
// kPerChannel) or per tensor (one w_scale = max |W| / qmax for the whole matrix, kPerTensor).
// qmax = 127 (INT8) or 448 (E4M3's largest finite value).
//
// Paths (chosen per row count M by what cuBLASLt offers on this GPU, reported by path()):
//   INT8: IMMA (TN, int32 accumulation) into an int32 [M, ldn] scratch, then our dequantising
//         epilogue kernel (scales, bias, activation, residual, output type) in one pass.
//   FP8 per tensor: cuBLASLt's plain FP8 GEMM, D = (a_scale * b_scale) * (W_e4m3 . X_e4m3)
//         (+ C), scalar A/B scale pointers (what TensorRT and Transformer Engine use: Hopper's
//         fast FP8 kernels), bias / GELU epilogue, FP16/BF16 out, residual as C with beta = 1,
//         or E4M3 out with a D scale (SetQuantisedOutput) ("fused").
//   FP8 per channel: cuBLASLt with per-channel x per-token scale vectors (OUTER_VEC_32F) and its
//         bias / GELU epilogue straight into the output type ("fused").
//   FP8, where the library refuses both: FP8 into an FP32 scratch and our dequantising epilogue
//         ("fp32 acc + epilogue").
// FP8 fast accumulation (CUBLASLT_MATMUL_DESC_FAST_ACCUM) is off unless asked for: Hopper's fast
// FP8 accumulation keeps ~14 bits over the whole K.
// FP8 needs sm_89 or newer (QuantTypeSupported). Shapes: K and N multiples of 16.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/cuda/fp8_gemm_sm90.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/kernels.h"

namespace hotline::engine::cuda {

enum class QuantType { kInt8, kFp8E4M3 };
const char* QuantTypeName(QuantType q);  // "int8", "fp8_e4m3"
float QuantMax(QuantType q);             // 127 or 448
// Whether the current device can run this type through cuBLASLt (INT8: sm_75+, FP8: sm_89+).
bool QuantTypeSupported(QuantType q);

// xq[i] = saturate(round_to_nearest_even(x[i] / x_scale)) in q's type (INT8: [-127, 127];
// FP8: E4M3, saturating to +-448). x in `src` type (FP32/FP16/BF16). n any; no alignment needed.
void QuantizeActivations(DType src, const void* x, int64_t n, float x_scale, QuantType q,
                         void* xq, cudaStream_t stream);

// How a prepared problem's algorithm was chosen (QuantGemm::Tuning, path()).
enum class QuantTuneSource {
  kNone,       // not prepared
  kTimed,      // timed here: the heuristic's candidates (and the wide search where it applies)
  kProcess,    // the same problem chosen earlier in this process (e.g. the same GEMM in another
               // layer): reused without timing
  kCache,      // from the GemmTuningCache (e.g. a timing-cache file): accepted by cuBLASLt for
               // this problem and run once, not timed
  kHeuristic,  // no tuning (SetTuning): the heuristic's first algorithm that runs, untimed
};
const char* QuantTuneSourceName(QuantTuneSource s);  // "timed", "reused", "timing cache", ...

// How the weights of a QuantGemm are scaled (see above).
enum class WeightScaling { kPerChannel, kPerTensor };
const char* WeightScalingName(WeightScaling s);  // "per_channel", "per_tensor"
WeightScaling ParseWeightScaling(const std::string& name);  // throws naming the choices

class QuantGemm {
 public:
  // weight_kn: host FP32 [K, N]; bias: host FP32 [N] or null. epilogue: kNone, kBias,
  // kBiasGelu (exact erf), kBiasGeluTanh or kBiasTanh. Throws hotline::Error on bad sizes, an
  // unsupported type for this GPU, or x_scale <= 0.
  // max_rows bounds every M this GEMM will run with (FP8's per-row scale vector is that long).
  // scaling: per output channel (default) or one scale for the whole matrix; fast_accum: FP8
  // only, cuBLASLt's fast (reduced-precision) accumulation.
  QuantGemm(const float* weight_kn, int K, int N, const float* bias, GemmEpilogue epilogue,
            QuantType q, float x_scale, DType out_dtype, int max_rows = kMaxRows,
            WeightScaling scaling = WeightScaling::kPerChannel, bool fast_accum = false);
  // A view of output columns [n0, n0 + n) of `parent` (a GEMM with N = n over the same K): it
  // shares the parent's device weights, scales and bias (nothing is copied or allocated; the
  // parent must outlive it) and prepares its own problems. n0 and n multiples of 16; not for a
  // parent with SetQuantisedOutput. Each output column is the parent's column n0 + j, computed
  // from the same 8-bit weights and scales. weight_bytes() is 0 (the parent counts them).
  QuantGemm(const QuantGemm& parent, int n0, int n);
  ~QuantGemm();
  QuantGemm(const QuantGemm&) = delete;
  QuantGemm& operator=(const QuantGemm&) = delete;

  // Chooses the path and algorithm for M rows (outside graph capture; may allocate). Times the
  // cuBLASLt heuristic's candidates; fused FP8 GEMMs of 4,096 rows or more also up to 480
  // configurations around them (KernelVariants::gemm_search; about 1 s per problem). Choices are
  // kept per process for the same problem and, with a tuning cache (SetTuning), in the cache
  // too (keys "quant|...", saved with the FP16 GEMMs' choices: an encoder's timing-cache file),
  // so another process on the same GPU model and cuBLASLt takes the choice without timing: after
  // a per-process miss, a cached algorithm is used once cuBLASLt accepts it for this problem
  // (cublasLtMatmulAlgoCheck) and one launch of it runs; else (a stale or foreign entry) one
  // line goes to stderr and the problem is timed as if the entry were absent. On the fused path
  // the residual is timed in place (C = D), as the encoders run it.
  void Prepare(int M, bool with_residual, LtWorkspace& ws, cudaStream_t stream);
  // y[M, N] (+)= ... from quantised activations xq [M, K]. `acc` is a scratch of at least
  // AccBytes(M) bytes (may be null when AccBytes(M) == 0), private to this stream. residual
  // [M, N] in out_dtype may alias y.
  void Run(const void* xq, int M, void* y, const void* residual, void* acc, LtWorkspace& ws,
           cudaStream_t stream);
  size_t AccBytes(int M) const;  // 0 when the chosen path needs no scratch (call Prepare first)
  // Whether (M, with_residual) is prepared on the fused path (no scratch); false if unprepared.
  bool Fused(int M, bool with_residual) const;
  bool IsPrepared(int M, bool with_residual) const;

  // FP8 only, before any Prepare: where cuBLASLt can, the output (no residual) is written in E4M3
  // as saturate(y / y_scale) — the next GEMM's quantised input, skipping a quantise pass; Run's
  // y then points to [M, N] bytes. QuantisedOutput(M) says whether M's prepared path does so
  // (else y is in out_dtype as usual).
  void SetQuantisedOutput(float y_scale);
  bool QuantisedOutput(int M) const;

  // Before any Prepare (a column view takes its parent's at construction): `cache` (may be
  // null: choices per process only; must outlive this GEMM) is where choices are looked up after
  // a per-process miss and stored after timing; tune false (EncoderOptions::tune) takes the
  // heuristic's first algorithm that runs (one check launch each, no timing, no wide search),
  // kept under its own keys ("|heuristic"). Default: no cache, tuning on.
  void SetTuning(GemmTuningCache* cache, bool tune);
  // How (M, with_residual)'s algorithm was chosen: source kNone if unprepared; ms and candidates
  // as timed (also when taken from the process or the cache; -1 and 0 when untimed).
  struct TuneInfo {
    QuantTuneSource source = QuantTuneSource::kNone;
    cublasLtMatmulAlgo_t algo{};
    float ms = -1.f;
    int candidates = 0;
    int own = -1;         // our own FP8 GEMM's configuration when it was chosen (fp8_gemm_sm90.h)
    float lt_ms = -1.f;   // then cuBLASLt's best, timed beside it
  };
  TuneInfo Tuning(int M, bool with_residual) const;
  // Forgets every process-wide choice (the next Prepare of a problem consults its cache or
  // times): for tests of the cache and for measuring the search.
  static void ForgetProcessChoices();

  int K() const { return K_; }
  int N() const { return N_; }
  QuantType type() const { return q_; }
  float x_scale() const { return x_scale_; }
  // [N] per-channel scales; per tensor, N copies of the one scale.
  const std::vector<float>& weight_scales() const { return w_scale_host_; }
  WeightScaling scaling() const { return scaling_; }
  bool fast_accum() const { return fast_accum_; }
  size_t weight_bytes() const;  // quantised weights + scales + bias
  std::string path(int M) const;

 private:
  struct Prepared {
    bool fused = false;  // FP8 with cuBLASLt's scaling and epilogue; else int32/FP32 scratch
    bool beta_one = false;
    bool q_out = false;  // D in E4M3 (SetQuantisedOutput)
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo;
    float ms = -1.f;  // timed device time of the chosen algorithm (-1: not timed)
    int candidates = 0;  // configurations timed (the heuristic's and the wide search's)
    QuantTuneSource source = QuantTuneSource::kNone;
    std::string refused;  // why a preferred (fused) path was refused before this one, if so
    // Our own FP8 GEMM (fp8_gemm_sm90.h) instead of cuBLASLt: its configuration, or -1; ms is
    // then its time, lt_ms cuBLASLt's best timed beside it (-1 where not timed).
    int own = -1;
    float lt_ms = -1.f;
  };
  // On refusal, appends why (the step and cuBLASLt's status) to *why.
  bool TryPrepare(int M, bool fused, bool beta_one, bool q_out, LtWorkspace& ws, Prepared* p,
                  std::string* why);
  // For a fused per-tensor FP8 GEMM with one of the encoders' epilogues (fp8_gemm_sm90.h) on
  // sm_90, 4,096 rows or more (KernelVariants::own_gemm, tuning on): times cuBLASLt's choice
  // against our own kernels' configurations on the same scratch data and keeps the faster in p
  // (process-wide and in the tuning cache, like cuBLASLt's choices).
  void ChooseOwn(int M, LtWorkspace& ws, Prepared* p);
  OwnFp8GemmProblem OwnProblem(OwnEpilogue e, const void* xq, int M, void* y,
                               const void* residual) const;
  static void Destroy(Prepared* p);
  void FreeDevice();  // every device buffer this GEMM owns (constructor failure, destructor)

  int K_, N_;
  GemmEpilogue epilogue_;
  QuantType q_;
  float x_scale_;
  DType out_;
  std::vector<float> w_scale_host_;
  void* w_ = nullptr;          // [N, K] int8 or e4m3
  float* w_scale_ = nullptr;   // [N] per-channel weight scales
  float* x_scale_vec_ = nullptr;  // [kMaxRows] x_scale repeated (FP8 outer-vector scaling)
  float* out_scale_ = nullptr;    // [N] x_scale * w_scale (our epilogue)
  void* bias_ = nullptr;       // [N] in out_dtype (cuBLASLt's epilogue)
  float* bias_f32_ = nullptr;  // [N] FP32 (our epilogue)
  float* y_scale_inv_ = nullptr;  // 1 / y_scale for an E4M3 output (SetQuantisedOutput)
  float* scalars_ = nullptr;      // per tensor: {w_scale, x_scale} (A / B scale pointers)
  WeightScaling scaling_;
  bool fast_accum_;
  bool owner_ = true;  // false for a column view (the parent frees the buffers)
  mutable std::mutex mu_;
  std::map<std::pair<int, bool>, Prepared> prepared_;
  int max_rows_;
  GemmTuningCache* cache_ = nullptr;  // SetTuning; a view's is its parent's
  bool tune_ = true;

 public:
  static constexpr int kMaxRows = 65536;
  static constexpr int kScalarStride = 64;  // floats between the per-tensor A and B scales
};

}  // namespace hotline::engine::cuda
