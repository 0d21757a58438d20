// Plain CPU references for the CUDA kernel tests: straightforward loops in double (kernels) or
// float with double sums (whole encoder), written from the math, not from the CUDA code.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/cuda/encoder.h"

namespace hotline::engine::cuda::ref {

inline double Gelu(double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); }
inline double GeluTanh(double v) {
  return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
}

// y[M,N] = x[M,K] · w[K,N] (+ bias) ; rows in parallel.
inline void Linear(const float* x, int M, int K, const float* w, int N, const float* bias,
                   float* y) {
#pragma omp parallel for schedule(static)
  for (int m = 0; m < M; ++m) {
    std::vector<double> acc(N, 0.0);
    for (int k = 0; k < K; ++k) {
      const double xv = x[size_t(m) * K + k];
      const float* wr = w + size_t(k) * N;
      for (int n = 0; n < N; ++n) acc[n] += xv * wr[n];
    }
    for (int n = 0; n < N; ++n) y[size_t(m) * N + n] = float(acc[n] + (bias ? bias[n] : 0.0));
  }
}

inline void LayerNormRow(const double* v, int H, const float* g, const float* b, double eps,
                         float* y) {
  double mean = 0;
  for (int i = 0; i < H; ++i) mean += v[i];
  mean /= H;
  double var = 0;
  for (int i = 0; i < H; ++i) var += (v[i] - mean) * (v[i] - mean);
  var /= H;
  const double r = 1.0 / std::sqrt(var + eps);
  for (int i = 0; i < H; ++i) y[i] = float((v[i] - mean) * r * g[i] + b[i]);
}

// x (+bias) (+residual) -> LayerNorm, rows of H; y may alias x/residual.
inline void LayerNorm(const float* x, const float* bias, const float* res, const float* g,
                      const float* b, float eps, int rows, int H, float* y) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r) {
    std::vector<double> v(H);
    for (int i = 0; i < H; ++i)
      v[i] = double(x[size_t(r) * H + i]) + (bias ? bias[i] : 0.0) +
             (res ? res[size_t(r) * H + i] : 0.0);
    LayerNormRow(v.data(), H, g, b, eps, y + size_t(r) * H);
  }
}

inline void Embed(const int32_t* ids, const int32_t* types, const int32_t* cu, int batch,
                  const float* word, const float* pos, const float* type, const float* g,
                  const float* b, float eps, int H, float* y) {
  for (int s = 0; s < batch; ++s) {
    for (int t = cu[s]; t < cu[s + 1]; ++t) {
      std::vector<double> v(H);
      const int tt = types ? types[t] : 0;
      for (int i = 0; i < H; ++i)
        v[i] = double(word[size_t(ids[t]) * H + i]) + pos[size_t(t - cu[s]) * H + i] +
               type[size_t(tt) * H + i];
      LayerNormRow(v.data(), H, g, b, eps, y + size_t(t) * H);
    }
  }
}

// qkv [T, 3*heads*D] -> ctx [T, heads*D] within each sequence.
inline void Attention(const float* qkv, const int32_t* cu, int batch, int heads, int D,
                      float scale, float* ctx) {
  const int HD = heads * D, ld = 3 * HD;
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int s = 0; s < batch; ++s) {
    for (int h = 0; h < heads; ++h) {
      const int st = cu[s], len = cu[s + 1] - cu[s];
      std::vector<double> p(len);
      for (int q = 0; q < len; ++q) {
        double mx = -1e300;
        for (int j = 0; j < len; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d)
            dot += double(qkv[size_t(st + q) * ld + h * D + d]) *
                   qkv[size_t(st + j) * ld + HD + h * D + d];
          p[j] = dot * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (int j = 0; j < len; ++j) sum += (p[j] = std::exp(p[j] - mx));
        for (int d = 0; d < D; ++d) {
          double acc = 0;
          for (int j = 0; j < len; ++j) acc += p[j] * qkv[size_t(st + j) * ld + 2 * HD + h * D + d];
          ctx[size_t(st + q) * HD + h * D + d] = float(acc / sum);
        }
      }
    }
  }
}

struct EncoderResult {
  std::vector<float> intent_logits, slot_logits;
  std::vector<int> intent, slots;
};

inline int Argmax(const float* v, int n) { return int(std::max_element(v, v + n) - v); }

// The heads over the last hidden states x [T, H] of a packed batch (cu): pooler (dense + tanh)
// on each sequence's first token when the config has one, intent and slot logits and argmaxes.
inline EncoderResult Heads(const EncoderConfig& c, const EncoderWeights& w,
                           const std::vector<float>& x, const std::vector<int32_t>& cu) {
  const int B = int(cu.size()) - 1, T = cu.back(), H = c.hidden;
  EncoderResult r;
  std::vector<float> cls(size_t(B) * H), pooled(size_t(B) * H);
  for (int s = 0; s < B; ++s) std::copy_n(&x[size_t(cu[s]) * H], H, &cls[size_t(s) * H]);
  const float* head_in = cls.data();
  if (c.pooler) {
    Linear(cls.data(), B, H, w.pooler_w.data(), H, w.pooler_b.data(), pooled.data());
    for (auto& v : pooled) v = std::tanh(v);
    head_in = pooled.data();
  }
  r.intent_logits.resize(size_t(B) * c.n_intents);
  Linear(head_in, B, H, w.intent_w.data(), c.n_intents, w.intent_b.data(), r.intent_logits.data());
  r.slot_logits.resize(size_t(T) * c.n_slots);
  Linear(x.data(), T, H, w.slot_w.data(), c.n_slots, w.slot_b.data(), r.slot_logits.data());
  for (int s = 0; s < B; ++s)
    r.intent.push_back(Argmax(&r.intent_logits[size_t(s) * c.n_intents], c.n_intents));
  for (int t = 0; t < T; ++t)
    r.slots.push_back(Argmax(&r.slot_logits[size_t(t) * c.n_slots], c.n_slots));
  return r;
}

// The whole joint encoder in FP32/double, erf GELU (or tanh-approximated when gelu_tanh).
inline EncoderResult Encoder(const EncoderConfig& c, const EncoderWeights& w,
                             const std::vector<int32_t>& ids, const std::vector<int32_t>& types,
                             const std::vector<int32_t>& cu, bool gelu_tanh) {
  const int B = int(cu.size()) - 1, T = cu.back(), H = c.hidden, I = c.intermediate;
  const int D = c.head_dim();
  std::vector<float> x(size_t(T) * H), qkv(size_t(T) * 3 * H), ctx(size_t(T) * H),
      tmp(size_t(T) * H), ff(size_t(T) * I);
  Embed(ids.data(), types.empty() ? nullptr : types.data(), cu.data(), B, w.word.data(),
        w.pos.data(), w.type.data(), w.emb_gamma.data(), w.emb_beta.data(), c.eps, H, x.data());
  for (const auto& L : w.layers) {
    Linear(x.data(), T, H, L.qkv_w.data(), 3 * H, L.qkv_b.data(), qkv.data());
    Attention(qkv.data(), cu.data(), B, c.heads, D, float(1.0 / std::sqrt(double(D))), ctx.data());
    Linear(ctx.data(), T, H, L.out_w.data(), H, L.out_b.data(), tmp.data());
    LayerNorm(tmp.data(), nullptr, x.data(), L.ln1_gamma.data(), L.ln1_beta.data(), c.eps, T, H,
              x.data());
    Linear(x.data(), T, H, L.ff1_w.data(), I, L.ff1_b.data(), ff.data());
    for (auto& v : ff) v = float(gelu_tanh ? GeluTanh(v) : Gelu(v));
    Linear(ff.data(), T, I, L.ff2_w.data(), H, L.ff2_b.data(), tmp.data());
    LayerNorm(tmp.data(), nullptr, x.data(), L.ln2_gamma.data(), L.ln2_beta.data(), c.eps, T, H,
              x.data());
  }
  return Heads(c, w, x, cu);
}

// ||a - b|| / ||b|| (NaN anywhere in a gives +inf).
inline double RelErr(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  if (a.size() != b.size()) return INFINITY;
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

}  // namespace hotline::engine::cuda::ref
