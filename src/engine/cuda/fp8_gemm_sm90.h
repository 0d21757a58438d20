// Our own FP8 (E4M3) GEMMs for Hopper (sm_90a), timed against cuBLASLt's choice by QuantGemm,
// which keeps the faster per problem (quant_gemm.h, KernelVariants::own_gemm). Three epilogues,
// those of the FP8 encoders' per-tensor GEMMs (encoder_quant.h):
//
//   kGeluE4m3 (FFN1):          y[M, N] e4m3 = saturate(gelu_tanh(a * b * (x . w^T) + bias) * d)
//   kBiasF16 (QKV):            y[M, N] fp16 = a * b * (x . w^T) + bias
//   kBiasResidualF16 (output,  y[M, N] fp16 = a * b * (x . w^T) + bias + residual[M, N]
//                     FFN2)    (residual may be y itself: in place, as the encoders run it)
//
// x [M, K] and w [N, K] E4M3, a and b device scalars (the per-tensor weight and activation
// scales), d = 1 / y_scale, bias FP32; FP8 fast accumulation (the encoders' default). Why:
// cuBLASLt's FFN1 spends 9.5 us of its 43.7 us at 8,192 rows on the GELU epilogue (PERF_NOTES
// item 22); these are ping-pong kernels, whose two consumer warp groups take alternate tiles,
// so one's epilogue can run while the other's main loop holds the tensor cores.
// Built on CUTLASS's warp-specialised TMA / WGMMA collectives and fused epilogues (headers from
// PyPI's nvidia-cutlass, scripts/setup.sh), instantiated in fp8_gemm_sm90_*.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace hotline::engine::cuda {

enum class OwnEpilogue { kGeluE4m3, kBiasF16, kBiasResidualF16 };
const char* OwnEpilogueName(OwnEpilogue e);  // "gelu e4m3", "bias fp16", "bias+residual fp16"

struct OwnFp8GemmProblem {
  OwnEpilogue epilogue = OwnEpilogue::kGeluE4m3;
  const void* w = nullptr;         // [N, K] e4m3
  const void* x = nullptr;         // [M, K] e4m3
  const float* bias = nullptr;     // [N] FP32
  const float* a_scale = nullptr;  // device scalars
  const float* b_scale = nullptr;
  const float* d_scale = nullptr;  // kGeluE4m3: multiplies the GELU's output before rounding
  const void* residual = nullptr;  // kBiasResidualF16: [M, N] fp16 (may equal y)
  void* y = nullptr;               // [M, N] e4m3 or fp16
  int M = 0, N = 0, K = 0;
};

// Whether this build has the kernels (CUDA architectures include 90, CUTLASS found) and the
// current device can run them (compute capability 9.0).
bool OwnFp8GemmAvailable();
int OwnFp8GemmConfigs();                  // all epilogues; 0 when not compiled in
std::string OwnFp8GemmConfigName(int c);  // "gelu e4m3 pingpong 128x128 c1x2 raster N s1"
OwnEpilogue OwnFp8GemmConfigEpilogue(int c);
// Empty if configuration c can run the problem (its epilogue, alignment, sizes, CUTLASS's
// can_implement), else why not.
std::string OwnFp8GemmCheck(int c, const OwnFp8GemmProblem& p);
size_t OwnFp8GemmWorkspaceBytes(int c, const OwnFp8GemmProblem& p);
// Enqueues the GEMM on `stream` (capturable). workspace: OwnFp8GemmWorkspaceBytes bytes (null if
// 0). Throws hotline::Error if CUTLASS refuses it; check first.
void OwnFp8GemmRun(int c, const OwnFp8GemmProblem& p, void* workspace, cudaStream_t stream);

}  // namespace hotline::engine::cuda
