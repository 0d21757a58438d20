// The backend registry: the only place outside src/engine/cuda/ that knows whether CUDA is built.
#include "base/error.h"
#include "engine/backend.h"

namespace hotline::engine {

std::unique_ptr<Backend> CreateCpuBackend();  // backend_cpu.cc
#ifdef HOTLINE_WITH_CUDA
std::unique_ptr<Backend> CreateCudaBackend(int device);  // src/engine/cuda/
#endif

std::unique_ptr<Backend> CreateBackend(BackendKind kind, int device) {
  switch (kind) {
    case BackendKind::kCPU:
      return CreateCpuBackend();
    case BackendKind::kCUDA:
#ifdef HOTLINE_WITH_CUDA
      return CreateCudaBackend(device);  // throws when there is no usable GPU
#else
      throw Error("backend cuda is not built into this binary (configure with HOTLINE_CUDA=ON "
                  "on a machine with nvcc); refusing to fall back to cpu",
                  Code::kFailedPrecondition);
#endif
  }
  throw Error("unknown backend");
}

}  // namespace hotline::engine
