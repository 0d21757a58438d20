// Gemm: Y = act(X·W + bias) (+ residual) with weights prepared once at construction.
//
// Tactics (stable numbers: plans record them):
//   1 onednn_f32   oneDNN matmul, fp32, weights reordered to the layout the primitive asks for
//   2 onednn_bf16  oneDNN matmul, bf16 activations and weights, fp32 output (needs AVX-512)
//   3 packed_f32   our micro-kernels over 16-column weight panels (AVX-512 / AVX2 / scalar)
//   4 packed_bf16  same with bf16 weight pairs: vdpbf16ps with AVX512-BF16, else widened to fp32
//                  in registers (weights stay bf16 in memory: half the bytes)
//   9 packed_amx_bf16  packed_bf16's panels (K padded to 32) on AMX tiles (tdpbf16ps;
//                  gemm_bf16_amx.cc), offered only where CpuHasAmxBf16()
//
// Thread-safety: Run is const and may be called concurrently from several threads on different
// output buffers. Per-thread state (bf16 activation copies, oneDNN streams and scratchpads) lives
// in thread_local buffers that grow to the largest M seen and are then reused, so the hot path
// does not allocate after the first call of a given size.
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/error.h"
#include "engine/cpu/cpu_isa.h"
#include "engine/cpu/gemm_bf16_internal.h"
#include "engine/cpu/kernels.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace hotline::engine::cpu {
namespace {

enum Tactic : int {
  kAuto = 0,
  kOnednnF32 = 1,
  kOnednnBf16 = 2,
  kPackedF32 = 3,
  kPackedBf16 = 4,
  kPackedAmxBf16 = 9  // 5..8 are GemmS8's (gemm_s8_cpu.cc)
};

// Single-thread multiply-adds per microsecond of packed_amx_bf16 (for ParallelWorth): half of
// packed_amx's INT8 rate (gemm_s8_cpu.cc), as tdpbf16ps does half of tdpbusd's work per tile.
constexpr double kAmxBf16MacsPerUs = 3e5;

template <typename T>
struct AlignedDeleter {
  void operator()(T* p) const { std::free(p); }
};
template <typename T>
using Aligned = std::unique_ptr<T[], AlignedDeleter<T>>;

template <typename T>
Aligned<T> AllocAligned(size_t n) {
  size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
  if (bytes == 0) bytes = 64;
  T* p = static_cast<T*>(std::aligned_alloc(64, bytes));
  if (p == nullptr) throw Error("Gemm: out of memory for packed weights", Code::kResourceExhausted);
  std::memset(p, 0, bytes);
  return Aligned<T>(p);
}

dnnl::engine& DnnlEngine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

// Per-thread growable buffer (bytes), 64-byte aligned.
struct ThreadBuffer {
  Aligned<unsigned char> data;
  size_t size = 0;
  void* Get(size_t bytes) {
    if (bytes > size) {
      data = AllocAligned<unsigned char>(bytes);
      size = bytes;
    }
    return data.get();
  }
};

bool OnednnBf16Usable() {
  static const bool usable = [] {
    if (!CpuHasAvx512()) return false;  // oneDNN 2.6 implements bf16 matmul on avx512_core+
    try {
      using dnnl::memory;
      memory::desc s({4, 16}, memory::data_type::bf16, memory::format_tag::ab);
      memory::desc w({16, 16}, memory::data_type::bf16, memory::format_tag::any);
      memory::desc d({4, 16}, memory::data_type::f32, memory::format_tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(s, w, d), DnnlEngine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return usable;
}

}  // namespace

struct Gemm::Impl {
  int K = 0, N = 0;
  Epilogue epilogue = Epilogue::kNone;
  GemmPrecision precision = GemmPrecision::kFP32;
  int tactic = 0;
  std::vector<float> bias;  // empty when there is none

  // packed tactics
  int panels = 0;
  size_t panel_stride = 0;  // elements per panel
  int kpad = 0;             // packed_amx_bf16: K rounded up to a multiple of 32
  Aligned<float> wf;
  Aligned<uint16_t> wb;

  // oneDNN tactics: [0] without residual, [1] with a sum post-op (dst += result)
  dnnl::matmul prim[2];
  dnnl::memory weights;
  dnnl::memory bias_mem;
  size_t scratch_bytes[2] = {0, 0};

  void PackF32(const float* w);
  void PackBf16(const float* w, int k_multiple);
  void InitOnednn(const float* w);
  void RunPacked(const float* x, int M, float* y, const float* residual) const;
  void RunAmxBf16(const float* x, int M, float* y, const float* residual) const;
  void RunOnednn(const float* x, int M, float* y, const float* residual) const;
};

void Gemm::Impl::PackF32(const float* w) {
  panels = (N + kPanel - 1) / kPanel;
  panel_stride = static_cast<size_t>(K) * kPanel;
  wf = AllocAligned<float>(panel_stride * panels);
  for (int p = 0; p < panels; ++p) {
    for (int k = 0; k < K; ++k) {
      float* dst = wf.get() + p * panel_stride + static_cast<size_t>(k) * kPanel;
      for (int c = 0; c < kPanel && p * kPanel + c < N; ++c) {
        dst[c] = w[static_cast<size_t>(k) * N + p * kPanel + c];
      }
    }
  }
}

// k_multiple: K is zero-padded to a multiple of it (2 for packed_bf16, 32 for AMX tiles).
void Gemm::Impl::PackBf16(const float* w, int k_multiple) {
  panels = (N + kPanel - 1) / kPanel;
  kpad = (K + k_multiple - 1) / k_multiple * k_multiple;
  const int kp = kpad / 2;
  panel_stride = static_cast<size_t>(kp) * 2 * kPanel;
  wb = AllocAligned<uint16_t>(panel_stride * panels);
  const KernelTable& kt = ScalarKernels();  // rounding is the same on every ISA
  for (int p = 0; p < panels; ++p) {
    for (int k = 0; k < K; ++k) {
      for (int c = 0; c < kPanel && p * kPanel + c < N; ++c) {
        uint16_t b;
        kt.to_bf16(&w[static_cast<size_t>(k) * N + p * kPanel + c], 1, &b);
        wb[p * panel_stride + static_cast<size_t>(k / 2) * 2 * kPanel + c * 2 + k % 2] = b;
      }
    }
  }
}

void Gemm::Impl::InitOnednn(const float* w) {
  using dnnl::memory;
  const bool bf16 = tactic == kOnednnBf16;
  const auto sdt = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  memory::desc src_md({DNNL_RUNTIME_DIM_VAL, K}, sdt, memory::format_tag::ab);
  memory::desc wei_md({K, N}, sdt, memory::format_tag::any);
  memory::desc dst_md({DNNL_RUNTIME_DIM_VAL, N}, memory::data_type::f32, memory::format_tag::ab);
  memory::desc bia_md;
  if (!bias.empty()) bia_md = memory::desc({1, N}, memory::data_type::f32, memory::format_tag::ab);
  dnnl::matmul::primitive_desc pds[2];
  for (int with_sum = 0; with_sum < 2; ++with_sum) {
    dnnl::post_ops po;
    if (epilogue == Epilogue::kGelu) {
      po.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_erf, 0.0f, 0.0f);
    } else if (epilogue == Epilogue::kTanh) {
      po.append_eltwise(1.0f, dnnl::algorithm::eltwise_tanh, 0.0f, 0.0f);
    }
    if (with_sum) po.append_sum(1.0f);
    dnnl::primitive_attr attr;
    attr.set_post_ops(po);
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    try {
      pds[with_sum] = dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(src_md, wei_md, bia_md, dst_md), attr, DnnlEngine());
    } catch (const dnnl::error& e) {
      throw Error(std::string("Gemm: oneDNN has no matmul for K=") + std::to_string(K) +
                      " N=" + std::to_string(N) + (bf16 ? " bf16" : " f32") + ": " + e.what(),
                  Code::kUnimplemented);
    }
    prim[with_sum] = dnnl::matmul(pds[with_sum]);
    scratch_bytes[with_sum] = pds[with_sum].scratchpad_desc().get_size();
  }
  if (pds[0].weights_desc() != pds[1].weights_desc()) {
    throw Error("Gemm: oneDNN chose different weight layouts with and without residual",
                Code::kInternal);
  }
  dnnl::stream strm(DnnlEngine());
  memory user_w({{K, N}, memory::data_type::f32, memory::format_tag::ab}, DnnlEngine(),
                const_cast<float*>(w));
  weights = memory(pds[0].weights_desc(), DnnlEngine());
  dnnl::reorder(user_w, weights).execute(strm, user_w, weights);
  if (!bias.empty()) bias_mem = memory(bia_md, DnnlEngine(), bias.data());
  strm.wait();
}

void Gemm::Impl::RunPacked(const float* x, int M, float* y, const float* residual) const {
  const KernelTable& kt = Kernels();
  const bool bf16 = precision == GemmPrecision::kBF16;
  const uint16_t* xb = nullptr;
  const int ldxb = (K + 1) / 2 * 2;
  if (bf16 && kt.bf16_native) {  // round the activations to bf16 once, rows padded to even K
    thread_local ThreadBuffer buf;
    uint16_t* xbw = static_cast<uint16_t*>(buf.Get(sizeof(uint16_t) * ldxb * M));
#pragma omp parallel for schedule(static) if (M >= 64)
    for (int m = 0; m < M; ++m) {
      kt.to_bf16(x + static_cast<size_t>(m) * K, K, xbw + static_cast<size_t>(m) * ldxb);
      if (ldxb != K) xbw[static_cast<size_t>(m) * ldxb + K] = 0;
    }
    xb = xbw;
  }
  const int mr = kt.gemm_mr, pg = kt.gemm_panels;
  const int groups = (panels + pg - 1) / pg;
  const int mblocks = (M + mr - 1) / mr;
  const void* wbase = bf16 ? static_cast<const void*>(wb.get()) : wf.get();
  const size_t elem = bf16 ? sizeof(uint16_t) : sizeof(float);
  auto gemm = bf16 ? kt.gemm_bf16 : kt.gemm_f32;
  // Blocking (GotoBLAS-style): a job is a chunk of column groups x a chunk of row blocks. The
  // chunk's weights (~256 KB) stay in L2 while each row block (mr x K activations) stays in L1
  // and meets every panel of the chunk. Chunks shrink until there are enough jobs to keep every
  // thread busy (batch 1 latency: N is split across threads).
  const size_t group_bytes = panel_stride * elem * pg;
  int gchunk = static_cast<int>(std::max<size_t>(1, (size_t{256} << 10) / group_bytes));
  gchunk = std::min(gchunk, groups);
  constexpr int kRowBlocksPerChunk = 8;
  const int mchunk = std::min(kRowBlocksPerChunk, mblocks);
  const int threads = omp_get_max_threads();
  auto job_count = [&](int gc) {
    return ((groups + gc - 1) / gc) * ((mblocks + mchunk - 1) / mchunk);
  };
  while (gchunk > 1 && job_count(gchunk) < 4 * threads) gchunk = (gchunk + 1) / 2;
  const int gchunks = (groups + gchunk - 1) / gchunk;
  const int mchunks = (mblocks + mchunk - 1) / mchunk;
  const int jobs = gchunks * mchunks;
  // A GEMM of a few tens of microseconds stays on the calling thread where waking the others
  // costs more (ParallelWorth, cpu_isa.h; ~100 GFLOP/s single-thread on AVX-512, ~50 on AVX2).
  const double flops_per_us = kt.isa >= Isa::kAvx512 ? 1e5 : 5e4;
  const bool parallel = jobs > 1 && ParallelWorth(2.0 * M * K * N / flops_per_us);
  // Without AVX512-BF16 the bf16 panels are widened to fp32 once per call (into a per-thread
  // buffer) and the fp32 micro-kernel runs every row block over them.
  const bool widen = bf16 && !kt.bf16_native;
  const size_t widened_stride = static_cast<size_t>(K) * kPanel;
  auto tile = [&](int g, int mb, const void* w, size_t stride, bool f32) {
    const int p0 = g * pg, m0 = mb * mr;
    GemmTile t;
    t.x = x + static_cast<size_t>(m0) * K;
    t.ldx = K;
    t.xb = xb != nullptr ? xb + static_cast<size_t>(m0) * ldxb : nullptr;
    t.ldxb = ldxb;
    t.w = w;
    t.panel_stride = stride;
    t.K = K;
    t.m = M - m0 < mr ? M - m0 : mr;
    t.panels = panels - p0 < pg ? panels - p0 : pg;
    const int n0 = p0 * kPanel;
    t.ncols = N - n0 < t.panels * kPanel ? N - n0 : t.panels * kPanel;
    t.bias = bias.empty() ? nullptr : bias.data() + n0;
    t.epilogue = epilogue;
    t.res = residual != nullptr ? residual + static_cast<size_t>(m0) * N + n0 : nullptr;
    t.ldr = N;
    t.y = y + static_cast<size_t>(m0) * N + n0;
    t.ldy = N;
    (f32 ? kt.gemm_f32 : gemm)(t);
  };
#pragma omp parallel for schedule(static) if (parallel)
  for (int job = 0; job < jobs; ++job) {
    const int gc = job / mchunks, mc = job % mchunks;  // column chunks outermost
    const int g_end = std::min(groups, (gc + 1) * gchunk);
    const int mb_end = std::min(mblocks, (mc + 1) * mchunk);
    if (widen) {
      thread_local ThreadBuffer wbuf;
      float* wf32 = static_cast<float*>(wbuf.Get(sizeof(float) * widened_stride * pg));
      for (int g = gc * gchunk; g < g_end; ++g) {
        const int p0 = g * pg, np = std::min(pg, panels - p0);
        for (int p = 0; p < np; ++p) {
          kt.widen_bf16_panel(wb.get() + (p0 + p) * panel_stride, K, wf32 + p * widened_stride);
        }
        for (int mb = mc * mchunk; mb < mb_end; ++mb) tile(g, mb, wf32, widened_stride, true);
      }
      continue;
    }
    for (int mb = mc * mchunk; mb < mb_end; ++mb) {
      for (int g = gc * gchunk; g < g_end; ++g) {
        tile(g, mb, static_cast<const unsigned char*>(wbase) + g * pg * panel_stride * elem,
             panel_stride, false);
      }
    }
  }
}

void Gemm::Impl::RunAmxBf16(const float* x, int M, float* y, const float* residual) const {
  const KernelTable& kt = Kernels();
  // bf16 activations: rows of kpad values (zero tail), whole 16-row tiles (zero rows).
  const int mrows = (M + 15) / 16 * 16;
  thread_local ThreadBuffer buf;
  uint16_t* xb = static_cast<uint16_t*>(buf.Get(sizeof(uint16_t) * size_t(kpad) * mrows));
  Bf16AmxJob j{};
  j.x = xb;
  j.kpad = kpad;
  j.w = wb.get();
  j.bias = bias.empty() ? nullptr : bias.data();
  j.epilogue = epilogue;
  j.res = residual;
  j.y = y;
  j.N = N;
  // Jobs: chunks of 64 rows x chunks of panels of at most ~256 KB (they stay in L2 while the
  // chunk's row tiles pass over them). A GEMM too small to pay for waking a thread runs inline
  // (ParallelWorth).
  constexpr int kRowChunk = 64;
  const int mchunks = (M + kRowChunk - 1) / kRowChunk;
  const int threads = omp_get_max_threads();
  const double macs = double(M) * K * N;
  int pchunk = std::max(1, std::min(panels, int((size_t{256} << 10) / (panel_stride * 2))));
  if (pchunk > 1) pchunk &= ~1;  // whole 2-panel blocks
  const bool parallel = threads > 1 && ParallelWorth(macs / kAmxBf16MacsPerUs);
  auto round_rows = [&](int m0, int m1) {  // rows m0..m1 of the bf16 copy, padding included
    for (int m = m0; m < m1; ++m) {
      uint16_t* row = xb + size_t(m) * kpad;
      if (m < M) {
        kt.to_bf16(x + size_t(m) * K, K, row);
        if (kpad > K) std::memset(row + K, 0, sizeof(uint16_t) * (kpad - K));
      } else {
        std::memset(row, 0, sizeof(uint16_t) * kpad);
      }
    }
  };
  if (parallel && mchunks >= 2 * threads) {
    // Enough row chunks for every thread: each takes whole row chunks, rounds its own rows and
    // runs them over all panels (in the L2-sized panel chunks), with no barrier in between.
    const int l2_chunks = (panels + pchunk - 1) / pchunk;
#pragma omp parallel for schedule(static)
    for (int mc = 0; mc < mchunks; ++mc) {
      const int m0 = mc * kRowChunk;
      round_rows(m0, std::min(mrows, m0 + kRowChunk));
      for (int pc = 0; pc < l2_chunks; ++pc) {
        Bf16AmxJob t = j;
        t.p0 = pc * pchunk;
        t.p1 = std::min(panels, t.p0 + pchunk);
        t.m0 = m0;
        t.m1 = std::min(M, m0 + kRowChunk);
        GemmBf16JobAmx(t);
      }
    }
    return;
  }
  if (parallel) {
    while (pchunk > 1 && mchunks * ((panels + pchunk - 1) / pchunk) < 4 * threads) {
      pchunk = (pchunk + 1) / 2;
      if (pchunk > 2) pchunk = (pchunk + 1) & ~1;
    }
  }
  const int pchunks = (panels + pchunk - 1) / pchunk;
  const int jobs = mchunks * pchunks;
  // Few row chunks: the threads split the panels, so every thread needs every row: one region
  // rounds the rows, then (after its barrier) runs the jobs.
#pragma omp parallel if (parallel && jobs > 1)
  {
#pragma omp for schedule(static)
    for (int m = 0; m < mrows; ++m) round_rows(m, m + 1);
#pragma omp for schedule(static)
    for (int job = 0; job < jobs; ++job) {
      Bf16AmxJob t = j;
      const int pc = job / mchunks, mc = job % mchunks;  // panel chunks outermost
      t.p0 = pc * pchunk;
      t.p1 = std::min(panels, t.p0 + pchunk);
      t.m0 = mc * kRowChunk;
      t.m1 = std::min(M, t.m0 + kRowChunk);
      GemmBf16JobAmx(t);
    }
  }
}

void Gemm::Impl::RunOnednn(const float* x, int M, float* y, const float* residual) const {
  using dnnl::memory;
  const bool bf16 = tactic == kOnednnBf16;
  const void* src = x;
  if (bf16) {
    thread_local ThreadBuffer buf;
    uint16_t* xb = static_cast<uint16_t*>(buf.Get(sizeof(uint16_t) * K * M));
    Kernels().to_bf16(x, static_cast<int64_t>(M) * K, xb);
    src = xb;
  }
  const int with_sum = residual != nullptr ? 1 : 0;
  if (residual != nullptr && residual != y) {
    std::memcpy(y, residual, sizeof(float) * M * N);
  }
  thread_local std::unique_ptr<dnnl::stream> strm;
  thread_local ThreadBuffer scratch;
  if (!strm) strm = std::make_unique<dnnl::stream>(DnnlEngine());
  auto& eng = DnnlEngine();
  memory src_m({{M, K}, bf16 ? memory::data_type::bf16 : memory::data_type::f32,
                memory::format_tag::ab},
               eng, const_cast<void*>(src));
  memory dst_m({{M, N}, memory::data_type::f32, memory::format_tag::ab}, eng, y);
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, src_m}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst_m}};
  if (!bias.empty()) args.emplace(DNNL_ARG_BIAS, bias_mem);
  if (scratch_bytes[with_sum] > 0) {
    memory::desc sd({static_cast<memory::dim>(scratch_bytes[with_sum])}, memory::data_type::u8,
                    memory::format_tag::a);
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(sd, eng, scratch.Get(scratch_bytes[with_sum])));
  }
  prim[with_sum].execute(*strm, args);
  strm->wait();
}

Gemm::Gemm(const float* weight_kn, int K, int N, const float* bias, Epilogue epilogue,
           GemmPrecision precision, int tactic)
    : impl_(std::make_unique<Impl>()) {
  if (K <= 0 || N <= 0) {
    throw Error("Gemm: K and N must be positive, got K=" + std::to_string(K) +
                " N=" + std::to_string(N));
  }
  if (weight_kn == nullptr) throw Error("Gemm: weights are null");
  const bool bf16 = precision == GemmPrecision::kBF16;
  if (tactic == kAuto) {
    // bf16: AMX tiles where the CPU has them (measured 2-14x onednn_bf16 on Sapphire Rapids,
    // bench/RESULTS.md 2026-12-02), else oneDNN with AVX512-BF16, else our packed kernels.
    if (!bf16) {
      tactic = kOnednnF32;
    } else if (CpuHasAmxBf16()) {
      tactic = kPackedAmxBf16;
    } else {
      tactic = CpuHasBf16() && OnednnBf16Usable() ? kOnednnBf16 : kPackedBf16;
    }
  }
  const std::vector<int> ok = Tactics(precision);
  bool found = false;
  for (int t : ok) found = found || t == tactic;
  if (!found) {
    std::string list;
    for (int t : ok) list += (list.empty() ? "" : ", ") + std::to_string(t);
    throw Error("Gemm: tactic " + std::to_string(tactic) + " (" + TacticName(tactic) +
                    ") is not available for " + (bf16 ? "bf16" : "fp32") + " on this CPU (" +
                    CpuIsaString() + "); available: " + list,
                Code::kFailedPrecondition);
  }
  Impl& d = *impl_;
  d.K = K;
  d.N = N;
  d.epilogue = epilogue;
  d.precision = precision;
  d.tactic = tactic;
  if (bias != nullptr) d.bias.assign(bias, bias + N);
  switch (tactic) {
    case kPackedF32: d.PackF32(weight_kn); break;
    case kPackedBf16: d.PackBf16(weight_kn, 2); break;
    case kPackedAmxBf16: d.PackBf16(weight_kn, 32); break;
    default: d.InitOnednn(weight_kn); break;
  }
}

Gemm::~Gemm() = default;

void Gemm::Run(const float* x, int M, float* y, const float* residual) const {
  if (M < 0) throw Error("Gemm::Run: M must be >= 0, got " + std::to_string(M));
  if (M == 0) return;
  if (x == nullptr || y == nullptr) throw Error("Gemm::Run: null input or output");
  if (impl_->tactic == kPackedF32 || impl_->tactic == kPackedBf16) {
    impl_->RunPacked(x, M, y, residual);
  } else if (impl_->tactic == kPackedAmxBf16) {
    impl_->RunAmxBf16(x, M, y, residual);
  } else {
    impl_->RunOnednn(x, M, y, residual);
  }
}

std::vector<int> Gemm::Tactics(GemmPrecision precision) {
  if (precision == GemmPrecision::kFP32) return {kOnednnF32, kPackedF32};
  std::vector<int> t = {kPackedBf16};
  if (OnednnBf16Usable()) t.push_back(kOnednnBf16);
  if (CpuHasAmxBf16()) t.push_back(kPackedAmxBf16);
  return t;
}

const char* Gemm::TacticName(int tactic) {
  switch (tactic) {
    case kAuto: return "auto";
    case kOnednnF32: return "onednn_f32";
    case kOnednnBf16: return "onednn_bf16";
    case kPackedF32: return "packed_f32";
    case kPackedBf16: return "packed_bf16";
    case 5: return "onednn_s8";  // GemmS8 (gemm_s8_cpu.cc)
    case 6: return "packed_s8";  // GemmS8's AVX2 kernel (gemm_s8_avx2.cc)
    case 7: return "packed_vnni";  // GemmS8's AVX512-VNNI kernel (gemm_s8_vnni.cc)
    case 8: return "packed_amx";   // GemmS8's AMX-INT8 kernel (gemm_s8_amx.cc)
    case kPackedAmxBf16: return "packed_amx_bf16";
    default: break;
  }
  return "unknown";
}

int Gemm::K() const { return impl_->K; }
int Gemm::N() const { return impl_->N; }
int Gemm::tactic() const { return impl_->tactic; }

}  // namespace hotline::engine::cpu
