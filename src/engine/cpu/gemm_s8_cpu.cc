// GemmS8: int8 GEMMs through oneDNN's matmul (s8 activations, s8 weights, int32 accumulation)
// with every scale folded into oneDNN's per-column output scales, the bias pre-divided by them
// (oneDNN 2.x computes dst = scale * (acc + bias)), and the epilogue, the residual sum and the
// requantisation to s8 as post-ops. Nothing is computed per call but the GEMM.
//
// Tactic 5 onednn_s8. oneDNN picks its VNNI kernels (vpdpbusd) where the CPU has them.
// Tactic 6 packed_s8: our AVX2 u8·s8 micro-kernel over 16-column weight panels
// (gemm_s8_internal.h), offered on AVX2 CPUs without VNNI (7-bit weights). On such CPUs oneDNN's
// s8 matmul costs tens of microseconds per call at the small M of one request (reorders of the
// activations, a runtime-M dispatch); ours has no per-call setup but one u8 copy of the input.
// Tactic 7 packed_vnni: the same panels and u8 copy with an AVX512-VNNI micro-kernel (vpdpbusd,
// 8-bit weights; gemm_s8_vnni.cc), offered beside onednn_s8 on CPUs with AVX512-VNNI.
// Tactic 8 packed_amx: the same panels (K padded to 64) on AMX tiles (tdpbusd; gemm_s8_amx.cc),
// offered where AMX-INT8 is usable. oneDNN 2.6's s8 matmul with a runtime M (ours) runs its
// VNNI gemm:jit, not its AMX brgemm (ONEDNN_VERBOSE=1), so AMX is ours to use.
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
#include "engine/cpu/cpu_isa.h"
#include "engine/cpu/gemm_s8_internal.h"
#include "engine/cpu/kernels.h"
#include "oneapi/dnnl/dnnl.hpp"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace hotline::engine::cpu {
namespace {

constexpr int kOnednnS8 = 5;
constexpr int kPackedS8 = 6;
constexpr int kPackedVnni = 7;
constexpr int kPackedAmx = 8;

// packed_s8 needs AVX2 and weights of at most 7 bits (its int16 pair sums; S8WeightQmax).
bool PackedS8Usable() { return IsaSupported(Isa::kAvx2) && S8WeightQmax() <= 63; }
// Single-thread rates of packed_vnni and packed_amx at the small model's shapes (multiply-adds
// per microsecond, bench/s8_gemm_bench.cc on a Sapphire Rapids): a GEMM's expected time decides
// whether it is worth a parallel region (ParallelWorth, cpu_isa.h).
constexpr double kVnniMacsPerUs = 2.5e5;
constexpr double kAmxMacsPerUs = 6e5;

// packed_vnni needs AVX512-VNNI (and AVX2 for the u8 copy, which every such CPU has).
bool PackedVnniUsable() { return CpuHasVnni() && IsaSupported(Isa::kAvx2); }
// packed_amx also needs AMX-INT8 and the OS's permission to use it (CpuHasAmxInt8).
bool PackedAmxUsable() { return PackedVnniUsable() && CpuHasAmxInt8(); }

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
  int tactic = kOnednnS8;
  bool s8_out = false;
  bool has_bias = false;
  // onednn_s8
  dnnl::matmul prim[2];  // [1]: with a sum post-op (residual)
  size_t scratch_bytes[2] = {0, 0};
  dnnl::memory weights;
  std::vector<float> bias;  // onednn_s8: divided by the output scales; packed_s8: as given
  // packed_s8 (gemm_s8_internal.h); per-column vectors padded to panels * kS8Panel
  int panels = 0, k4 = 0;
  Epilogue epilogue = Epilogue::kNone;
  float out_inv = 0.f;
  std::unique_ptr<int8_t[], decltype(&std::free)> packed{nullptr, &std::free};
  std::vector<int32_t> comp;
  std::vector<float> scale;

  void InitPacked(const int8_t* w, const std::vector<float>& scales, const float* bias_in);
  void RunPacked(const int8_t* x, int M, void* y, const float* residual) const;
  bool packed_kernel() const {
    return tactic == kPackedS8 || tactic == kPackedVnni || tactic == kPackedAmx;
  }
};

void GemmS8::Impl::InitPacked(const int8_t* w, const std::vector<float>& scales,
                              const float* bias_in) {
  panels = (N + kS8Panel - 1) / kS8Panel;
  k4 = (K + 3) / 4;
  if (tactic == kPackedAmx) k4 = (k4 + 15) / 16 * 16;  // whole 16-quad weight tiles
  const size_t bytes = size_t(panels) * size_t(k4) * 64;
  packed.reset(static_cast<int8_t*>(std::aligned_alloc(64, bytes)));
  if (!packed) throw Error("GemmS8: out of memory for packed weights", Code::kResourceExhausted);
  std::memset(packed.get(), 0, bytes);
  const int np = panels * kS8Panel;
  comp.assign(size_t(np), 0);
  scale.assign(size_t(np), 0.f);
  if (bias_in != nullptr) bias.assign(size_t(np), 0.f);
  for (int n = 0; n < N; ++n) {
    const int p = n / kS8Panel, c = n % kS8Panel;
    int32_t sum = 0;
    for (int k = 0; k < K; ++k) {
      const int8_t v = w[size_t(k) * N + n];
      sum += v;
      packed[(size_t(p) * k4 + k / 4) * 64 + (c / 8) * 32 + (c % 8) * 4 + k % 4] = v;
    }
    comp[n] = 128 * sum;
    scale[n] = scales[n];
    if (bias_in != nullptr) bias[n] = bias_in[n];
  }
}

void GemmS8::Impl::RunPacked(const int8_t* x, int M, void* y, const float* residual) const {
  // The u8 copy (x + 128, rows padded to whole k-quads) of the calling thread, reused. AMX
  // reads whole 16-row tiles: its copy has zero rows up to a multiple of 16 (computed, dropped).
  thread_local Scratch xbuf;
  const int ldx = 4 * k4;
  const bool amx = tactic == kPackedAmx;
  const int mrows = amx ? (M + 15) / 16 * 16 : M;
  uint8_t* xu = static_cast<uint8_t*>(xbuf.Get(size_t(mrows) * size_t(ldx)));
  if (mrows > M) std::memset(xu + size_t(M) * ldx, 0, size_t(mrows - M) * size_t(ldx));
  if (ldx == K) {
    S8ToU8Avx2(x, int64_t(M) * K, xu);
  } else {
    for (int m = 0; m < M; ++m) {
      S8ToU8Avx2(x + size_t(m) * K, K, xu + size_t(m) * ldx);
      std::memset(xu + size_t(m) * ldx + K, 0, size_t(ldx - K));
    }
  }
  S8Job j{};
  j.xu = xu;
  j.ldx = ldx;
  j.k4 = k4;
  j.w = packed.get();
  j.comp = comp.data();
  j.scale = scale.data();
  j.bias = has_bias ? bias.data() : nullptr;
  j.epilogue = epilogue;
  j.res = residual;
  j.y = y;
  j.out_inv = out_inv;
  j.N = N;
  // Jobs: chunks of up to 64 rows x chunks of panels of at most ~256 KB (they stay in L2 while
  // the chunk's row tiles pass over them, gemm_s8_avx2.cc). Panel chunks shrink until every
  // thread has a few jobs; a GEMM too small to pay for waking threads runs inline (AVX-512
  // kernels: by expected time against the cost of a wake, ParallelWorth).
  constexpr int kRowChunk = 64;
  const bool vnni = tactic == kPackedVnni || amx;
  void (*const kernel)(const S8Job&) =
      amx ? GemmS8JobAmx : tactic == kPackedVnni ? GemmS8JobVnni : GemmS8JobAvx2;
  const int mchunks = (M + kRowChunk - 1) / kRowChunk;
  const int threads = omp_get_max_threads();
  const double macs = double(M) * K * N;
  int pchunk = std::max(1, std::min(panels, int((size_t{256} << 10) / (size_t(k4) * 64))));
  if (vnni && pchunk > 1) pchunk &= ~1;  // whole 2-panel micro-tiles
  const bool parallel =
      threads > 1 && (vnni ? ParallelWorth(macs / (amx ? kAmxMacsPerUs : kVnniMacsPerUs))
                           : macs >= 2e5);
  if (parallel) {
    while (pchunk > 1 && mchunks * ((panels + pchunk - 1) / pchunk) < 4 * threads) {
      pchunk = (pchunk + 1) / 2;
      if (vnni && pchunk > 2) pchunk = (pchunk + 1) & ~1;
    }
  }
  const int pchunks = (panels + pchunk - 1) / pchunk;
  const int jobs = mchunks * pchunks;
#pragma omp parallel for schedule(static) if (jobs > 1 && (parallel || !vnni))
  for (int job = 0; job < jobs; ++job) {
    S8Job t = j;
    const int pc = job / mchunks, mc = job % mchunks;
    t.p0 = pc * pchunk;
    t.p1 = std::min(panels, t.p0 + pchunk);
    t.m0 = mc * kRowChunk;
    t.m1 = std::min(M, t.m0 + kRowChunk);
    kernel(t);
  }
}

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
  if (tactic == 0) {
    tactic = PackedAmxUsable()    ? kPackedAmx
             : PackedVnniUsable() ? kPackedVnni
             : PackedS8Usable()   ? kPackedS8
                                  : kOnednnS8;
  }
  const std::vector<int> ok = Tactics();
  if (std::find(ok.begin(), ok.end(), tactic) == ok.end()) {
    std::string list;
    for (int t : ok) list += (list.empty() ? "" : ", ") + std::to_string(t) + " (" +
                             Gemm::TacticName(t) + ")";
    throw Error("GemmS8: tactic " + std::to_string(tactic) + " (" + Gemm::TacticName(tactic) +
                    ") is not an int8 tactic of this CPU (" + CpuIsaString() + "); available: " +
                    list,
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
  d.tactic = tactic;
  if (d.packed_kernel()) {
    d.epilogue = epilogue;
    d.out_inv = d.s8_out ? 1.f / out_scale : 0.f;
    d.InitPacked(weight_kn, scales, bias);
    return;
  }
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
  if (d.packed_kernel()) {
    d.RunPacked(x, M, y, residual);
    return;
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

std::vector<int> GemmS8::Tactics() {
  if (PackedAmxUsable()) return {kOnednnS8, kPackedVnni, kPackedAmx};
  if (PackedVnniUsable()) return {kOnednnS8, kPackedVnni};
  if (PackedS8Usable()) return {kOnednnS8, kPackedS8};
  return {kOnednnS8};
}
int GemmS8::K() const { return impl_->K; }
int GemmS8::N() const { return impl_->N; }
int GemmS8::tactic() const { return impl_->tactic; }
bool GemmS8::s8_output() const { return impl_->s8_out; }

}  // namespace hotline::engine::cpu
