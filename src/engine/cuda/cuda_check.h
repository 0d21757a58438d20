// Error checks for CUDA runtime and cuBLASLt calls: failures throw hotline::Error naming the call
// site (file:line), the expression and the library's own message. Nothing here aborts.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "base/error.h"

namespace hotline::engine::cuda {

[[noreturn]] void ThrowCudaError(cudaError_t err, const char* expr, const char* file, int line);
[[noreturn]] void ThrowCublasError(cublasStatus_t st, const char* expr, const char* file, int line);

}  // namespace hotline::engine::cuda

#define CUDA_CHECK(expr)                                                                  \
  do {                                                                                    \
    const cudaError_t hl_err_ = (expr);                                                   \
    if (hl_err_ != cudaSuccess)                                                           \
      ::hotline::engine::cuda::ThrowCudaError(hl_err_, #expr, __FILE__, __LINE__);        \
  } while (0)

// After a kernel launch: a bad launch configuration shows up here, not at the launch itself.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#define CUBLAS_CHECK(expr)                                                                \
  do {                                                                                    \
    const cublasStatus_t hl_st_ = (expr);                                                 \
    if (hl_st_ != CUBLAS_STATUS_SUCCESS)                                                  \
      ::hotline::engine::cuda::ThrowCublasError(hl_st_, #expr, __FILE__, __LINE__);       \
  } while (0)
