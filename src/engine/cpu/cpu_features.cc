// CPU feature detection (cpuid + xgetbv) and the ISA dispatch table.
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <strings.h>
#include <string>

#include "base/error.h"
#include "engine/cpu/cpu_isa.h"
#include "engine/cpu/kernels.h"

namespace hotline::engine::cpu {
namespace {

struct Features {
  bool avx2 = false, fma = false, avx512f = false, avx512bw = false, avx512vl = false,
       avx512dq = false, avx512_bf16 = false, avx512_vnni = false, amx_int8 = false,
       amx_bf16 = false;
};

uint64_t Xgetbv0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}

Features Probe() {
  Features f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1;
  const bool fma = (c >> 12) & 1;
  if (!osxsave) return f;  // the OS does not save AVX state: no AVX at all
  const uint64_t xcr0 = Xgetbv0();
  const bool os_ymm = (xcr0 & 0x6) == 0x6;     // XMM and YMM state
  const bool os_zmm = (xcr0 & 0xe6) == 0xe6;   // plus opmask, ZMM_Hi256, Hi16_ZMM
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  f.avx2 = os_ymm && ((b >> 5) & 1);
  f.fma = os_ymm && fma;
  f.avx512f = os_zmm && ((b >> 16) & 1);
  f.avx512dq = os_zmm && ((b >> 17) & 1);
  f.avx512bw = os_zmm && ((b >> 30) & 1);
  f.avx512vl = os_zmm && ((b >> 31) & 1);
  f.avx512_vnni = os_zmm && ((c >> 11) & 1);
  // AMX: AMX-TILE (edx 24) and AMX-INT8 (edx 25), with the OS managing XTILECFG and XTILEDATA
  // (XCR0 bits 17, 18).
  f.amx_int8 = os_zmm && ((d >> 24) & 1) && ((d >> 25) & 1) && ((xcr0 >> 17) & 3) == 3;
  // AMX-BF16: edx bit 22, with AMX-TILE and the same OS-managed tile state.
  f.amx_bf16 = os_zmm && ((d >> 24) & 1) && ((d >> 22) & 1) && ((xcr0 >> 17) & 3) == 3;
  __cpuid_count(7, 1, a, b, c, d);
  f.avx512_bf16 = os_zmm && ((a >> 5) & 1);
  return f;
}

const Features& Cpu() {
  static const Features f = Probe();
  return f;
}

Isa HardwareIsa() {
  const Features& f = Cpu();
  const bool avx512 = f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.fma;
  if (avx512 && f.avx512_bf16) return Isa::kAvx512Bf16;
  if (avx512) return Isa::kAvx512;
  if (f.avx2 && f.fma) return Isa::kAvx2;
  return Isa::kScalar;
}

const KernelTable& TableFor(Isa isa) {
  switch (isa) {
    case Isa::kAvx512Bf16: return Avx512Bf16Kernels();
    case Isa::kAvx512: return Avx512Kernels();
    case Isa::kAvx2: return Avx2Kernels();
    case Isa::kScalar: break;
  }
  return ScalarKernels();
}

std::atomic<const KernelTable*> g_table{nullptr};

}  // namespace

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAvx512Bf16: return "avx512_bf16";
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    case Isa::kScalar: break;
  }
  return "scalar";
}

bool IsaSupported(Isa isa) { return static_cast<int>(isa) <= static_cast<int>(HardwareIsa()); }

Isa DetectedIsa() {
  Isa isa = HardwareIsa();
  if (const char* env = std::getenv("HOTLINE_CPU_ISA"); env != nullptr && *env != '\0') {
    for (Isa cand : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
      if (std::strcmp(env, IsaName(cand)) == 0 && IsaSupported(cand)) isa = cand;
    }
  }
  return isa;
}

const KernelTable& Kernels() {
  const KernelTable* t = g_table.load(std::memory_order_acquire);
  if (t == nullptr) {
    t = &TableFor(DetectedIsa());
    g_table.store(t, std::memory_order_release);
  }
  return *t;
}

void SetIsaForTesting(Isa isa) {
  if (!IsaSupported(isa)) {
    throw Error(std::string("SetIsaForTesting: this CPU does not support ") + IsaName(isa) +
                    " (best: " + IsaName(HardwareIsa()) + ")",
                Code::kFailedPrecondition);
  }
  g_table.store(&TableFor(isa), std::memory_order_release);
}

bool CpuHasBf16() { return Cpu().avx512_bf16 && HardwareIsa() == Isa::kAvx512Bf16; }
bool CpuHasAvx512() {
  return static_cast<int>(HardwareIsa()) >= static_cast<int>(Isa::kAvx512);
}
bool CpuHasVnni() { return Cpu().avx512_vnni && CpuHasAvx512(); }

bool OmpWakeIsSlow() {
  static const bool slow = [] {
    const char* policy = std::getenv("OMP_WAIT_POLICY");
    const char* spin = std::getenv("GOMP_SPINCOUNT");
    const bool passive = policy != nullptr && strcasecmp(policy, "passive") == 0;
    const bool spins = spin != nullptr && *spin != '\0' && std::strcmp(spin, "0") != 0;
    return passive && !spins;
  }();
  return slow;
}

namespace {
// Linux hands out the 8 KB tile state only to processes that ask (ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA); without the grant the first tile instruction kills the process. Asked
// once per process; a refusal (old kernel, seccomp) means no AMX, never a crash.
bool AmxPermitted() {
  static const bool ok = [] {
#if defined(__linux__) && defined(SYS_arch_prctl)
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return ok;
}
}  // namespace

bool CpuHasAmxInt8() {
  static const bool ok = Cpu().amx_int8 && CpuHasVnni() && AmxPermitted();
  return ok;
}

bool CpuHasAmxBf16() {
  // The AMX-BF16 GEMM's epilogue and activation rounding use AVX-512 (+BF16).
  static const bool ok = Cpu().amx_bf16 && CpuHasBf16() && AmxPermitted();
  return ok;
}

std::string CpuIsaString() {
  // oneDNN-style names; a plan records this and the loader compares it.
  switch (HardwareIsa()) {
    case Isa::kAvx512Bf16: return CpuHasVnni() ? "avx512_core_bf16" : "avx512_core_bf16_novnni";
    case Isa::kAvx512: return CpuHasVnni() ? "avx512_core_vnni" : "avx512_core";
    case Isa::kAvx2: return "avx2";
    case Isa::kScalar: break;
  }
  return "sse41";
}

}  // namespace hotline::engine::cpu
