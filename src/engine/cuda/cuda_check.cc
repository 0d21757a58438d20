#include "engine/cuda/cuda_check.h"

namespace hotline::engine::cuda {

void ThrowCudaError(cudaError_t err, const char* expr, const char* file, int line) {
  const Code code = err == cudaErrorMemoryAllocation ? Code::kResourceExhausted
                    : (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver)
                        ? Code::kFailedPrecondition
                        : Code::kInternal;
  throw Error(std::string("CUDA error at ") + file + ":" + std::to_string(line) + ": " + expr +
                  " failed: " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")",
              code);
}

void ThrowCublasError(cublasStatus_t st, const char* expr, const char* file, int line) {
  throw Error(std::string("cuBLASLt error at ") + file + ":" + std::to_string(line) + ": " + expr +
                  " failed: status " + std::to_string(int(st)),
              st == CUBLAS_STATUS_ALLOC_FAILED ? Code::kResourceExhausted : Code::kInternal);
}

}  // namespace hotline::engine::cuda
