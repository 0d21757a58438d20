// GemmS8: int8 GEMMs through oneDNN's matmul (s8 activations, s8 weights, int32 accumulation)
// with every scale folded into oneDNN's per-column output scales, the bias pre-divided by them
// (oneDNN 2.x computes dst = scale * (acc + bias)), and the epilogue, the residual sum and the
// requantisation to s8 as post-ops. Nothing is computed per call but the GEMM.
//
// Tactic 5 onednn_s8. oneDNN picks its VNNI kernels (vpdpbusd) where the CPU has them.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/error.h"
#include "engine/cpu/kernels.h"
#include "oneapi/dnnl/dnnl.hpp"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace hotline::engine::cpu {
namespace {

constexpr int kOnednnS8 = 5;

dnnl::engine& Eng() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

// Per-thread growable scratch (oneDNN scratchpad), 64-byte aligned.
struct Scratch {
  void* p = nullptr;
  size_t size = 0;
  ~Scratch() { std::free(p); }
  void* Get(size_t bytes) {
    if (bytes > size) {
      std::free(p);
      p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
      if (p == nullptr) throw Error("GemmS8: out of memory for scratch", Code::kResourceExhausted);
      size = bytes;
    }
    return p;
  }
};

}  // namespace

void QuantizeS8(const float* x, int64_t n, float inv_scale, int8_t* y) {
  int64_t i = 0;
#if defined(__x86_64__)
  // SSE2 (baseline x86-64): cvtps2dq rounds half to even under the default MXCSR.
  const __m128 s = _mm_set1_ps(inv_scale), hi = _mm_set1_ps(127.f), lo = _mm_set1_ps(-127.f);
  for (; i + 16 <= n; i += 16) {
    __m128i q[4];
    for (int j = 0; j < 4; ++j) {
      __m128 v = _mm_mul_ps(_mm_loadu_ps(x + i + 4 * j), s);
      v = _mm_min_ps(_mm_max_ps(v, lo), hi);
      q[j] = _mm_cvtps_epi32(v);
    }
    const __m128i a = _mm_packs_epi32(q[0], q[1]), b = _mm_packs_epi32(q[2], q[3]);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm_packs_epi16(a, b));
  }
#endif
  for (; i < n; ++i) {
    const float v = std::min(127.f, std::max(-127.f, x[i] * inv_scale));
    y[i] = static_cast<int8_t>(std::nearbyint(v));
  }
}

int S8WeightQmax() { return CpuHasVnni() ? 127 : 63; }

struct GemmS8::Impl {
  int K = 0, N = 0;
  bool s8_out = false;
  bool has_bias = false;
  dnnl::matmul prim[2];  // [1]: with a sum post-op (residual)
  size_t scratch_bytes[2] = {0, 0};
  dnnl::memory weights;
  std::vector<float> bias;  // divided by the output scales
};

GemmS8::GemmS8(const int8_t* weight_kn, int K, int N, const float* w_scale, float x_scale,
               const float* bias, Epilogue epilogue, float out_scale, int tactic)
    : impl_(std::make_unique<Impl>()) {
  using dnnl::memory;
  if (K <= 0 || N <= 0) {
    throw Error("GemmS8: K and N must be positive, got K=" + std::to_string(K) +
                " N=" + std::to_string(N));
  }
  if (weight_kn == nullptr || w_scale == nullptr) throw Error("GemmS8: weights or scales are null");
  if (!(x_scale > 0.f) || !std::isfinite(x_scale) || out_scale < 0.f || !std::isfinite(out_scale)) {
    throw Error("GemmS8: x_scale must be a positive finite number and out_scale >= 0, got " +
                std::to_string(x_scale) + ", " + std::to_string(out_scale));
  }
  if (tactic != 0 && tactic != kOnednnS8) {
    throw Error("GemmS8: tactic " + std::to_string(tactic) + " (" + Gemm::TacticName(tactic) +
                    ") is not an int8 tactic; available: 5 (onednn_s8)",
                Code::kFailedPrecondition);
  }
  const int qmax = S8WeightQmax();
  for (size_t e = 0; e < size_t(K) * N; ++e) {
    if (std::abs(int(weight_kn[e])) > qmax) {
      throw Error("GemmS8: weight code " + std::to_string(int(weight_kn[e])) +
                      " exceeds this CPU's int8 weight range +-" + std::to_string(qmax) +
                      " (the plan was quantised for another CPU: rebuild it here)",
                  Code::kFailedPrecondition);
    }
  }
  Impl& d = *impl_;
  d.K = K;
  d.N = N;
  d.s8_out = out_scale > 0.f;
  std::vector<float> scales(N);
  for (int n = 0; n < N; ++n) {
    // A zero column (scale 0) has zero codes: any positive scale gives the same zero product.
    const float ws = w_scale[n] > 0.f && std::isfinite(w_scale[n]) ? w_scale[n] : 1.f;
    scales[n] = x_scale * ws;
  }
  d.has_bias = bias != nullptr;
  if (d.has_bias) {
    d.bias.resize(N);
    for (int n = 0; n < N; ++n) d.bias[n] = bias[n] / scales[n];
  }
  memory::desc src_md({DNNL_RUNTIME_DIM_VAL, K}, memory::data_type::s8, memory::format_tag::ab);
  memory::desc wei_md({K, N}, memory::data_type::s8, memory::format_tag::any);
  memory::desc dst_md({DNNL_RUNTIME_DIM_VAL, N},
                      d.s8_out ? memory::data_type::s8 : memory::data_type::f32,
                      memory::format_tag::ab);
  memory::desc bia_md;
  if (d.has_bias) bia_md = memory::desc({1, N}, memory::data_type::f32, memory::format_tag::ab);
  dnnl::matmul::primitive_desc pds[2];
  for (int with_sum = 0; with_sum < (d.s8_out ? 1 : 2); ++with_sum) {
    dnnl::post_ops po;
    if (epilogue == Epilogue::kGelu) {
      po.append_eltwise(1.f, dnnl::algorithm::eltwise_gelu_erf, 0.f, 0.f);
    } else if (epilogue == Epilogue::kTanh) {
      po.append_eltwise(1.f, dnnl::algorithm::eltwise_tanh, 0.f, 0.f);
    }
    if (with_sum) po.append_sum(1.f);
    if (d.s8_out) {
      po.append_eltwise(1.f, dnnl::algorithm::eltwise_linear, 1.f / out_scale, 0.f);
      po.append_eltwise(1.f, dnnl::algorithm::eltwise_clip, -127.f, 127.f);
    }
    dnnl::primitive_attr attr;
    attr.set_output_scales(1 << 1, scales);
    attr.set_post_ops(po);
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    try {
      pds[with_sum] = dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(src_md, wei_md, bia_md, dst_md), attr, Eng());
    } catch (const dnnl::error& e) {
      throw Error("GemmS8: oneDNN has no int8 matmul for K=" + std::to_string(K) +
                      " N=" + std::to_string(N) + ": " + e.what(),
                  Code::kUnimplemented);
    }
    d.prim[with_sum] = dnnl::matmul(pds[with_sum]);
    d.scratch_bytes[with_sum] = pds[with_sum].scratchpad_desc().get_size();
  }
  if (!d.s8_out && pds[0].weights_desc() != pds[1].weights_desc()) {
    throw Error("GemmS8: oneDNN chose different weight layouts with and without residual",
                Code::kInternal);
  }
  dnnl::stream strm(Eng());
  memory user_w({{K, N}, memory::data_type::s8, memory::format_tag::ab}, Eng(),
                const_cast<int8_t*>(weight_kn));
  d.weights = memory(pds[0].weights_desc(), Eng());
  dnnl::reorder(user_w, d.weights).execute(strm, user_w, d.weights);
  strm.wait();
}

GemmS8::~GemmS8() = default;

void GemmS8::Run(const int8_t* x, int M, void* y, const float* residual) const {
  using dnnl::memory;
  const Impl& d = *impl_;
  if (M < 0) throw Error("GemmS8::Run: M must be >= 0, got " + std::to_string(M));
  if (M == 0) return;
  if (x == nullptr || y == nullptr) throw Error("GemmS8::Run: null input or output");
  if (residual != nullptr && d.s8_out) {
    throw Error("GemmS8::Run: a residual needs fp32 output (this GEMM writes s8)");
  }
  const int with_sum = residual != nullptr ? 1 : 0;
  if (residual != nullptr && residual != y) {
    std::memcpy(y, residual, sizeof(float) * size_t(M) * d.N);
  }
  thread_local std::unique_ptr<dnnl::stream> strm;
  thread_local Scratch scratch;
  if (!strm) strm = std::make_unique<dnnl::stream>(Eng());
  auto& eng = Eng();
  memory src_m({{M, d.K}, memory::data_type::s8, memory::format_tag::ab}, eng,
               const_cast<int8_t*>(x));
  memory dst_m({{M, d.N}, d.s8_out ? memory::data_type::s8 : memory::data_type::f32,
                memory::format_tag::ab},
               eng, y);
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, src_m}, {DNNL_ARG_WEIGHTS, d.weights}, {DNNL_ARG_DST, dst_m}};
  if (d.has_bias) {
    args.emplace(DNNL_ARG_BIAS,
                 memory({{1, d.N}, memory::data_type::f32, memory::format_tag::ab}, eng,
                        const_cast<float*>(d.bias.data())));
  }
  if (d.scratch_bytes[with_sum] > 0) {
    memory::desc sd({static_cast<memory::dim>(d.scratch_bytes[with_sum])}, memory::data_type::u8,
                    memory::format_tag::a);
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(sd, eng, scratch.Get(d.scratch_bytes[with_sum])));
  }
  d.prim[with_sum].execute(*strm, args);
  strm->wait();
}

std::vector<int> GemmS8::Tactics() { return {kOnednnS8}; }
int GemmS8::K() const { return impl_->K; }
int GemmS8::N() const { return impl_->N; }
int GemmS8::tactic() const { return kOnednnS8; }
bool GemmS8::s8_output() const { return impl_->s8_out; }

}  // namespace hotline::engine::cpu
