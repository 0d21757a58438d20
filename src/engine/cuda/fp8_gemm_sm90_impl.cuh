// The kernels behind fp8_gemm_sm90.h: one CUTLASS kernel type per (epilogue, tile, cluster),
// instantiated in fp8_gemm_sm90_{gelu,bias,residual}.cu (one file each so that the 2-core CI
// compiles them in parallel), each run with seven tile orders (raster, swizzle: runtime
// arguments of the persistent tile scheduler).
//
// Orientation: CUTLASS's (M, N, K) is ours, A = x [M, K] row-major, B = w as [K, N] column-major
// (our [N, K] row-major: both K-major, as FP8 WGMMA needs), D row-major, the bias per column.
// (The transposed orientation, features as CUTLASS's M as cuBLASLt runs it, was 1-7% slower
// on the same tile for FFN1 on the H200, PERF_NOTES item 23.) Epilogue: CUTLASS's ScaledLinCombPerColBiasEltAct;
// GELU is its GELU_taylor (the tanh form in FP32, tanh.approx.f32). A tanh on packed halves
// (tanh.approx.f16x2) was no faster and, in GELU's negative tail where 1 + tanh(u) cancels, put
// 0.3% of bytes more than one E4M3 step from the reference (0.03% in FP32).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>
#include <cutlass/epilogue/thread/activation.h>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "base/error.h"
#include "engine/cuda/fp8_gemm_sm90_config.h"

namespace hotline::engine::cuda::own_fp8 {

// Tile-order variants: 0 heuristic raster, swizzle 1; then along M / along N x swizzle 1, 2, 4.
inline constexpr int kVariants = 7;
inline const char* VariantName(int v) {
  static const char* n[kVariants] = {"raster auto", "raster M s1", "raster M s2", "raster M s4",
                                     "raster N s1", "raster N s2", "raster N s4"};
  return n[v];
}

// Epilogue -> CUTLASS types: output (E4M3 for FFN1, else FP16), source (C: FP16 for the
// residual, else void: none read) and activation (GELU for FFN1, else none).
template <OwnEpilogue E>
struct EpilogueTypes {
  static constexpr bool kGelu = E == OwnEpilogue::kGeluE4m3;
  using D = std::conditional_t<kGelu, cutlass::float_e4m3_t, cutlass::half_t>;
  using C = std::conditional_t<E == OwnEpilogue::kBiasResidualF16, cutlass::half_t, void>;
  template <class T>
  using Act = std::conditional_t<kGelu, cutlass::epilogue::thread::GELU_taylor<T>,
                                 cutlass::epilogue::thread::Identity<T>>;
};

// Ping-pong FP8 fast-accumulation kernel with the TMA warp-specialised epilogue.
template <OwnEpilogue E, class TileShape, class ClusterShape>
struct Kernel {
  using ET = EpilogueTypes<E>;
  using ElementA = cutlass::float_e4m3_t;
  using ElementB = cutlass::float_e4m3_t;
  using ElementD = typename ET::D;
  using ElementC = typename ET::C;
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;
  using LayoutD = cutlass::layout::RowMajor;
  static constexpr int kAlignAB = 16;  // 16 bytes of 8-bit elements
  static constexpr int kAlignD = 16 / sizeof(ElementD);
  static constexpr int kAlignC = std::is_void_v<ElementC> ? kAlignD : 16 / 2;
  using FusionOp = cutlass::epilogue::fusion::ScaledLinCombPerColBiasEltAct<
      ET::template Act, ElementD, float, float /*bias*/,
      std::conditional_t<std::is_void_v<ElementC>, ElementD, ElementC>, float>;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, ElementC, LayoutD, kAlignC,
      ElementD, LayoutD, kAlignD, cutlass::epilogue::TmaWarpSpecialized, FusionOp>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA, kAlignAB, ElementB,
      LayoutB, kAlignAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum>::CollectiveOp;
  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>,
                                                          CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

  static typename Gemm::Arguments Args(const OwnFp8GemmProblem& p, int variant) {
    using StrideA = typename GemmKernel::StrideA;
    using StrideB = typename GemmKernel::StrideB;
    using StrideC = typename GemmKernel::StrideC;
    using StrideD = typename GemmKernel::StrideD;
    const int m = p.M, n = p.N, k = p.K;
    using CPtr = std::conditional_t<std::is_void_v<ElementC>, const void*, const ElementC*>;
    typename Gemm::Arguments a{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {m, n, k, 1},
        {static_cast<const ElementA*>(p.x), cutlass::make_cute_packed_stride(StrideA{}, {m, k, 1}),
         static_cast<const ElementB*>(p.w), cutlass::make_cute_packed_stride(StrideB{}, {n, k, 1})},
        {{},
         static_cast<CPtr>(p.residual),
         cutlass::make_cute_packed_stride(StrideC{}, {m, n, 1}),
         static_cast<ElementD*>(p.y),
         cutlass::make_cute_packed_stride(StrideD{}, {m, n, 1})}};
    auto& t = a.epilogue.thread;
    t.alpha = 1.f;
    t.beta = std::is_void_v<ElementC> ? 0.f : 1.f;
    t.scale_a_ptr = p.a_scale;
    t.scale_b_ptr = p.b_scale;
    if (E == OwnEpilogue::kGeluE4m3) t.scale_d_ptr = p.d_scale;
    t.bias_ptr = p.bias;
    a.hw_info.device_id = 0;
    cudaGetDevice(&a.hw_info.device_id);
    a.hw_info.sm_count = SmCount();
    using Raster = cutlass::gemm::kernel::detail::RasterOrderOptions;
    if (variant > 0) {
      a.scheduler.raster_order = variant <= 3 ? Raster::AlongM : Raster::AlongN;
      a.scheduler.max_swizzle_size = 1 << ((variant - 1) % 3);
    }
    return a;
  }

  static std::string Check(const OwnFp8GemmProblem& p, int variant) {
    const cutlass::Status s = Gemm::can_implement(Args(p, variant));
    if (s != cutlass::Status::kSuccess)
      return std::string("CUTLASS refuses the problem: ") + cutlassGetStatusString(s);
    return {};
  }
  static size_t Workspace(const OwnFp8GemmProblem& p, int variant) {
    return Gemm::get_workspace_size(Args(p, variant));
  }
  static void Run(const OwnFp8GemmProblem& p, int variant, void* ws, cudaStream_t stream) {
    Gemm gemm;
    cutlass::Status s = gemm.initialize(Args(p, variant), ws, stream);
    if (s == cutlass::Status::kSuccess) s = gemm.run(stream);
    if (s != cutlass::Status::kSuccess)
      throw Error(std::string("own FP8 GEMM: CUTLASS launch failed: ") +
                  cutlassGetStatusString(s));
  }
};

// Appends `name`'s kernel with every tile-order variant to `out`.
template <class K>
void Register(OwnEpilogue e, const std::string& name, std::vector<Config>* out) {
  for (int v = 0; v < kVariants; ++v)
    out->push_back({std::string(OwnEpilogueName(e)) + " " + name + " " + VariantName(v), e,
                    &K::Check, &K::Workspace, &K::Run, v});
}

// The kernels every epilogue is tried with (the fastest family for FFN1 on the H200, item 23).
template <OwnEpilogue E>
void RegisterAll(std::vector<Config>* out) {
  using namespace cute;
  Register<Kernel<E, Shape<_128, _128, _128>, Shape<_1, _1, _1>>>(E, "pingpong 128x128 c1x1", out);
  Register<Kernel<E, Shape<_128, _128, _128>, Shape<_1, _2, _1>>>(E, "pingpong 128x128 c1x2", out);
  Register<Kernel<E, Shape<_128, _128, _128>, Shape<_2, _1, _1>>>(E, "pingpong 128x128 c2x1", out);
  Register<Kernel<E, Shape<_64, _256, _128>, Shape<_1, _1, _1>>>(E, "pingpong 64x256 c1x1", out);
}

}  // namespace hotline::engine::cuda::own_fp8
