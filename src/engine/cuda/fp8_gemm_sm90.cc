// The own FP8 GEMM's registry and entry points (fp8_gemm_sm90.h). The kernels are compiled only
// where the build's CUDA architectures include 90 (HOTLINE_OWN_FP8_SM90, src/engine/cuda/
// CMakeLists.txt); elsewhere there are no configurations and the entry points refuse.
#include "engine/cuda/fp8_gemm_sm90.h"

#include <atomic>
#include <cstdint>
#include <vector>

#include "base/error.h"
#include "engine/cuda/fp8_gemm_sm90_config.h"

namespace hotline::engine::cuda {
namespace own_fp8 {

int SmCount() {  // per device: a process may drive GPUs of different models
  static std::atomic<int> count_of[64];  // 0: not read yet
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 0;  // CUTLASS queries
  int n = count_of[dev].load(std::memory_order_relaxed);
  if (!n) {
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    count_of[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}

namespace {

const std::vector<Config>& Configs() {
  static const std::vector<Config> configs = [] {
    std::vector<Config> c;
#ifdef HOTLINE_OWN_FP8_SM90
    RegisterGelu(&c);
    RegisterBias(&c);
    RegisterResidual(&c);
#endif
    return c;
  }();
  return configs;
}

const Config& At(int c) {
  const auto& all = Configs();
  if (c < 0 || c >= int(all.size()))
    throw Error("own FP8 GEMM: no configuration " + std::to_string(c) + " (this build has " +
                std::to_string(all.size()) + ")");
  return all[c];
}

}  // namespace
}  // namespace own_fp8

const char* OwnEpilogueName(OwnEpilogue e) {
  switch (e) {
    case OwnEpilogue::kGeluE4m3: return "gelu e4m3";
    case OwnEpilogue::kBiasF16: return "bias fp16";
    case OwnEpilogue::kBiasResidualF16: return "bias+residual fp16";
  }
  return "?";
}

bool OwnFp8GemmAvailable() {
  if (own_fp8::Configs().empty()) return false;
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  return major == 9 && minor == 0;  // sm_90a code runs on 9.0 only
}

int OwnFp8GemmConfigs() { return int(own_fp8::Configs().size()); }

std::string OwnFp8GemmConfigName(int c) { return own_fp8::At(c).name; }

OwnEpilogue OwnFp8GemmConfigEpilogue(int c) { return own_fp8::At(c).epilogue; }

std::string OwnFp8GemmCheck(int c, const OwnFp8GemmProblem& p) {
  const auto& cfg = own_fp8::At(c);
  if (!OwnFp8GemmAvailable()) return "needs a compute capability 9.0 GPU";
  if (cfg.epilogue != p.epilogue)
    return std::string("configuration for the ") + OwnEpilogueName(cfg.epilogue) +
           " epilogue, not " + OwnEpilogueName(p.epilogue);
  if (p.M <= 0 || p.N <= 0 || p.K <= 0) return "empty problem";
  if (p.N % 16 || p.K % 16) return "N and K must be multiples of 16";
  for (const void* ptr : {p.w, p.x, static_cast<const void*>(p.y)})
    if (!ptr || reinterpret_cast<uintptr_t>(ptr) % 16) return "operands must be 16-byte aligned";
  if (!p.bias || reinterpret_cast<uintptr_t>(p.bias) % 16) return "bias must be 16-byte aligned";
  if (!p.a_scale || !p.b_scale || (p.epilogue == OwnEpilogue::kGeluE4m3 && !p.d_scale))
    return "scale pointers must be set";
  if (p.epilogue == OwnEpilogue::kBiasResidualF16 &&
      (!p.residual || reinterpret_cast<uintptr_t>(p.residual) % 16))
    return "the residual must be set and 16-byte aligned";
  return cfg.check(p, cfg.variant);
}

size_t OwnFp8GemmWorkspaceBytes(int c, const OwnFp8GemmProblem& p) {
  const auto& cfg = own_fp8::At(c);
  return cfg.workspace(p, cfg.variant);
}

void OwnFp8GemmRun(int c, const OwnFp8GemmProblem& p, void* workspace, cudaStream_t stream) {
  const auto& cfg = own_fp8::At(c);
  cfg.run(p, cfg.variant, workspace, stream);
}

}  // namespace hotline::engine::cuda
