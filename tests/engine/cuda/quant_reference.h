// CPU reference of a quantised encoder (tests of encoder_quant.h): the FP32 reference encoder
// (reference.h) with the 8-bit rounding of the four GEMM inputs of every layer (per-tensor
// scales) and of their weights (per output channel, symmetric) simulated exactly as the device
// rounds them (INT8: nearest-even, clamp to +-127; FP8: E4M3 saturating, via cuda_fp8.h's host
// conversions). Everything else stays FP32/double. Also records max |x| of each GEMM input (the
// calibration the device must reproduce).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/quant_gemm.h"
#include "tests/engine/cuda/reference.h"

namespace hotline::engine::cuda::ref {

// The 8-bit code of u (= x / scale) as the engine's quantisers write it: INT8 nearest-even
// clamped to +-127, E4M3 nearest-even saturating.
inline uint8_t Code8(float u, QuantType q) {
  if (q == QuantType::kInt8) {
    return uint8_t(int8_t(std::max(-127.f, std::min(127.f, std::nearbyint(u)))));
  }
  return uint8_t(__nv_cvt_float_to_fp8(u, __NV_SATFINITE, __NV_E4M3));
}

inline float QDQ(float v, float scale, QuantType q) {  // quantise then dequantise
  const uint8_t c = Code8(v / scale, q);
  if (q == QuantType::kInt8) return float(int8_t(c)) * scale;
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(c), __NV_E4M3))) * scale;
}

// How many of the device's n 8-bit codes (at `codes`) differ from quantising the host's stored
// values y (the first n) with `scale` (Code8 of y / scale, the same IEEE division).
inline int CodesUnlikeQuantising(const void* codes, const std::vector<float>& y, float scale,
                                 QuantType q) {
  std::vector<uint8_t> got(y.size());
  CUDA_CHECK(cudaMemcpy(got.data(), codes, got.size(), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += got[i] != Code8(y[i] / scale, q);
  return bad;
}

// W [K, N] -> per-output-channel symmetric 8-bit, dequantised.
inline std::vector<float> QDQWeights(const std::vector<float>& w, int K, int N, QuantType q) {
  std::vector<float> out(w.size());
  for (int n = 0; n < N; ++n) {
    float m = 0.f;
    for (int k = 0; k < K; ++k) m = std::max(m, std::fabs(w[size_t(k) * N + n]));
    const float s = m > 0.f ? m / QuantMax(q) : 1.f;
    for (int k = 0; k < K; ++k) out[size_t(k) * N + n] = QDQ(w[size_t(k) * N + n], s, q);
  }
  return out;
}

// W [K, N] -> one symmetric 8-bit scale for the whole matrix (max |W| / qmax), dequantised.
inline std::vector<float> QDQWeightsPerTensor(const std::vector<float>& w, QuantType q) {
  float m = 0.f;
  for (float v : w) m = std::max(m, std::fabs(v));
  const float s = m > 0.f ? m / QuantMax(q) : 1.f;
  std::vector<float> out(w.size());
  for (size_t i = 0; i < w.size(); ++i) out[i] = QDQ(w[i], s, q);
  return out;
}

// The word table of a quantised encoder: INT8 symmetric per row (scale = max |row| / 127,
// nearest-even; an all-zero row keeps scale 1): the codes and the row scales.
struct Int8WordTable {
  std::vector<int8_t> codes;
  std::vector<float> scales;
};
inline Int8WordTable QuantiseWordRows(const std::vector<float>& word, int hidden) {
  Int8WordTable t;
  t.codes.resize(word.size());
  t.scales.resize(word.size() / hidden);
  for (size_t r = 0; r < t.scales.size(); ++r) {
    float m = 0.f;
    for (int i = 0; i < hidden; ++i) m = std::max(m, std::fabs(word[r * hidden + i]));
    const float s = t.scales[r] = m > 0.f ? m / 127.f : 1.f;
    for (int i = 0; i < hidden; ++i) {
      t.codes[r * hidden + i] =
          int8_t(std::max(-127.f, std::min(127.f, std::nearbyint(word[r * hidden + i] / s))));
    }
  }
  return t;
}
// ... dequantised as the device does (scale * q, FP32).
inline std::vector<float> QDQWordRows(const std::vector<float>& word, int hidden) {
  const Int8WordTable t = QuantiseWordRows(word, hidden);
  std::vector<float> out(word.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = t.scales[i / hidden] * float(t.codes[i]);
  return out;
}

// scales: [layers][4] (qkv_in, out_in, ff1_in, ff2_in) or empty (no quantisation: the FP32
// reference). Quantised, the word table is the INT8 one (QDQWordRows) as on the device.
// amax (optional): receives max |x| of each GEMM input over all tokens.
inline EncoderResult QuantEncoder(const EncoderConfig& c, const EncoderWeights& w,
                                  const std::vector<float>& scales, QuantType q, bool gelu_tanh,
                                  const std::vector<int32_t>& ids,
                                  const std::vector<int32_t>& types,
                                  const std::vector<int32_t>& cu, std::vector<float>* amax,
                                  bool per_tensor_weights = false) {
  const int B = int(cu.size()) - 1, T = cu.back(), H = c.hidden, I = c.intermediate;
  const int D = c.head_dim();
  const bool quant = !scales.empty();
  std::vector<float> x(size_t(T) * H), qkv(size_t(T) * 3 * H), ctx(size_t(T) * H),
      tmp(size_t(T) * H), ff(size_t(T) * I), in;
  if (amax) amax->assign(size_t(c.layers) * 4, 0.f);
  // The GEMM input `v` as the GEMM sees it: recorded, then rounded when quantising.
  auto gemm_input = [&](const std::vector<float>& v, int l, int slot) -> const float* {
    if (amax) {
      float& m = (*amax)[size_t(l) * 4 + slot];
      for (float f : v) m = std::max(m, std::fabs(f));
    }
    if (!quant) return v.data();
    in.resize(v.size());
    const float s = scales[size_t(l) * 4 + slot];
    for (size_t i = 0; i < v.size(); ++i) in[i] = QDQ(v[i], s, q);
    return in.data();
  };
  auto weights = [&](const std::vector<float>& wt, int K, int N) {
    if (!quant) return wt;
    return per_tensor_weights ? QDQWeightsPerTensor(wt, q) : QDQWeights(wt, K, N, q);
  };
  const std::vector<float> word_q = quant ? QDQWordRows(w.word, H) : std::vector<float>();
  Embed(ids.data(), types.empty() ? nullptr : types.data(), cu.data(), B,
        quant ? word_q.data() : w.word.data(), w.pos.data(), w.type.data(), w.emb_gamma.data(),
        w.emb_beta.data(), c.eps, H, x.data());
  for (int l = 0; l < c.layers; ++l) {
    const auto& L = w.layers[l];
    Linear(gemm_input(x, l, 0), T, H, weights(L.qkv_w, H, 3 * H).data(), 3 * H, L.qkv_b.data(),
           qkv.data());
    Attention(qkv.data(), cu.data(), B, c.heads, D, float(1.0 / std::sqrt(double(D))), ctx.data());
    Linear(gemm_input(ctx, l, 1), T, H, weights(L.out_w, H, H).data(), H, L.out_b.data(),
           tmp.data());
    LayerNorm(tmp.data(), nullptr, x.data(), L.ln1_gamma.data(), L.ln1_beta.data(), c.eps, T, H,
              x.data());
    Linear(gemm_input(x, l, 2), T, H, weights(L.ff1_w, H, I).data(), I, L.ff1_b.data(),
           ff.data());
    for (auto& v : ff) v = float(gelu_tanh ? GeluTanh(v) : Gelu(v));
    Linear(gemm_input(ff, l, 3), T, I, weights(L.ff2_w, I, H).data(), H, L.ff2_b.data(),
           tmp.data());
    LayerNorm(tmp.data(), nullptr, x.data(), L.ln2_gamma.data(), L.ln2_beta.data(), c.eps, T, H,
              x.data());
  }
  return Heads(c, w, x, cu);
}

}  // namespace hotline::engine::cuda::ref
