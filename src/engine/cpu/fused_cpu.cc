// LayerNorm, EmbeddingLayerNorm, packed multi-head Attention and GELU: validation and threading
// here, the per-row arithmetic in the ISA tables (kernels_body.inc).
#include <omp.h>

#include <algorithm>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/cpu/cpu_isa.h"
#include "engine/cpu/kernels.h"

namespace hotline::engine::cpu {
namespace {

// Rows of work below which a parallel region costs more than it saves (~1-2 us to wake threads).
constexpr int64_t kMinParallelFloats = 16384;

void CheckCuSeqlens(const int32_t* cu_seqlens, int batch, const char* who) {
  if (batch < 0) throw Error(std::string(who) + ": batch must be >= 0, got " + std::to_string(batch));
  if (batch > 0 && cu_seqlens == nullptr) throw Error(std::string(who) + ": cu_seqlens is null");
  if (batch > 0 && cu_seqlens[0] < 0) {
    throw Error(std::string(who) + ": cu_seqlens[0] must be >= 0, got " +
                std::to_string(cu_seqlens[0]));
  }
  for (int b = 0; b < batch; ++b) {
    if (cu_seqlens[b + 1] < cu_seqlens[b]) {
      throw Error(std::string(who) + ": cu_seqlens must be non-decreasing, got cu_seqlens[" +
                  std::to_string(b) + "]=" + std::to_string(cu_seqlens[b]) + " > cu_seqlens[" +
                  std::to_string(b + 1) + "]=" + std::to_string(cu_seqlens[b + 1]));
    }
  }
}

}  // namespace

void LayerNorm(const float* x, const float* residual, const float* gamma, const float* beta,
               float eps, int rows, int hidden, float* y) {
  if (rows < 0 || hidden <= 0) {
    throw Error("LayerNorm: need rows >= 0 and hidden > 0, got rows=" + std::to_string(rows) +
                " hidden=" + std::to_string(hidden));
  }
  if (rows == 0) return;
  if (x == nullptr || gamma == nullptr || beta == nullptr || y == nullptr) {
    throw Error("LayerNorm: null x, gamma, beta or y");
  }
  const KernelTable& kt = Kernels();
  const size_t h = static_cast<size_t>(hidden);
#pragma omp parallel for schedule(static) if (int64_t{rows} * hidden >= kMinParallelFloats)
  for (int r = 0; r < rows; ++r) {
    kt.layer_norm_row(x + r * h, residual != nullptr ? residual + r * h : nullptr, gamma, beta,
                      eps, hidden, y + r * h);
  }
}

void LayerNormS8(const float* x, const float* residual, const float* gamma, const float* beta,
                 float eps, int rows, int hidden, float* y, int8_t* yq, float inv_scale) {
  if (rows < 0 || hidden <= 0) {
    throw Error("LayerNormS8: need rows >= 0 and hidden > 0, got rows=" + std::to_string(rows) +
                " hidden=" + std::to_string(hidden));
  }
  if (rows == 0) return;
  if (x == nullptr || gamma == nullptr || beta == nullptr || yq == nullptr) {
    throw Error("LayerNormS8: null x, gamma, beta or yq");
  }
  const KernelTable& kt = Kernels();
  const size_t h = static_cast<size_t>(hidden);
#pragma omp parallel if (int64_t{rows} * hidden >= kMinParallelFloats)
  {
    // Without y, each thread normalises into a row of its own (grown once, then reused).
    thread_local std::vector<float> own;
    if (y == nullptr && own.size() < h) own.resize(h);
#pragma omp for schedule(static)
    for (int r = 0; r < rows; ++r) {
      float* out = y != nullptr ? y + r * h : own.data();
      kt.layer_norm_row(x + r * h, residual != nullptr ? residual + r * h : nullptr, gamma, beta,
                        eps, hidden, out);
      QuantizeS8(out, hidden, inv_scale, yq + r * h);
    }
  }
}

void EmbeddingLayerNorm(const int32_t* ids, const int32_t* type_ids, const int32_t* cu_seqlens,
                        int batch, const float* word, int vocab, const float* pos, int max_pos,
                        const float* type, int type_vocab, const float* gamma, const float* beta,
                        float eps, int hidden, float* y) {
  EmbeddingLayerNormS8(ids, type_ids, cu_seqlens, batch, word, nullptr, nullptr, vocab, pos,
                       max_pos, type, type_vocab, gamma, beta, eps, hidden, y, nullptr, 1.f);
}

void EmbeddingLayerNormS8(const int32_t* ids, const int32_t* type_ids, const int32_t* cu_seqlens,
                          int batch, const float* word, const int8_t* word_q,
                          const float* word_scale, int vocab, const float* pos, int max_pos,
                          const float* type, int type_vocab, const float* gamma, const float* beta,
                          float eps, int hidden, float* y, int8_t* yq, float inv_scale) {
  CheckCuSeqlens(cu_seqlens, batch, "EmbeddingLayerNorm");
  if (hidden <= 0) throw Error("EmbeddingLayerNorm: hidden must be > 0, got " + std::to_string(hidden));
  if (batch == 0) return;
  const int first = cu_seqlens[0], total = cu_seqlens[batch];
  if (total == first) return;
  if (ids == nullptr || (word == nullptr && (word_q == nullptr || word_scale == nullptr)) ||
      pos == nullptr || type == nullptr || gamma == nullptr || beta == nullptr || y == nullptr) {
    throw Error("EmbeddingLayerNorm: null input, table or output");
  }
  // Validate everything a request controls before any thread starts (no throwing inside OpenMP).
  for (int b = 0; b < batch; ++b) {
    const int len = cu_seqlens[b + 1] - cu_seqlens[b];
    if (len > max_pos) {
      throw Error("EmbeddingLayerNorm: sequence " + std::to_string(b) + " has " +
                  std::to_string(len) + " tokens, the position table holds " +
                  std::to_string(max_pos));
    }
  }
  for (int t = first; t < total; ++t) {
    if (ids[t] < 0 || ids[t] >= vocab) {
      throw Error("EmbeddingLayerNorm: token id " + std::to_string(ids[t]) + " at token " +
                  std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(vocab) +
                  ")");
    }
    if (type_ids != nullptr && (type_ids[t] < 0 || type_ids[t] >= type_vocab)) {
      throw Error("EmbeddingLayerNorm: token type " + std::to_string(type_ids[t]) +
                  " at token " + std::to_string(t) + " is outside [0, " +
                  std::to_string(type_vocab) + ")");
    }
  }
  if (type_ids == nullptr && type_vocab < 1) {
    throw Error("EmbeddingLayerNorm: the token type table is empty");
  }
  const KernelTable& kt = Kernels();
  const size_t h = static_cast<size_t>(hidden);
#pragma omp parallel if (int64_t{total - first} * hidden >= kMinParallelFloats)
  {
    thread_local std::vector<float> row;  // the dequantised word row (grown once, then reused)
    if (word == nullptr && row.size() < h) row.resize(h);
#pragma omp for schedule(static)
    for (int t = first; t < total; ++t) {
      // The sequence holding t: the last b with cu_seqlens[b] <= t.
      const int b = static_cast<int>(std::upper_bound(cu_seqlens, cu_seqlens + batch + 1, t) -
                                     cu_seqlens) - 1;
      const int p = t - cu_seqlens[b];
      const int tt = type_ids != nullptr ? type_ids[t] : 0;
      float* out = y + t * h;
      const float* w = word != nullptr ? word + ids[t] * h : row.data();
      if (word == nullptr) {
        const int8_t* q = word_q + size_t(ids[t]) * h;
        const float s = word_scale[ids[t]];
        for (size_t k = 0; k < h; ++k) row[k] = float(q[k]) * s;
      }
      kt.add3(w, pos + p * h, type + tt * h, hidden, out);
      kt.layer_norm_row(out, nullptr, gamma, beta, eps, hidden, out);
      if (yq != nullptr) QuantizeS8(out, hidden, inv_scale, yq + t * h);
    }
  }
}

size_t AttentionScratchPerThread(int max_seqlen) {
  const size_t lds = (static_cast<size_t>(max_seqlen) + 15) / 16 * 16;
  // Rounded to 16 floats (a cache line) so threads never share a line.
  return kAttnQueryBlock * lds + size_t{kAttnMaxTransposedDim} * kAttnKeyBlock + 16;
}

size_t AttentionScratchFloats(int max_seqlen, int threads) {
  if (max_seqlen < 0 || threads <= 0) {
    throw Error("AttentionScratchFloats: need max_seqlen >= 0 and threads > 0, got " +
                std::to_string(max_seqlen) + ", " + std::to_string(threads));
  }
  return AttentionScratchPerThread(max_seqlen) * static_cast<size_t>(threads);
}

void Attention(const float* qkv, const int32_t* cu_seqlens, int batch, int heads, int head_dim,
               float scale, float* ctx, float* scratch) {
  CheckCuSeqlens(cu_seqlens, batch, "Attention");
  if (heads <= 0 || head_dim <= 0) {
    throw Error("Attention: heads and head_dim must be > 0, got " + std::to_string(heads) + ", " +
                std::to_string(head_dim));
  }
  if (batch == 0 || cu_seqlens[batch] == cu_seqlens[0]) return;
  if (qkv == nullptr || ctx == nullptr || scratch == nullptr) {
    throw Error("Attention: null qkv, ctx or scratch");
  }
  int max_len = 0;
  for (int b = 0; b < batch; ++b) max_len = std::max(max_len, cu_seqlens[b + 1] - cu_seqlens[b]);
  const size_t per_thread = AttentionScratchPerThread(max_len);
  const KernelTable& kt = Kernels();
  const int hidden = heads * head_dim;
  const int ld = 3 * hidden;
  const int tasks = batch * heads;
  // Expected single-thread time (~50 GFLOP/s for the 4 flops per query-key pair and dimension):
  // short sequences run on the calling thread where a parallel region would cost more.
  double flops = 0;
  for (int b = 0; b < batch; ++b) {
    const double len = cu_seqlens[b + 1] - cu_seqlens[b];
    flops += 4.0 * len * len * head_dim * heads;
  }
  const bool parallel = tasks > 1 && ParallelWorth(flops / 5e4);
  // Contract (kernels.h): scratch holds AttentionScratchFloats(max_seqlen, threads) floats with
  // threads >= omp_get_max_threads(); each thread uses only its own slice.
#pragma omp parallel for schedule(dynamic) if (parallel)
  for (int task = 0; task < tasks; ++task) {
    const int b = task / heads, hd = task % heads;
    const int start = cu_seqlens[b], len = cu_seqlens[b + 1] - start;
    if (len == 0) continue;
    AttentionHead a;
    const float* base = qkv + static_cast<size_t>(start) * ld;
    a.q = base + hd * head_dim;
    a.k = base + hidden + hd * head_dim;
    a.v = base + 2 * hidden + hd * head_dim;
    a.ld = ld;
    a.num_queries = len;
    a.seq_len = len;
    a.head_dim = head_dim;
    a.scale = scale;
    a.ctx = ctx + static_cast<size_t>(start) * hidden + hd * head_dim;
    a.ldc = hidden;
    a.scratch = scratch + per_thread * omp_get_thread_num();
    kt.attention(a);
  }
}

void Gelu(const float* x, int64_t n, float* y) {
  if (n < 0) throw Error("Gelu: n must be >= 0, got " + std::to_string(n));
  if (n == 0) return;
  if (x == nullptr || y == nullptr) throw Error("Gelu: null input or output");
  const KernelTable& kt = Kernels();
  constexpr int64_t kChunk = 4096;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kMinParallelFloats)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t s = c * kChunk;
    kt.gelu(x + s, std::min(kChunk, n - s), y + s);
  }
}

}  // namespace hotline::engine::cpu
