// The own FP8 GEMM's kernels (fp8_gemm_sm90.h) for FFN1's GELU with the E4M3 output.
#include "engine/cuda/fp8_gemm_sm90_impl.cuh"

namespace hotline::engine::cuda::own_fp8 {

void RegisterGelu(std::vector<Config>* out) {
  RegisterAll<OwnEpilogue::kGeluE4m3>(out);
}

}  // namespace hotline::engine::cuda::own_fp8
