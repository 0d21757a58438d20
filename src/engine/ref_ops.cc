// Reference ops, part 1: dispatch, elementwise ops with broadcasting, shape and indexing ops.
#include "engine/ref_ops.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>

#include "base/error.h"
#include "engine/ref_ops_internal.h"

namespace hotline::engine {

using DT = HTensor::DType;

std::vector<int64_t> BroadcastShapes(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                                     const Node& node) {
  const size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t k = 0; k < r; ++k) {
    const int64_t da = k < r - a.size() ? 1 : a[k - (r - a.size())];
    const int64_t db = k < r - b.size() ? 1 : b[k - (r - b.size())];
    if (da != db && da != 1 && db != 1) {
      throw Error(node.Describe() + ": shapes " + ShapeString(a) + " and " + ShapeString(b) +
                  " do not broadcast");
    }
    out[k] = da == 1 ? db : da;
  }
  return out;
}

int64_t NormAxis(int64_t axis, int64_t rank, const Node& node) {
  const int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= std::max<int64_t>(rank, 1)) {
    throw Error(node.Describe() + ": axis " + std::to_string(axis) + " is out of range for rank " +
                std::to_string(rank));
  }
  return a;
}

namespace ref {

// Flat input offsets of every output element when `in` broadcasts to `out`.
std::vector<int64_t> BroadcastIndex(const std::vector<int64_t>& in,
                                    const std::vector<int64_t>& out) {
  const size_t r = out.size();
  std::vector<int64_t> stride(r, 0);
  int64_t s = 1;
  for (size_t k = r; k-- > 0;) {
    const size_t ik = k + in.size();
    if (ik >= r) {
      const int64_t d = in[ik - r];
      stride[k] = d == 1 ? 0 : s;
      s *= d;
    }
  }
  int64_t n = 1;
  for (int64_t d : out) n *= d;
  std::vector<int64_t> idx(n);
  std::vector<int64_t> pos(r, 0);
  int64_t off = 0;
  for (int64_t e = 0; e < n; ++e) {
    idx[e] = off;
    for (size_t k = r; k-- > 0;) {
      if (++pos[k] < out[k]) {
        off += stride[k];
        break;
      }
      off -= stride[k] * (out[k] - 1);
      pos[k] = 0;
    }
  }
  return idx;
}

const HTensor& Need(const std::vector<const HTensor*>& in, size_t k, const Node& n) {
  if (k >= in.size() || !in[k]) {
    throw Error(n.Describe() + ": missing input #" + std::to_string(k));
  }
  return *in[k];
}

std::vector<int64_t> IntsOf(const HTensor& t) {
  std::vector<int64_t> v(t.numel());
  for (int64_t k = 0; k < t.numel(); ++k) v[k] = t.at_i(k);
  return v;
}

}  // namespace ref

namespace {

using ref::Need;

enum class Cmp { kEq, kLt, kGt, kLe, kGe };

void Binary(const Node& n, int64_t, const std::vector<const HTensor*>& in,
            std::vector<HTensor>* out) {
  const HTensor& a = Need(in, 0, n);
  const HTensor& b = Need(in, 1, n);
  const auto shape = BroadcastShapes(a.shape, b.shape, n);
  const auto ia = ref::BroadcastIndex(a.shape, shape);
  const auto ib = ref::BroadcastIndex(b.shape, shape);
  const int64_t N = int64_t(ia.size());
  const std::string& op = n.op;
  HTensor& y = (*out)[0];
  y.shape = shape;
  static const std::map<std::string, Cmp> cmps = {{"Equal", Cmp::kEq},
                                                  {"Less", Cmp::kLt},
                                                  {"Greater", Cmp::kGt},
                                                  {"LessOrEqual", Cmp::kLe},
                                                  {"GreaterOrEqual", Cmp::kGe}};
  if (auto it = cmps.find(op); it != cmps.end()) {
    y.dtype = DT::kBool;
    y.i.resize(N);
    for (int64_t e = 0; e < N; ++e) {
      const double x = a.at_f(ia[e]), z = b.at_f(ib[e]);
      bool r = false;
      switch (it->second) {
        case Cmp::kEq: r = x == z; break;
        case Cmp::kLt: r = x < z; break;
        case Cmp::kGt: r = x > z; break;
        case Cmp::kLe: r = x <= z; break;
        case Cmp::kGe: r = x >= z; break;
      }
      y.i[e] = r;
    }
    return;
  }
  if (op == "And" || op == "Or" || op == "Xor") {
    y.dtype = DT::kBool;
    y.i.resize(N);
    for (int64_t e = 0; e < N; ++e) {
      const bool x = a.at_i(ia[e]) != 0, z = b.at_i(ib[e]) != 0;
      y.i[e] = op == "And" ? (x && z) : op == "Or" ? (x || z) : (x != z);
    }
    return;
  }
  if (a.is_float() || b.is_float()) {
    y.dtype = DT::kF32;
    y.f.resize(N);
    auto run = [&](auto fn) {
      for (int64_t e = 0; e < N; ++e) y.f[e] = fn(float(a.at_f(ia[e])), float(b.at_f(ib[e])));
    };
    if (op == "Add") run([](float x, float z) { return x + z; });
    else if (op == "Sub") run([](float x, float z) { return x - z; });
    else if (op == "Mul") run([](float x, float z) { return x * z; });
    else if (op == "Div") run([](float x, float z) { return x / z; });
    else if (op == "Pow") run([](float x, float z) { return z == 2.f ? x * x : std::pow(x, z); });
    else if (op == "Max") run([](float x, float z) { return std::max(x, z); });
    else if (op == "Min") run([](float x, float z) { return std::min(x, z); });
    else if (op == "Mod") run([](float x, float z) { return std::fmod(x, z); });
    else throw Error(n.Describe() + ": not a float binary op");
    return;
  }
  y.dtype = DT::kI64;
  y.i.resize(N);
  auto run = [&](auto fn) {
    for (int64_t e = 0; e < N; ++e) y.i[e] = fn(a.i[ia[e]], b.i[ib[e]]);
  };
  auto div = [&](int64_t x, int64_t z) {
    if (z == 0) throw Error(n.Describe() + ": integer division by zero");
    return x / z;
  };
  if (op == "Add") run([](int64_t x, int64_t z) { return x + z; });
  else if (op == "Sub") run([](int64_t x, int64_t z) { return x - z; });
  else if (op == "Mul") run([](int64_t x, int64_t z) { return x * z; });
  else if (op == "Div") run(div);
  else if (op == "Pow") run([](int64_t x, int64_t z) { return int64_t(std::pow(x, z)); });
  else if (op == "Max") run([](int64_t x, int64_t z) { return std::max(x, z); });
  else if (op == "Min") run([](int64_t x, int64_t z) { return std::min(x, z); });
  else if (op == "Mod") run([&](int64_t x, int64_t z) { return x - div(x, z) * z; });
  else throw Error(n.Describe() + ": not an integer binary op");
}

void Unary(const Node& n, int64_t, const std::vector<const HTensor*>& in,
           std::vector<HTensor>* out) {
  const HTensor& x = Need(in, 0, n);
  HTensor& y = (*out)[0];
  const std::string& op = n.op;
  if (op == "Identity" || op == "Dropout") {
    y = x;
    if (out->size() > 1) (*out)[1] = HTensor::Bool(x.shape, std::vector<int64_t>(x.numel(), 1));
    return;
  }
  if (op == "Not") {
    y = HTensor::Bool(x.shape, {});
    for (int64_t v : x.i) y.i.push_back(v == 0);
    return;
  }
  if (op == "Neg" && !x.is_float()) {
    y = x;
    for (auto& v : y.i) v = -v;
    return;
  }
  if (op == "Abs" && !x.is_float()) {
    y = x;
    for (auto& v : y.i) v = std::llabs(v);
    return;
  }
  if (!x.is_float()) throw Error(n.Describe() + " needs a float input, got " + DTypeName(x.dtype));
  y = x;
  auto run = [&](auto fn) {
    for (auto& v : y.f) v = fn(v);
  };
  if (op == "Sqrt") run([](float v) { return std::sqrt(v); });
  else if (op == "Erf") run([](float v) { return std::erf(v); });
  else if (op == "Tanh") run([](float v) { return std::tanh(v); });
  else if (op == "Exp") run([](float v) { return std::exp(v); });
  else if (op == "Log") run([](float v) { return std::log(v); });
  else if (op == "Neg") run([](float v) { return -v; });
  else if (op == "Abs") run([](float v) { return std::fabs(v); });
  else if (op == "Reciprocal") run([](float v) { return 1.f / v; });
  else if (op == "Relu") run([](float v) { return v > 0 ? v : 0.f; });
  else if (op == "Sigmoid") run([](float v) { return 1.f / (1.f + std::exp(-v)); });
  else if (op == "Floor") run([](float v) { return std::floor(v); });
  else if (op == "Ceil") run([](float v) { return std::ceil(v); });
  else if (op == "Gelu") {
    if (n.s("approximate", "none") == "tanh") {
      run([](float v) {
        return 0.5f * v * (1.f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v)));
      });
    } else {
      run(RefGelu);
    }
  } else throw Error(n.Describe() + ": not a unary op");
}

void Cast(const Node& n, int64_t, const std::vector<const HTensor*>& in,
          std::vector<HTensor>* out) {
  const HTensor& x = Need(in, 0, n);
  const int64_t to = n.i("to", 1);
  HTensor& y = (*out)[0];
  y.shape = x.shape;
  y.f.clear();
  y.i.clear();
  if (to == 1 || to == 11 || to == 10 || to == 16) {
    y.dtype = DT::kF32;
    y.f.resize(x.numel());
    for (int64_t k = 0; k < x.numel(); ++k) y.f[k] = float(x.at_f(k));
  } else if (to == 9) {
    y.dtype = DT::kBool;
    y.i.resize(x.numel());
    for (int64_t k = 0; k < x.numel(); ++k) y.i[k] = x.at_f(k) != 0;
  } else if (to == 6 || to == 7 || to == 2 || to == 3 || to == 4 || to == 5 || to == 12 ||
             to == 13) {
    y.dtype = DT::kI64;
    y.i.resize(x.numel());
    for (int64_t k = 0; k < x.numel(); ++k) y.i[k] = x.at_i(k);
  } else {
    throw Error(n.Describe() + ": cast to ONNX type " + std::to_string(to) + " is not supported");
  }
}

void Where(const Node& n, int64_t, const std::vector<const HTensor*>& in,
           std::vector<HTensor>* out) {
  const HTensor& c = Need(in, 0, n);
  const HTensor& a = Need(in, 1, n);
  const HTensor& b = Need(in, 2, n);
  const auto shape = BroadcastShapes(BroadcastShapes(c.shape, a.shape, n), b.shape, n);
  const auto ic = ref::BroadcastIndex(c.shape, shape);
  const auto ia = ref::BroadcastIndex(a.shape, shape);
  const auto ib = ref::BroadcastIndex(b.shape, shape);
  HTensor& y = (*out)[0];
  y = HTensor::Zeros(a.dtype, shape);
  for (size_t e = 0; e < ic.size(); ++e) {
    const bool t = c.i[ic[e]] != 0;
    if (y.is_float()) {
      y.f[e] = t ? a.f[ia[e]] : b.f[ib[e]];
    } else {
      y.i[e] = t ? a.i[ia[e]] : b.i[ib[e]];
    }
  }
}

// Copies `x` with a new shape (same element count).
HTensor Reshaped(const HTensor& x, std::vector<int64_t> shape) {
  HTensor y = x;
  y.shape = std::move(shape);
  return y;
}

void Reshape(const Node& n, int64_t, const std::vector<const HTensor*>& in,
             std::vector<HTensor>* out) {
  const HTensor& x = Need(in, 0, n);
  auto shape = ref::IntsOf(Need(in, 1, n));
  const bool allowzero = n.i("allowzero", 0) != 0;
  int64_t known = 1, infer = -1;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == 0 && !allowzero) {
      if (k >= x.shape.size()) throw Error(n.Describe() + ": 0 in shape beyond input rank");
      shape[k] = x.shape[k];
    }
    if (shape[k] == -1) {
      if (infer >= 0) throw Error(n.Describe() + ": more than one -1 in the target shape");
      infer = int64_t(k);
    } else {
      known *= shape[k];
    }
  }
  if (infer >= 0) shape[infer] = known ? x.numel() / known : 0;
  int64_t total = 1;
  for (int64_t d : shape) total *= d;
  if (total != x.numel()) {
    throw Error(n.Describe() + ": cannot reshape " + ShapeString(x.shape) + " to " +
                ShapeString(ref::IntsOf(*in[1])));
  }
  (*out)[0] = Reshaped(x, shape);
}

void Flatten(const Node& n, int64_t, const std::vector<const HTensor*>& in,
             std::vector<HTensor>* out) {
  const HTensor& x = Need(in, 0, n);
  const int64_t r = int64_t(x.shape.size());
  int64_t axis = n.i("axis", 1);
  if (axis < 0) axis += r;
  int64_t a = 1, b = 1;
  for (int64_t k = 0; k < r; ++k) (k < axis ? a : b) *= x.shape[k];
  (*out)[0] = Reshaped(x, {a, b});
}

std::vector<int64_t> AxesOf(const Node& n, int64_t opset, const std::vector<const HTensor*>& in,
                            size_t input_index) {
  if (in.size() > input_index && in[input_index]) return ref::IntsOf(*in[input_index]);
  return n.ints("axes");
}

void Unsqueeze(const Node& n, int64_t opset, const std::vector<const HTensor*>& in,
               std::vector<HTensor>* out) {
  const HTensor& x = Need(in, 0, n);
  auto axes = AxesOf(n, opset, in, 1);
  const int64_t r = int64_t(x.shape.size() + axes.size());
  for (auto& a : axes) a = NormAxis(a, r, n);
  std::sort(axes.begin(), axes.end());
  std::vector<int64_t> shape;
  size_t src = 0, ai = 0;
  for (int64_t k = 0; k < r; ++k) {
    if (ai < axes.size() && axes[ai] == k) {
      shape.push_back(1);
      ++ai;
    } else {
      shape.push_back(x.shape[src++]);
    }
  }
  (*out)[0] = Reshaped(x, shape);
}

void Squeeze(const Node& n, int64_t opset, const std::vector<const HTensor*>& in,
             std::vector<HTensor>* out) {
  const HTensor& x = Need(in, 0, n);
  auto axes = AxesOf(n, opset, in, 1);
  const int64_t r = int64_t(x.shape.size());
  for (auto& a : axes) a = NormAxis(a, r, n);
  std::vector<int64_t> shape;
  for (int64_t k = 0; k < r; ++k) {
    const bool listed = std::find(axes.begin(), axes.end(), k) != axes.end();
    if (listed && x.shape[k] != 1) {
      throw Error(n.Describe() + ": cannot squeeze axis " + std::to_string(k) + " of size " +
                  std::to_string(x.shape[k]));
    }
    if (listed || (axes.empty() && x.shape[k] == 1)) continue;
    shape.push_back(x.shape[k]);
  }
  (*out)[0] = Reshaped(x, shape);
}

void Shape(const Node& n, int64_t, const std::vector<const HTensor*>& in,
           std::vector<HTensor>* out) {
  const HTensor& x = Need(in, 0, n);
  const int64_t r = int64_t(x.shape.size());
  int64_t start = n.i("start", 0), end = n.i("end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, start, r);
  std::vector<int64_t> v(x.shape.begin() + start, x.shape.begin() + end);
  (*out)[0] = HTensor::Int({int64_t(v.size())}, v);
}

void Size(const Node& n, int64_t, const std::vector<const HTensor*>& in,
          std::vector<HTensor>* out) {
  (*out)[0] = HTensor::Int({}, {Need(in, 0, n).numel()});
}

// Generic strided copy: y[idx] = x[src(idx)] where the source index of each output axis is
// start[k] + pos[k] * step[k] along a permutation `perm` of the input axes.
void Transpose(const Node& n, int64_t, const std::vector<const HTensor*>& in,
               std::vector<HTensor>* out) {
  const HTensor& x = Need(in, 0, n);
  const int64_t r = int64_t(x.shape.size());
  auto perm = n.ints("perm");
  if (perm.empty()) {
    for (int64_t k = r - 1; k >= 0; --k) perm.push_back(k);
  }
  if (int64_t(perm.size()) != r) throw Error(n.Describe() + ": perm does not match input rank");
  std::vector<int64_t> in_stride(r, 1), shape(r), stride(r);
  for (int64_t k = r - 2; k >= 0; --k) in_stride[k] = in_stride[k + 1] * x.shape[k + 1];
  for (int64_t k = 0; k < r; ++k) {
    shape[k] = x.shape[NormAxis(perm[k], r, n)];
    stride[k] = in_stride[NormAxis(perm[k], r, n)];
  }
  HTensor y = HTensor::Zeros(x.dtype, shape);
  const int64_t N = y.numel();
  std::vector<int64_t> pos(r, 0);
  int64_t off = 0;
  for (int64_t e = 0; e < N; ++e) {
    if (y.is_float()) y.f[e] = x.f[off]; else y.i[e] = x.i[off];
    for (int64_t k = r - 1; k >= 0; --k) {
      if (++pos[k] < shape[k]) {
        off += stride[k];
        break;
      }
      off -= stride[k] * (shape[k] - 1);
      pos[k] = 0;
    }
  }
  (*out)[0] = std::move(y);
}

void Concat(const Node& n, int64_t, const std::vector<const HTensor*>& in,
            std::vector<HTensor>* out) {
  const HTensor& first = Need(in, 0, n);
  const int64_t r = int64_t(first.shape.size());
  const int64_t axis = NormAxis(n.i("axis", 0), r, n);
  std::vector<int64_t> shape = first.shape;
  shape[axis] = 0;
  for (size_t k = 0; k < in.size(); ++k) {
    const HTensor& t = Need(in, k, n);
    if (int64_t(t.shape.size()) != r || t.dtype != first.dtype) {
      throw Error(n.Describe() + ": inputs differ in rank or dtype");
    }
    for (int64_t d = 0; d < r; ++d) {
      if (d != axis && t.shape[d] != first.shape[d]) {
        throw Error(n.Describe() + ": input shapes " + ShapeString(first.shape) + " and " +
                    ShapeString(t.shape) + " differ outside axis " + std::to_string(axis));
      }
    }
    shape[axis] += t.shape[axis];
  }
  HTensor y = HTensor::Zeros(first.dtype, shape);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= shape[d];
  for (int64_t d = axis + 1; d < r; ++d) inner *= shape[d];
  int64_t col = 0;
  for (const HTensor* t : in) {
    const int64_t chunk = t->shape[axis] * inner;
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t c = 0; c < chunk; ++c) {
        const int64_t dst = o * shape[axis] * inner + col + c;
        if (y.is_float()) y.f[dst] = t->f[o * chunk + c]; else y.i[dst] = t->i[o * chunk + c];
      }
    }
    col += chunk;
  }
  (*out)[0] = std::move(y);
}

void Slice(const Node& n, int64_t opset, const std::vector<const HTensor*>& in,
           std::vector<HTensor>* out) {
  const HTensor& x = Need(in, 0, n);
  const int64_t r = int64_t(x.shape.size());
  std::vector<int64_t> starts, ends, axes, steps;
  if (opset < 10) {
    starts = n.ints("starts");
    ends = n.ints("ends");
    axes = n.ints("axes");
  } else {
    starts = ref::IntsOf(Need(in, 1, n));
    ends = ref::IntsOf(Need(in, 2, n));
    if (in.size() > 3 && in[3]) axes = ref::IntsOf(*in[3]);
    if (in.size() > 4 && in[4]) steps = ref::IntsOf(*in[4]);
  }
  if (axes.empty()) {
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(int64_t(k));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  std::vector<int64_t> st(r, 0), sp(r, 1), shape = x.shape;
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t a = NormAxis(axes[k], r, n);
    const int64_t d = x.shape[a];
    const int64_t step = steps[k];
    if (step == 0) throw Error(n.Describe() + ": step 0");
    int64_t s = starts[k], e = ends[k];
    if (s < 0) s += d;
    if (e < 0) e += d;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, d);
      e = std::clamp<int64_t>(e, 0, d);
      shape[a] = e > s ? (e - s + step - 1) / step : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, d - 1);
      e = std::clamp<int64_t>(e, -1, d - 1);
      shape[a] = s > e ? (s - e - step - 1) / (-step) : 0;
    }
    st[a] = s;
    sp[a] = step;
  }
  std::vector<int64_t> in_stride(r, 1);
  for (int64_t k = r - 2; k >= 0; --k) in_stride[k] = in_stride[k + 1] * x.shape[k + 1];
  HTensor y = HTensor::Zeros(x.dtype, shape);
  const int64_t N = y.numel();
  std::vector<int64_t> pos(r, 0);
  for (int64_t e = 0; e < N; ++e) {
    int64_t off = 0;
    for (int64_t k = 0; k < r; ++k) off += (st[k] + pos[k] * sp[k]) * in_stride[k];
    if (y.is_float()) y.f[e] = x.f[off]; else y.i[e] = x.i[off];
    for (int64_t k = r - 1; k >= 0; --k) {
      if (++pos[k] < shape[k]) break;
      pos[k] = 0;
    }
  }
  (*out)[0] = std::move(y);
}

void Gather(const Node& n, int64_t, const std::vector<const HTensor*>& in,
            std::vector<HTensor>* out) {
  const HTensor& x = Need(in, 0, n);
  const HTensor& idx = Need(in, 1, n);
  if (idx.is_float()) throw Error(n.Describe() + ": indices must be integers, got float32");
  const int64_t r = int64_t(x.shape.size());
  const int64_t axis = NormAxis(n.i("axis", 0), r, n);
  std::vector<int64_t> shape(x.shape.begin(), x.shape.begin() + axis);
  shape.insert(shape.end(), idx.shape.begin(), idx.shape.end());
  shape.insert(shape.end(), x.shape.begin() + axis + 1, x.shape.end());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape[d];
  for (int64_t d = axis + 1; d < r; ++d) inner *= x.shape[d];
  const int64_t dim = x.shape[axis], ni = idx.numel();
  HTensor y = HTensor::Zeros(x.dtype, shape);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < ni; ++j) {
      int64_t v = idx.i[j];
      if (v < 0) v += dim;
      if (v < 0 || v >= dim) {
        throw Error(n.Describe() + ": index " + std::to_string(idx.i[j]) +
                    " is out of range for a dimension of size " + std::to_string(dim));
      }
      const int64_t src = (o * dim + v) * inner, dst = (o * ni + j) * inner;
      if (y.is_float()) {
        std::copy_n(x.f.data() + src, inner, y.f.data() + dst);
      } else {
        std::copy_n(x.i.data() + src, inner, y.i.data() + dst);
      }
    }
  }
  (*out)[0] = std::move(y);
}

void Expand(const Node& n, int64_t, const std::vector<const HTensor*>& in,
            std::vector<HTensor>* out) {
  const HTensor& x = Need(in, 0, n);
  const auto shape = BroadcastShapes(x.shape, ref::IntsOf(Need(in, 1, n)), n);
  const auto ix = ref::BroadcastIndex(x.shape, shape);
  HTensor y = HTensor::Zeros(x.dtype, shape);
  for (size_t e = 0; e < ix.size(); ++e) {
    if (y.is_float()) y.f[e] = x.f[ix[e]]; else y.i[e] = x.i[ix[e]];
  }
  (*out)[0] = std::move(y);
}

void ConstantOfShape(const Node& n, int64_t, const std::vector<const HTensor*>& in,
                     std::vector<HTensor>* out) {
  const auto shape = ref::IntsOf(Need(in, 0, n));
  const HTensor* v = n.t("value");
  HTensor y = HTensor::Zeros(v ? v->dtype : DT::kF32, shape);
  if (v && v->numel() > 0) {
    if (y.is_float()) std::fill(y.f.begin(), y.f.end(), v->f[0]);
    else std::fill(y.i.begin(), y.i.end(), v->i[0]);
  }
  (*out)[0] = std::move(y);
}

void Range(const Node& n, int64_t, const std::vector<const HTensor*>& in,
           std::vector<HTensor>* out) {
  const HTensor& s = Need(in, 0, n);
  const double start = s.at_f(0), limit = Need(in, 1, n).at_f(0), delta = Need(in, 2, n).at_f(0);
  if (delta == 0) throw Error(n.Describe() + ": delta is 0");
  const int64_t count = std::max<int64_t>(int64_t(std::ceil((limit - start) / delta)), 0);
  HTensor y = HTensor::Zeros(s.dtype, {count});
  for (int64_t k = 0; k < count; ++k) {
    if (y.is_float()) y.f[k] = float(start + k * delta); else y.i[k] = int64_t(start + k * delta);
  }
  (*out)[0] = std::move(y);
}

void Clip(const Node& n, int64_t opset, const std::vector<const HTensor*>& in,
          std::vector<HTensor>* out) {
  const HTensor& x = Need(in, 0, n);
  if (!x.is_float()) throw Error(n.Describe() + ": only float Clip is supported");
  float lo = -INFINITY, hi = INFINITY;
  if (opset < 11) {
    lo = n.f("min", lo);
    hi = n.f("max", hi);
  } else {
    if (in.size() > 1 && in[1]) lo = float(in[1]->at_f(0));
    if (in.size() > 2 && in[2]) hi = float(in[2]->at_f(0));
  }
  HTensor y = x;
  for (auto& v : y.f) v = std::clamp(v, lo, hi);
  (*out)[0] = std::move(y);
}

std::map<std::string, ref::RefFn>& Registry() {
  static auto* reg = [] {
    auto* m = new std::map<std::string, ref::RefFn>;
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "Equal", "Less",
                           "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor"}) {
      (*m)[op] = Binary;
    }
    for (const char* op : {"Identity", "Dropout", "Not", "Sqrt", "Erf", "Tanh", "Exp", "Log", "Neg",
                           "Abs", "Reciprocal", "Relu", "Sigmoid", "Floor", "Ceil", "Gelu"}) {
      (*m)[op] = Unary;
    }
    (*m)["Cast"] = Cast;
    (*m)["Where"] = Where;
    (*m)["Reshape"] = Reshape;
    (*m)["Flatten"] = Flatten;
    (*m)["Unsqueeze"] = Unsqueeze;
    (*m)["Squeeze"] = Squeeze;
    (*m)["Shape"] = Shape;
    (*m)["Size"] = Size;
    (*m)["Transpose"] = Transpose;
    (*m)["Concat"] = Concat;
    (*m)["Slice"] = Slice;
    (*m)["Gather"] = Gather;
    (*m)["Expand"] = Expand;
    (*m)["ConstantOfShape"] = ConstantOfShape;
    (*m)["Range"] = Range;
    (*m)["Clip"] = Clip;
    ref::RegisterNnOps(m);
    ref::RegisterMaskOps(m);
    return m;
  }();
  return *reg;
}

}  // namespace

bool IsSupportedOp(const std::string& op) {
  return op == "Constant" || (Registry().count(op) && op.find('.') == std::string::npos &&
                              !ref::IsFusedOp(op));
}

std::vector<std::string> SupportedOps() {
  std::vector<std::string> v{"Constant"};
  for (const auto& [op, fn] : Registry()) {
    if (!ref::IsFusedOp(op)) v.push_back(op);
  }
  std::sort(v.begin(), v.end());
  return v;
}

void RunRefOp(const Node& node, int64_t opset, const std::vector<const HTensor*>& in,
              std::vector<HTensor>* out) {
  auto it = Registry().find(node.op);
  if (it == Registry().end()) {
    throw Error(node.Describe() + ": the generic executor has no implementation of this op",
                Code::kUnimplemented);
  }
  out->resize(std::max<size_t>(node.outputs.size(), 1));
  it->second(node, opset, in, out);
}

}  // namespace hotline::engine
