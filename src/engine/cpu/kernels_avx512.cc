// AVX-512 (F, BW, VL, DQ) kernels without BF16 instructions: bf16 weights are widened in
// registers. Compiled alone with AVX-512 flags (see CMakeLists.txt); reached only through the
// dispatch table after cpuid and xgetbv say the CPU and OS support AVX-512.
#include <immintrin.h>

#include <cstdint>

#include "engine/cpu/cpu_isa.h"

namespace hotline::engine::cpu {
namespace {

#include "engine/cpu/ops_avx512.inc"
#include "engine/cpu/kernels_body.inc"

}  // namespace

const KernelTable& Avx512Kernels() {
  static const KernelTable table = MakeTable(Isa::kAvx512, false, nullptr, nullptr);
  return table;
}

}  // namespace hotline::engine::cpu
