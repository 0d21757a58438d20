// Baseline kernels (no vector ISA assumed): the fallback for CPUs without AVX2 + FMA, and the
// reference the vector kernels are tested against on the same machine.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "engine/cpu/cpu_isa.h"

namespace hotline::engine::cpu {
namespace {

struct Ops {
  using V = float;
  static constexpr int L = 1;
  static V load(const float* p) { return *p; }
  static void store(float* p, V v) { *p = v; }
  static V set1(float a) { return a; }
  static V zero() { return 0.0f; }
  static V add(V a, V b) { return a + b; }
  static V sub(V a, V b) { return a - b; }
  static V mul(V a, V b) { return a * b; }
  static V div(V a, V b) { return a / b; }
  static V max(V a, V b) { return a > b ? a : b; }
  static V min(V a, V b) { return a < b ? a : b; }
  static V fma(V a, V b, V c) { return a * b + c; }
  static V round(V a) { return std::nearbyint(a); }
  static V pow2i(V n) {
    const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  static V abs(V a) { return std::fabs(a); }
  static V or_sign(V a, V b) { return std::copysign(a, b); }
  static float hsum(V a) { return a; }
  static void bf16_pairs(const uint16_t* p, V& even, V& odd) {
    const uint32_t e = uint32_t{p[0]} << 16, o = uint32_t{p[1]} << 16;
    std::memcpy(&even, &e, 4);
    std::memcpy(&odd, &o, 4);
  }
};

constexpr int kMr = 4;
constexpr int kPanels = 1;

#include "engine/cpu/kernels_body.inc"

}  // namespace

const KernelTable& ScalarKernels() {
  static const KernelTable table = MakeTable(Isa::kScalar, false, nullptr, nullptr);
  return table;
}

}  // namespace hotline::engine::cpu
