// The own FP8 GEMM's registry (fp8_gemm_sm90.h), without CUTLASS: what the instantiating files
// (fp8_gemm_sm90_*.cu, built for sm_90a) hand to fp8_gemm_sm90.cc.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

#include "engine/cuda/fp8_gemm_sm90.h"

namespace hotline::engine::cuda::own_fp8 {

// One configuration as the registry lists it.
struct Config {
  std::string name;
  OwnEpilogue epilogue;
  std::string (*check)(const OwnFp8GemmProblem&, int variant);
  size_t (*workspace)(const OwnFp8GemmProblem&, int variant);
  void (*run)(const OwnFp8GemmProblem&, int variant, void* workspace, cudaStream_t);
  int variant;  // tile order: raster and swizzle (fp8_gemm_sm90_impl.cuh, VariantName)
};

int SmCount();  // the current device's, cached (fp8_gemm_sm90.cc)

// Each instantiating file appends its kernels (fp8_gemm_sm90_{gelu,bias,residual}.cu).
void RegisterGelu(std::vector<Config>* out);
void RegisterBias(std::vector<Config>* out);
void RegisterResidual(std::vector<Config>* out);

}  // namespace hotline::engine::cuda::own_fp8
