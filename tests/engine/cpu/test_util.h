// Helpers shared by the CPU kernel tests: random data, a normalised-error comparison that names
// the worst index, and the list of ISAs this machine can run.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/cpu/cpu_isa.h"

namespace hotline::engine::cpu::testing {

inline std::vector<float> RandomVec(size_t n, std::mt19937& rng, float lo = -1.0f,
                                    float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// max_i |got_i - ref_i| / max(rms(ref), floor). Succeeds when <= tol; the failure names the
// worst index, both values and the difference.
inline ::testing::AssertionResult NearNormalised(const std::vector<float>& got,
                                                 const std::vector<double>& ref, double tol,
                                                 const std::string& what,
                                                 double floor = 1e-3) {
  if (got.size() != ref.size()) {
    return ::testing::AssertionFailure()
           << what << ": size " << got.size() << " != reference " << ref.size();
  }
  double ss = 0;
  for (double r : ref) ss += r * r;
  const double rms = std::max(std::sqrt(ss / std::max<size_t>(ref.size(), 1)), floor);
  double worst = -1;
  size_t wi = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (!(d <= worst) || std::isnan(got[i])) {  // NaN compares false: always the worst
      if (std::isnan(got[i])) {
        return ::testing::AssertionFailure()
               << what << ": NaN at index " << i << " (reference " << ref[i] << ")";
      }
      worst = d;
      wi = i;
    }
  }
  const double err = worst / rms;
  if (err <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": normalised error " << err << " > " << tol << " at index " << wi
         << ": got " << got[wi] << ", reference " << ref[wi] << ", difference "
         << got[wi] - ref[wi] << " (reference rms " << rms << ")";
}

inline std::vector<Isa> SupportedIsas() {
  std::vector<Isa> out;
  for (Isa i : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    if (IsaSupported(i)) out.push_back(i);
  }
  return out;
}

// Selects an ISA for the duration of a scope and restores the detected one afterwards.
class ScopedIsa {
 public:
  explicit ScopedIsa(Isa isa) { SetIsaForTesting(isa); }
  ~ScopedIsa() { SetIsaForTesting(DetectedIsa()); }
};

inline std::string IsaParamName(const ::testing::TestParamInfo<Isa>& info) {
  return IsaName(info.param);
}

inline double GeluRef(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

}  // namespace hotline::engine::cpu::testing
