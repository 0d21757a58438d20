// Reference ops, part 2: MatMul, Gemm, Softmax, reductions, LayerNormalization, and the padded
// reference versions of hotline's fused ops (Dense, LayerNorm, DenseLayerNorm, EmbedLayerNorm,
// FirstToken). The packed-only Attention op has no padded reference here: the packed executor
// runs it.
#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "engine/ref_ops.h"
#include "engine/ref_ops_internal.h"

namespace hotline::engine {

float RefGelu(float x) { return 0.5f * x * (1.f + std::erf(x * 0.70710678118654752f)); }

void RefLayerNormRows(const float* x, const float* residual, const float* gamma, const float* beta,
                      float eps, int64_t rows, int64_t hidden, float* y) {
  std::vector<double> tmp(hidden);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * hidden;
    double mean = 0;
    for (int64_t k = 0; k < hidden; ++k) {
      tmp[k] = double(xr[k]) + (residual ? double(residual[r * hidden + k]) : 0.0);
      mean += tmp[k];
    }
    mean /= double(hidden);
    double var = 0;
    for (int64_t k = 0; k < hidden; ++k) var += (tmp[k] - mean) * (tmp[k] - mean);
    var /= double(hidden);
    const double inv = 1.0 / std::sqrt(var + double(eps));
    for (int64_t k = 0; k < hidden; ++k) {
      y[r * hidden + k] =
          float((tmp[k] - mean) * inv * (gamma ? gamma[k] : 1.f) + (beta ? beta[k] : 0.f));
    }
  }
}

namespace ref {
namespace {

const HTensor& NeedF(const std::vector<const HTensor*>& in, size_t k, const Node& n) {
  const HTensor& t = Need(in, k, n);
  if (!t.is_float()) {
    throw Error(n.Describe() + ": input #" + std::to_string(k) + " must be float32, got " +
                DTypeName(t.dtype));
  }
  return t;
}

const HTensor* Opt(const std::vector<const HTensor*>& in, size_t k) {
  return k < in.size() ? in[k] : nullptr;
}

// C[M,N] (+)= A[M,K] · B[K,N], all row-major with the given leading strides.
void MatMul2D(const float* a, const float* b, int64_t M, int64_t K, int64_t N, float* c) {
  std::fill(c, c + M * N, 0.f);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t k = 0; k < K; ++k) {
      const float av = a[m * K + k];
      if (av == 0.f) continue;
      const float* br = b + k * N;
      float* cr = c + m * N;
      for (int64_t n = 0; n < N; ++n) cr[n] += av * br[n];
    }
  }
}

void MatMul(const Node& n, int64_t, const std::vector<const HTensor*>& in,
            std::vector<HTensor>* out) {
  HTensor a = NeedF(in, 0, n), b = NeedF(in, 1, n);
  const bool a1 = a.shape.size() == 1, b1 = b.shape.size() == 1;
  if (a1) a.shape.insert(a.shape.begin(), 1);
  if (b1) b.shape.push_back(1);
  if (a.shape.size() < 2 || b.shape.size() < 2) throw Error(n.Describe() + ": scalar operand");
  const int64_t M = a.shape[a.shape.size() - 2], K = a.shape.back();
  const int64_t K2 = b.shape[b.shape.size() - 2], N = b.shape.back();
  if (K != K2) {
    throw Error(n.Describe() + ": inner dimensions differ: " + ShapeString(a.shape) + " · " +
                ShapeString(b.shape));
  }
  std::vector<int64_t> ba(a.shape.begin(), a.shape.end() - 2), bb(b.shape.begin(), b.shape.end() - 2);
  const auto batch = BroadcastShapes(ba, bb, n);
  const auto ia = BroadcastIndex(ba, batch), ib = BroadcastIndex(bb, batch);
  std::vector<int64_t> shape = batch;
  shape.push_back(M);
  shape.push_back(N);
  HTensor y = HTensor::Zeros(HTensor::DType::kF32, shape);
  for (size_t e = 0; e < ia.size(); ++e) {
    MatMul2D(a.f.data() + ia[e] * M * K, b.f.data() + ib[e] * K * N, M, K, N,
             y.f.data() + int64_t(e) * M * N);
  }
  if (a1) y.shape.erase(y.shape.end() - 2);
  if (b1) y.shape.pop_back();
  (*out)[0] = std::move(y);
}

void Gemm(const Node& n, int64_t, const std::vector<const HTensor*>& in,
          std::vector<HTensor>* out) {
  const HTensor& a = NeedF(in, 0, n);
  const HTensor& b = NeedF(in, 1, n);
  if (a.shape.size() != 2 || b.shape.size() != 2) throw Error(n.Describe() + ": needs 2-D inputs");
  const bool ta = n.i("transA", 0), tb = n.i("transB", 0);
  const float alpha = n.f("alpha", 1.f), beta = n.f("beta", 1.f);
  const int64_t M = ta ? a.shape[1] : a.shape[0], K = ta ? a.shape[0] : a.shape[1];
  const int64_t N = tb ? b.shape[0] : b.shape[1];
  if ((tb ? b.shape[1] : b.shape[0]) != K) throw Error(n.Describe() + ": inner dimensions differ");
  HTensor y = HTensor::Zeros(HTensor::DType::kF32, {M, N});
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) {
        s += double(ta ? a.f[k * M + m] : a.f[m * K + k]) * (tb ? b.f[j * K + k] : b.f[k * N + j]);
      }
      y.f[m * N + j] = float(alpha * s);
    }
  }
  if (const HTensor* c = Opt(in, 2)) {
    const auto ic = BroadcastIndex(c->shape, y.shape);
    for (size_t e = 0; e < ic.size(); ++e) y.f[e] += beta * float(c->at_f(ic[e]));
  }
  (*out)[0] = std::move(y);
}

void Softmax(const Node& n, int64_t opset, const std::vector<const HTensor*>& in,
             std::vector<HTensor>* out) {
  HTensor y = NeedF(in, 0, n);
  const int64_t r = int64_t(y.shape.size());
  const int64_t axis = NormAxis(n.i("axis", opset >= 13 ? -1 : 1), r, n);
  int64_t outer = 1, len = 1, inner = 1;
  if (opset >= 13) {
    for (int64_t d = 0; d < axis; ++d) outer *= y.shape[d];
    len = y.shape[axis];
    for (int64_t d = axis + 1; d < r; ++d) inner *= y.shape[d];
  } else {  // opset < 13: softmax over the flattened trailing dims
    for (int64_t d = 0; d < axis; ++d) outer *= y.shape[d];
    for (int64_t d = axis; d < r; ++d) len *= y.shape[d];
  }
  const bool log = n.op == "LogSoftmax";
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      float* p = y.f.data() + o * len * inner + i;
      float mx = -INFINITY;
      for (int64_t k = 0; k < len; ++k) mx = std::max(mx, p[k * inner]);
      double sum = 0;
      for (int64_t k = 0; k < len; ++k) sum += std::exp(double(p[k * inner]) - mx);
      for (int64_t k = 0; k < len; ++k) {
        const double v = double(p[k * inner]) - mx;
        p[k * inner] = float(log ? v - std::log(sum) : std::exp(v) / sum);
      }
    }
  }
  (*out)[0] = std::move(y);
}

void Reduce(const Node& n, int64_t opset, const std::vector<const HTensor*>& in,
            std::vector<HTensor>* out) {
  const HTensor& x = NeedF(in, 0, n);
  const int64_t r = int64_t(x.shape.size());
  std::vector<int64_t> axes;
  const bool axes_input = n.op == "ReduceSum" ? opset >= 13 : opset >= 18;
  if (axes_input && Opt(in, 1)) {
    axes = IntsOf(*in[1]);
  } else if (!axes_input) {
    axes = n.ints("axes");
  }
  if (axes.empty() && n.i("noop_with_empty_axes", 0)) {
    (*out)[0] = x;
    return;
  }
  std::vector<bool> red(r, axes.empty());
  for (int64_t a : axes) red[NormAxis(a, r, n)] = true;
  const bool keep = n.i("keepdims", 1) != 0;
  std::vector<int64_t> shape, kshape;
  for (int64_t d = 0; d < r; ++d) {
    kshape.push_back(red[d] ? 1 : x.shape[d]);
    if (!red[d] || keep) shape.push_back(red[d] ? 1 : x.shape[d]);
  }
  HTensor y = HTensor::Zeros(HTensor::DType::kF32, kshape);
  const bool mx = n.op == "ReduceMax", mn = n.op == "ReduceMin";
  std::vector<double> acc(y.numel(), mx ? -INFINITY : mn ? INFINITY : 0.0);
  // Map every input element onto its reduced position.
  std::vector<int64_t> pos(r, 0), ostride(r, 1);
  for (int64_t d = r - 2; d >= 0; --d) ostride[d] = ostride[d + 1] * kshape[d + 1];
  for (int64_t e = 0; e < x.numel(); ++e) {
    int64_t o = 0;
    for (int64_t d = 0; d < r; ++d) o += (red[d] ? 0 : pos[d]) * ostride[d];
    const double v = x.f[e];
    acc[o] = mx ? std::max(acc[o], v) : mn ? std::min(acc[o], v) : acc[o] + v;
    for (int64_t d = r - 1; d >= 0; --d) {
      if (++pos[d] < x.shape[d]) break;
      pos[d] = 0;
    }
  }
  const double count = double(x.numel()) / double(std::max<int64_t>(y.numel(), 1));
  for (int64_t k = 0; k < y.numel(); ++k) {
    y.f[k] = float(n.op == "ReduceMean" ? acc[k] / count : acc[k]);
  }
  y.shape = shape;
  (*out)[0] = std::move(y);
}

void LayerNormalization(const Node& n, int64_t, const std::vector<const HTensor*>& in,
                        std::vector<HTensor>* out) {
  const HTensor& x = NeedF(in, 0, n);
  const int64_t r = int64_t(x.shape.size());
  const int64_t axis = NormAxis(n.i("axis", -1), r, n);
  int64_t rows = 1, hidden = 1;
  for (int64_t d = 0; d < r; ++d) (d < axis ? rows : hidden) *= x.shape[d];
  const HTensor& g = NeedF(in, 1, n);
  const HTensor* b = Opt(in, 2);
  if (g.numel() != hidden || (b && b->numel() != hidden)) {
    throw Error(n.Describe() + ": scale/bias must have " + std::to_string(hidden) + " values");
  }
  HTensor y = x;
  RefLayerNormRows(x.f.data(), nullptr, g.f.data(), b ? b->f.data() : nullptr,
                   n.f("epsilon", 1e-5f), rows, hidden, y.f.data());
  (*out)[0] = std::move(y);
  for (size_t k = 1; k < out->size(); ++k) (*out)[k] = HTensor::Zeros(HTensor::DType::kF32, {1});
}

// ---- hotline fused ops (padded layout) ----

// y[..., N] = act(x[..., K] · W[K, N] + b) (+ residual)
HTensor DenseRef(const Node& n, const HTensor& x, const HTensor& w, const HTensor* b,
                 const HTensor* res) {
  const int64_t K = w.shape[0], N = w.shape[1];
  if (x.shape.empty() || x.shape.back() != K) {
    throw Error(n.Describe() + ": input " + ShapeString(x.shape) + " does not end in K=" +
                std::to_string(K));
  }
  const int64_t M = x.numel() / K;
  std::vector<int64_t> shape = x.shape;
  shape.back() = N;
  HTensor y = HTensor::Zeros(HTensor::DType::kF32, shape);
  MatMul2D(x.f.data(), w.f.data(), M, K, N, y.f.data());
  const std::string epi = n.s("epilogue", "none");
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t j = 0; j < N; ++j) {
      float v = y.f[m * N + j] + (b ? b->f[j] : 0.f);
      if (epi == "gelu") v = RefGelu(v);
      if (epi == "tanh") v = std::tanh(v);
      if (res) v += res->f[m * N + j];
      y.f[m * N + j] = v;
    }
  }
  return y;
}

void Dense(const Node& n, int64_t, const std::vector<const HTensor*>& in,
           std::vector<HTensor>* out) {
  (*out)[0] = DenseRef(n, NeedF(in, 0, n), NeedF(in, 1, n), Opt(in, 2), Opt(in, 3));
}

void LayerNormFused(const Node& n, int64_t, const std::vector<const HTensor*>& in,
                    std::vector<HTensor>* out) {
  const HTensor& x = NeedF(in, 0, n);
  const HTensor& g = NeedF(in, 1, n);
  const HTensor& b = NeedF(in, 2, n);
  const HTensor* res = Opt(in, 3);
  HTensor y = x;
  const int64_t hidden = g.numel();
  RefLayerNormRows(x.f.data(), res ? res->f.data() : nullptr, g.f.data(), b.f.data(),
                   n.f("epsilon", 1e-12f), x.numel() / hidden, hidden, y.f.data());
  (*out)[0] = std::move(y);
}

void DenseLayerNorm(const Node& n, int64_t, const std::vector<const HTensor*>& in,
                    std::vector<HTensor>* out) {
  HTensor y = DenseRef(n, NeedF(in, 0, n), NeedF(in, 1, n), Opt(in, 2), nullptr);
  const HTensor& res = NeedF(in, 3, n);
  const HTensor& g = NeedF(in, 4, n);
  const HTensor& b = NeedF(in, 5, n);
  const int64_t hidden = g.numel();
  RefLayerNormRows(y.f.data(), res.f.data(), g.f.data(), b.f.data(), n.f("epsilon", 1e-12f),
                   y.numel() / hidden, hidden, y.f.data());
  (*out)[0] = std::move(y);
}

// Padded: ids [b, s] → [b, s, H]; position p of each row uses pos[p].
void EmbedLayerNorm(const Node& n, int64_t, const std::vector<const HTensor*>& in,
                    std::vector<HTensor>* out) {
  const HTensor& ids = Need(in, 0, n);
  const HTensor* types = Opt(in, 1);
  const HTensor& word = NeedF(in, 2, n);
  const HTensor& pos = NeedF(in, 3, n);
  const HTensor* type = Opt(in, 4);
  const HTensor& g = NeedF(in, 5, n);
  const HTensor& b = NeedF(in, 6, n);
  if (ids.shape.size() != 2) throw Error(n.Describe() + ": ids must be [batch, seq]");
  const int64_t B = ids.shape[0], S = ids.shape[1], H = word.shape[1];
  if (S > pos.shape[0]) {
    throw Error(n.Describe() + ": sequence length " + std::to_string(S) + " exceeds the " +
                std::to_string(pos.shape[0]) + " position embeddings");
  }
  HTensor y = HTensor::Zeros(HTensor::DType::kF32, {B, S, H});
  for (int64_t t = 0; t < B * S; ++t) {
    const int64_t id = ids.i[t];
    const int64_t tt = types ? types->i[t] : 0;
    if (id < 0 || id >= word.shape[0]) {
      throw Error(n.Describe() + ": token id " + std::to_string(id) + " is outside the vocabulary "
                  "of " + std::to_string(word.shape[0]));
    }
    if (type && (tt < 0 || tt >= type->shape[0])) {
      throw Error(n.Describe() + ": token type " + std::to_string(tt) + " is outside [0, " +
                  std::to_string(type->shape[0]) + ")");
    }
    for (int64_t k = 0; k < H; ++k) {
      y.f[t * H + k] = word.f[id * H + k] + pos.f[(t % S) * H + k] +
                       (type ? type->f[tt * H + k] : 0.f);
    }
  }
  RefLayerNormRows(y.f.data(), nullptr, g.f.data(), b.f.data(), n.f("epsilon", 1e-12f), B * S, H,
                   y.f.data());
  (*out)[0] = std::move(y);
}

void FirstToken(const Node& n, int64_t, const std::vector<const HTensor*>& in,
                std::vector<HTensor>* out) {
  const HTensor& x = NeedF(in, 0, n);
  if (x.shape.size() < 2) throw Error(n.Describe() + ": needs [batch, seq, ...]");
  const int64_t B = x.shape[0], S = x.shape[1], inner = x.numel() / std::max<int64_t>(B * S, 1);
  std::vector<int64_t> shape = x.shape;
  shape.erase(shape.begin() + 1);
  HTensor y = HTensor::Zeros(HTensor::DType::kF32, shape);
  for (int64_t b = 0; b < B; ++b) {
    std::copy_n(x.f.data() + b * S * inner, inner, y.f.data() + b * inner);
  }
  (*out)[0] = std::move(y);
}

}  // namespace

bool IsFusedOp(const std::string& op) {
  return op == "Dense" || op == "LayerNorm" || op == "DenseLayerNorm" || op == "EmbedLayerNorm" ||
         op == "FirstToken" || op == "Attention";
}

void RegisterNnOps(std::map<std::string, RefFn>* m) {
  (*m)["MatMul"] = MatMul;
  (*m)["Gemm"] = Gemm;
  (*m)["Softmax"] = Softmax;
  (*m)["LogSoftmax"] = Softmax;
  for (const char* op : {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"}) (*m)[op] = Reduce;
  (*m)["LayerNormalization"] = LayerNormalization;
  (*m)["Dense"] = Dense;
  (*m)["LayerNorm"] = LayerNormFused;
  (*m)["DenseLayerNorm"] = DenseLayerNorm;
  (*m)["EmbedLayerNorm"] = EmbedLayerNorm;
  (*m)["FirstToken"] = FirstToken;
}

}  // namespace ref
}  // namespace hotline::engine
