// Reference ops, part 3: the ops current exporters put into attention-mask and position-id
// subgraphs (IsNaN/IsInf, Sign, Trilu, CumSum, GatherND, ScatterND, GatherElements, Tile, Split).
// They run at build time (folding, shape probes) and in the generic executor; after fusion the
// packed plan no longer contains them.
#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "engine/ref_ops.h"
#include "engine/ref_ops_internal.h"

namespace hotline::engine::ref {
namespace {

using DT = HTensor::DType;

std::vector<int64_t> Strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t k = shape.size(); k-- > 1;) s[k - 1] = s[k] * shape[k];
  return s;
}

void CopyElem(const HTensor& x, int64_t from, HTensor* y, int64_t to) {
  if (x.is_float())
    y->f[to] = x.f[from];
  else
    y->i[to] = x.i[from];
}

void IsNanInf(const Node& n, int64_t, const std::vector<const HTensor*>& in,
              std::vector<HTensor>* out) {
  const HTensor& x = Need(in, 0, n);
  HTensor y = HTensor::Bool(x.shape, std::vector<int64_t>(x.numel(), 0));
  if (x.is_float()) {
    const bool pos = n.i("detect_positive", 1) != 0, neg = n.i("detect_negative", 1) != 0;
    for (int64_t k = 0; k < x.numel(); ++k) {
      const float v = x.f[k];
      y.i[k] = n.op == "IsNaN" ? std::isnan(v) : std::isinf(v) && (v > 0 ? pos : neg);
    }
  }
  (*out)[0] = std::move(y);
}

void Sign(const Node& n, int64_t, const std::vector<const HTensor*>& in,
          std::vector<HTensor>* out) {
  HTensor y = Need(in, 0, n);
  for (auto& v : y.f) v = float((v > 0) - (v < 0));
  for (auto& v : y.i) v = (v > 0) - (v < 0);
  (*out)[0] = std::move(y);
}

// Keeps the upper (upper=1) or lower triangle of the last two axes, offset by k; zeroes the rest.
void Trilu(const Node& n, int64_t, const std::vector<const HTensor*>& in,
           std::vector<HTensor>* out) {
  const HTensor& x = Need(in, 0, n);
  if (x.shape.size() < 2) throw Error(n.Describe() + ": input must have rank >= 2");
  const int64_t k = in.size() > 1 && in[1] ? in[1]->at_i(0) : 0;
  const bool upper = n.i("upper", 1) != 0;
  const int64_t R = x.shape[x.shape.size() - 2], C = x.shape.back();
  HTensor y = x;
  for (int64_t e = 0; e < x.numel(); ++e) {
    const int64_t c = e % C, r = (e / C) % R;
    const bool keep = upper ? c - r >= k : c - r <= k;
    if (keep) continue;
    if (y.is_float())
      y.f[e] = 0.f;
    else
      y.i[e] = 0;
  }
  (*out)[0] = std::move(y);
}

void CumSum(const Node& n, int64_t, const std::vector<const HTensor*>& in,
            std::vector<HTensor>* out) {
  const HTensor& x = Need(in, 0, n);
  const int64_t r = int64_t(x.shape.size());
  const int64_t axis = NormAxis(Need(in, 1, n).at_i(0), r, n);
  const bool exclusive = n.i("exclusive", 0) != 0, reverse = n.i("reverse", 0) != 0;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape[d];
  for (int64_t d = axis + 1; d < r; ++d) inner *= x.shape[d];
  const int64_t D = x.shape[axis];
  HTensor y = HTensor::Zeros(x.dtype == DT::kBool ? DT::kI64 : x.dtype, x.shape);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < inner; ++j) {
      double acc = 0;
      for (int64_t t = 0; t < D; ++t) {
        const int64_t a = reverse ? D - 1 - t : t;
        const int64_t e = (o * D + a) * inner + j;
        const double v = x.at_f(e);
        if (!exclusive) acc += v;
        if (y.is_float())
          y.f[e] = float(acc);
        else
          y.i[e] = int64_t(acc);
        if (exclusive) acc += v;
      }
    }
  }
  (*out)[0] = std::move(y);
}

int64_t CheckedIndex(int64_t v, int64_t dim, const Node& n) {
  if (v < 0) v += dim;
  if (v < 0 || v >= dim) {
    throw Error(n.Describe() + ": index " + std::to_string(v) +
                " is out of range for a dimension "
                "of size " +
                std::to_string(dim));
  }
  return v;
}

// GatherND: out[b..., i...] = data[b..., idx[b..., i..., :], ...] with batch_dims leading axes.
void GatherND(const Node& n, int64_t, const std::vector<const HTensor*>& in,
              std::vector<HTensor>* out) {
  const HTensor& x = Need(in, 0, n);
  const HTensor& idx = Need(in, 1, n);
  if (idx.is_float() || idx.shape.empty()) throw Error(n.Describe() + ": indices must be integers");
  const int64_t bd = n.i("batch_dims", 0);
  const int64_t q = int64_t(idx.shape.size()), r = int64_t(x.shape.size());
  const int64_t last = idx.shape.back();
  if (bd < 0 || bd + last > r || bd >= q) throw Error(n.Describe() + ": index depth out of range");
  std::vector<int64_t> shape(idx.shape.begin(), idx.shape.end() - 1);
  for (int64_t d = bd + last; d < r; ++d) shape.push_back(x.shape[d]);
  int64_t batch = 1, slice = 1;
  for (int64_t d = 0; d < bd; ++d) batch *= x.shape[d];
  for (int64_t d = bd + last; d < r; ++d) slice *= x.shape[d];
  const auto xs = Strides(x.shape);
  const int64_t per_batch_x = bd > 0 ? xs[bd - 1] : x.numel();
  const int64_t tuples = idx.numel() / std::max<int64_t>(last, 1) / batch;
  HTensor y = HTensor::Zeros(x.dtype, shape);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t off = b * per_batch_x;
      for (int64_t j = 0; j < last; ++j) {
        const int64_t v = idx.i[(b * tuples + t) * last + j];
        off += CheckedIndex(v, x.shape[bd + j], n) * xs[bd + j];
      }
      for (int64_t s = 0; s < slice; ++s) CopyElem(x, off + s, &y, (b * tuples + t) * slice + s);
    }
  }
  (*out)[0] = std::move(y);
}

// ScatterND: a copy of data with the slices that indices name replaced (or combined by reduction).
void ScatterND(const Node& n, int64_t, const std::vector<const HTensor*>& in,
               std::vector<HTensor>* out) {
  const HTensor& x = Need(in, 0, n);
  const HTensor& idx = Need(in, 1, n);
  const HTensor& upd = Need(in, 2, n);
  if (idx.is_float() || idx.shape.empty()) throw Error(n.Describe() + ": indices must be integers");
  const int64_t last = idx.shape.back(), r = int64_t(x.shape.size());
  if (last > r) throw Error(n.Describe() + ": index depth exceeds the data's rank");
  const std::string red = n.s("reduction", "none");
  const auto xs = Strides(x.shape);
  int64_t slice = 1;
  for (int64_t d = last; d < r; ++d) slice *= x.shape[d];
  const int64_t tuples = idx.numel() / std::max<int64_t>(last, 1);
  if (upd.numel() != tuples * slice || upd.dtype != x.dtype) {
    throw Error(n.Describe() + ": updates " + ShapeString(upd.shape) + " do not fit indices " +
                ShapeString(idx.shape) + " into data " + ShapeString(x.shape));
  }
  HTensor y = x;
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = 0;
    for (int64_t j = 0; j < last; ++j)
      off += CheckedIndex(idx.i[t * last + j], x.shape[j], n) * xs[j];
    for (int64_t s = 0; s < slice; ++s) {
      const int64_t e = off + s, u = t * slice + s;
      if (y.is_float()) {
        float& v = y.f[e];
        const float w = upd.f[u];
        v = red == "add"   ? v + w
            : red == "mul" ? v * w
            : red == "max" ? std::max(v, w)
            : red == "min" ? std::min(v, w)
                           : w;
      } else {
        int64_t& v = y.i[e];
        const int64_t w = upd.i[u];
        v = red == "add"   ? v + w
            : red == "mul" ? v * w
            : red == "max" ? std::max(v, w)
            : red == "min" ? std::min(v, w)
                           : w;
      }
    }
  }
  (*out)[0] = std::move(y);
}

void GatherElements(const Node& n, int64_t, const std::vector<const HTensor*>& in,
                    std::vector<HTensor>* out) {
  const HTensor& x = Need(in, 0, n);
  const HTensor& idx = Need(in, 1, n);
  const int64_t r = int64_t(x.shape.size());
  if (idx.is_float() || int64_t(idx.shape.size()) != r) {
    throw Error(n.Describe() + ": indices must be integers of the data's rank");
  }
  const int64_t axis = NormAxis(n.i("axis", 0), r, n);
  const auto xs = Strides(x.shape), is = Strides(idx.shape);
  HTensor y = HTensor::Zeros(x.dtype, idx.shape);
  for (int64_t e = 0; e < idx.numel(); ++e) {
    int64_t off = 0;
    for (int64_t d = 0; d < r; ++d) {
      const int64_t pos = (e / is[d]) % idx.shape[d];
      off += (d == axis ? CheckedIndex(idx.i[e], x.shape[d], n) : pos) * xs[d];
    }
    CopyElem(x, off, &y, e);
  }
  (*out)[0] = std::move(y);
}

void Tile(const Node& n, int64_t, const std::vector<const HTensor*>& in,
          std::vector<HTensor>* out) {
  const HTensor& x = Need(in, 0, n);
  const auto reps = IntsOf(Need(in, 1, n));
  const int64_t r = int64_t(x.shape.size());
  if (int64_t(reps.size()) != r) throw Error(n.Describe() + ": repeats must have one per axis");
  std::vector<int64_t> shape(r);
  for (int64_t d = 0; d < r; ++d) shape[d] = x.shape[d] * reps[d];
  const auto xs = Strides(x.shape), ys = Strides(shape);
  HTensor y = HTensor::Zeros(x.dtype, shape);
  for (int64_t e = 0; e < y.numel(); ++e) {
    int64_t off = 0;
    for (int64_t d = 0; d < r; ++d) off += ((e / ys[d]) % shape[d] % x.shape[d]) * xs[d];
    CopyElem(x, off, &y, e);
  }
  (*out)[0] = std::move(y);
}

// Split along an axis: sizes from the `split` input (opset 13+) or attribute, else equal parts.
void Split(const Node& n, int64_t opset, const std::vector<const HTensor*>& in,
           std::vector<HTensor>* out) {
  const HTensor& x = Need(in, 0, n);
  const int64_t r = int64_t(x.shape.size());
  const int64_t axis = NormAxis(n.i("axis", 0), r, n);
  const int64_t parts = int64_t(n.outputs.size());
  std::vector<int64_t> sizes =
      opset >= 13 ? (in.size() > 1 && in[1] ? IntsOf(*in[1]) : std::vector<int64_t>{})
                  : n.ints("split");
  const int64_t D = x.shape[axis];
  if (sizes.empty()) {
    const int64_t each = (D + parts - 1) / parts;
    for (int64_t p = 0; p < parts; ++p) sizes.push_back(std::min(each, D - p * each));
  }
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  if (int64_t(sizes.size()) != parts || total != D) {
    throw Error(n.Describe() + ": split sizes do not add up to axis " + std::to_string(axis) +
                " of " + ShapeString(x.shape));
  }
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape[d];
  for (int64_t d = axis + 1; d < r; ++d) inner *= x.shape[d];
  out->resize(parts);
  int64_t start = 0;
  for (int64_t p = 0; p < parts; ++p) {
    std::vector<int64_t> shape = x.shape;
    shape[axis] = sizes[p];
    HTensor y = HTensor::Zeros(x.dtype, shape);
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t c = 0; c < sizes[p] * inner; ++c) {
        CopyElem(x, (o * D + start) * inner + c, &y, o * sizes[p] * inner + c);
      }
    }
    (*out)[p] = std::move(y);
    start += sizes[p];
  }
}

}  // namespace

void RegisterMaskOps(std::map<std::string, RefFn>* m) {
  (*m)["IsNaN"] = IsNanInf;
  (*m)["IsInf"] = IsNanInf;
  (*m)["Sign"] = Sign;
  (*m)["Trilu"] = Trilu;
  (*m)["CumSum"] = CumSum;
  (*m)["GatherND"] = GatherND;
  (*m)["ScatterND"] = ScatterND;
  (*m)["GatherElements"] = GatherElements;
  (*m)["Tile"] = Tile;
  (*m)["Split"] = Split;
}

}  // namespace hotline::engine::ref
