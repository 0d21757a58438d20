// Quantised CUDA encoders: the four big GEMMs of every BERT layer (QKV, attention output, FFN1,
// FFN2) in INT8 or FP8 E4M3 through QuantGemm, everything else (embeddings, LayerNorm, residual
// sums, attention softmax, pooler and heads) in the encoder's `dtype` (FP16 by default).
//
// Per layer, with s = the fixed per-tensor activation scales (EncoderOptions::act_scales):
//   xq = Q(x / s0)            QKV    = QuantGemm(xq) + bias                       (dtype)
//   ctx = Attention(QKV)      cq = Q(ctx / s1)   x = QuantGemm(cq) + bias + x     (in place)
//   x = LayerNorm(x)          xq = Q(x / s2)     u = GELU(QuantGemm(xq) + bias)
//   uq = Q(u / s3)            x = QuantGemm(uq) + bias + x;  x = LayerNorm(x)
// Q rounds to nearest (INT8: [-127, 127]; E4M3: saturating at +-448). Weights: symmetric, 8-bit
// only on the device (no FP16 copy of a quantised GEMM's weights); per output channel by default
// (FP8 may take one scale per matrix instead, EncoderOptions::fp8_weight_scaling: cuBLASLt's
// plain FP8 GEMM, faster at small batches but less accurate); the word-embedding table in INT8
// with per-row scales. Memory tiling above the options' thresholds: FFN row chunks, QKV +
// attention in head groups (EncoderOptions::quant_ffn_chunk_rows, quant_qkv_group_tokens).
// Fusions (EncoderOptions): LayerNorm writes Q(x / s) itself, attention writes cq itself
// (AttentionQuant), FFN1 writes uq in E4M3 itself (where cuBLASLt can).
// Scales are fixed when the encoder is created (no dynamic range computation on the hot path);
// CalibrateEncoder measures them from sample batches with an unquantised encoder.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/cuda/encoder.h"
#include "engine/cuda/quant_gemm.h"

namespace hotline::engine::cuda {

// The quantised GEMM inputs of one layer, in act_scales order.
inline constexpr int kQuantGemmsPerLayer = 4;  // QKV in, attention-output in, FFN1 in, FFN2 in
const char* QuantGemmInputName(int slot);      // "qkv_in", "out_in", "ff1_in", "ff2_in"

QuantType ToQuantType(EncoderQuant q);  // throws for kNone
const char* EncoderQuantName(EncoderQuant q);  // "none", "int8", "fp8"
EncoderQuant ParseEncoderQuant(const std::string& name);  // "int8" | "fp8" | "none"; throws

// A packed batch on the host (the arguments of CudaEncoderContext::Run).
struct EncoderBatch {
  std::vector<int32_t> ids, types, cu;  // types may be empty (all zero)
};

// Runs an unquantised encoder (options.dtype, quant ignored, eager, untuned) over `batches` and
// returns max |x| over every real token ([layers][4]) of each quantised GEMM's input. Throws on
// an empty batch list or a malformed batch. (Plans take percentile/KL ranges from the engine's
// calibration instead; amax is what tests and benchmarks on random weights use.)
std::vector<float> CalibrateEncoderAmax(const EncoderConfig& config, const EncoderWeights& weights,
                                        const EncoderOptions& options,
                                        const std::vector<EncoderBatch>& batches);

// act_scales for EncoderOptions: amax / 127 (INT8) or amax / 224 (FP8: 2x headroom below
// E4M3's 448, free in a floating-point format), with a floor for all-zero tensors.
std::vector<float> ScalesFromAmax(const std::vector<float>& amax, EncoderQuant q);

// Random packed batches for calibration in tests and benchmarks: lengths 1..max_len, ids in
// [0, vocab) (token types 0/1 when type_vocab > 1).
std::vector<EncoderBatch> RandomEncoderBatches(const EncoderConfig& config, int count, int batch,
                                               int max_len, uint64_t seed);

// Plans carry the scales in the runner's tuning record (backend_cuda.cc) as one text line:
// "hotline-quant-scales <int8|fp8> <n> <scale>...". Parse returns false when `record` has no
// such line for q with n values (then the caller calibrates).
std::string QuantScalesLine(EncoderQuant q, const std::vector<float>& scales);
bool ParseQuantScalesLine(const std::string& record, EncoderQuant q, size_t n,
                          std::vector<float>* scales);
// FP8 plans also record the weight scaling they were built with ("hotline-fp8-weight-scaling
// per_tensor|per_channel"); Parse returns false when the record has no such line (plans from
// before the choice existed were per channel) and throws on an unknown value.
std::string Fp8WeightScalingLine(WeightScaling s);
bool ParseFp8WeightScalingLine(const std::string& record, WeightScaling* s);
// The plan record's FP8 fast-accumulation bound (EncoderOptions::fp8_fast_accum_max_k): the
// line, and its parse (false when the record has none; throws on a malformed one).
std::string Fp8FastAccumLine(int max_k);
bool ParseFp8FastAccumLine(const std::string& record, int* max_k);

// x = LayerNorm(x) * gamma + beta in place over rows of `hidden` (<= 1024; FP32 two-pass
// statistics) and xq = Q(x / x_scale) of the stored values, in one pass (encoder_quant.cu): the
// quantised encoder's LayerNorms feed the next GEMM this way (EncoderOptions::
// quant_fuse_layernorm).
bool LayerNormQuantSupported(int hidden);
void LayerNormQuant(DType dtype, void* x, int rows, int hidden, const float* gamma,
                    const float* beta, float eps, float x_scale, QuantType q, void* xq,
                    cudaStream_t stream);

// Attention (kernels.h's Attention, same arguments) writing its output quantised:
// ctx_q[t][c] = Q(ctx_rounded / out_scale), ctx_rounded being the value Attention would store in
// `dtype`, so the bytes equal Attention followed by QuantizeActivations. Supported where the
// tensor-core kernel of variant 1 serves the call (FP16/BF16, head size 32/64/128, attention
// variant 1 or 2): AttentionQuantSupported; elsewhere AttentionQuant throws (callers use Attention +
// QuantizeActivations). Rows outside every sequence are not written.
// qkv_interleaved: qkv rows are laid out per head, [Q_0 K_0 V_0 | Q_1 K_1 V_1 | ...] (3 *
// head_dim columns per head, row stride 3 * heads * head_dim), as the QKV GEMM of a quantised
// encoder with head groups writes them (EncoderOptions::quant_qkv_group_tokens). out_ld: row
// stride of ctx_q in bytes (0: heads * head_dim; else a multiple of 4, and ctx_q 4-byte aligned:
// the kernel writes 4-byte words): a head group writes its columns of the full [tokens, hidden]
// context, ctx_q then pointing at the group's first column.
bool AttentionQuantSupported(DType dtype, int head_dim);
void AttentionQuant(DType dtype, const void* qkv, const int32_t* cu_seqlens, int batch,
                    int max_seqlen, int heads, int head_dim, float scale, float out_scale,
                    QuantType q, void* ctx_q, cudaStream_t stream, bool qkv_interleaved = false,
                    int out_ld = 0);

// Device helper (encoder_quant.cu): amax[0] = max(amax[0], max_i |x[i]|) over n elements of
// `dtype`; amax is one FP32 value on the device holding a non-negative number.
void AbsMaxAccumulate(DType dtype, const void* x, int64_t n, float* amax, cudaStream_t stream);

}  // namespace hotline::engine::cuda
