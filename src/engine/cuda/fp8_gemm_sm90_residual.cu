// The own FP8 GEMM's kernels (fp8_gemm_sm90.h) for the output and FFN2 GEMMs: bias and
// residual, FP16.
#include "engine/cuda/fp8_gemm_sm90_impl.cuh"

namespace hotline::engine::cuda::own_fp8 {

void RegisterResidual(std::vector<Config>* out) {
  RegisterAll<OwnEpilogue::kBiasResidualF16>(out);
}

}  // namespace hotline::engine::cuda::own_fp8
