// The own FP8 GEMM's kernels (fp8_gemm_sm90.h) for the QKV GEMM's bias with the FP16 output.
#include "engine/cuda/fp8_gemm_sm90_impl.cuh"

namespace hotline::engine::cuda::own_fp8 {

void RegisterBias(std::vector<Config>* out) {
  RegisterAll<OwnEpilogue::kBiasF16>(out);
}

}  // namespace hotline::engine::cuda::own_fp8
