#include "engine/qdq.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "base/error.h"

namespace hotline::engine {
namespace {

constexpr int kOnnxUint8 = 2, kOnnxInt8 = 3, kOnnxInt32 = 6;

bool IsQ(const Node& n) { return n.op == "QuantizeLinear"; }
bool IsDQ(const Node& n) { return n.op == "DequantizeLinear"; }

// Scale, zero point and quantised range of one Q or DQ node (all constants).
struct QParams {
  std::vector<float> scale;
  std::vector<int64_t> zero;  // same size as scale
  int64_t axis = -1;          // -1: per tensor
  int64_t qmin = 0, qmax = 255;
  int elem = kOnnxUint8;

  bool Same(const QParams& o) const {
    return scale == o.scale && zero == o.zero && axis == o.axis && elem == o.elem;
  }
  bool Symmetric() const {
    for (int64_t z : zero)
      if (!((elem == kOnnxInt8 && z == 0) || (elem == kOnnxUint8 && z == 128))) return false;
    return true;
  }
};

QParams ReadParams(const Graph& g, const Node& n, int64_t data_rank,
                   const std::map<std::string, int>& elem_types) {
  if (n.inputs.size() < 2 || n.inputs[1].empty()) {
    throw Error(n.Describe() + " has no scale input");
  }
  if (n.has("block_size") && n.i("block_size", 0) != 0) {
    throw Error(n.Describe() + ": blocked quantisation (block_size " +
                std::to_string(n.i("block_size", 0)) + ") is not supported; expected per-tensor "
                "or per-channel scales", Code::kUnimplemented);
  }
  const HTensor* s = g.Const(n.inputs[1]);
  if (!s || !s->is_float()) {
    throw Error(n.Describe() + ": scale '" + n.inputs[1] +
                "' must be a float constant (scales computed at run time are not supported)");
  }
  QParams p;
  p.scale = s->f;
  for (float v : p.scale) {
    if (!(v > 0) || !std::isfinite(v)) {
      throw Error(n.Describe() + ": scale '" + n.inputs[1] + "' holds " + std::to_string(v) +
                  ", expected positive finite scales");
    }
  }
  if (s->shape.size() > 1) {
    throw Error(n.Describe() + ": scale has shape " + ShapeString(s->shape) +
                ", expected a scalar or a 1-D per-channel vector");
  }
  if (s->numel() == 0) throw Error(n.Describe() + ": scale '" + n.inputs[1] + "' is empty");
  if (s->shape.size() == 1 && s->numel() > 1) {
    p.axis = n.i("axis", 1);
    if (data_rank >= 0) {
      if (p.axis < -data_rank || p.axis >= data_rank) {
        throw Error(n.Describe() + ": axis " + std::to_string(p.axis) + " outside rank " +
                    std::to_string(data_rank));
      }
      if (p.axis < 0) p.axis += data_rank;
    }
  }
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    const HTensor* z = g.Const(n.inputs[2]);
    if (!z || z->is_float() || z->numel() != s->numel()) {
      throw Error(n.Describe() + ": zero point '" + n.inputs[2] +
                  "' must be an integer constant with as many values as the scale (" +
                  std::to_string(s->numel()) + ")");
    }
    p.zero = z->i;
    auto it = elem_types.find(n.inputs[2]);
    p.elem = it == elem_types.end() ? kOnnxUint8 : it->second;
  } else {
    p.zero.assign(p.scale.size(), 0);
    p.elem = kOnnxUint8;  // ONNX: without a zero point, Q produces uint8
  }
  if (p.elem == kOnnxInt8) {
    p.qmin = -128;
    p.qmax = 127;
  } else if (p.elem == kOnnxUint8) {
    p.qmin = 0;
    p.qmax = 255;
  } else if (p.elem == kOnnxInt32) {
    p.qmin = INT32_MIN;
    p.qmax = INT32_MAX;
  } else {
    throw Error(n.Describe() + ": zero point has ONNX element type " + std::to_string(p.elem) +
                    ", the engine imports int8, uint8 and int32 quantisation",
                Code::kUnimplemented);
  }
  return p;
}

// Index along `axis` of flat element k of a tensor of `shape`.
int64_t ChannelOf(const std::vector<int64_t>& shape, int64_t axis, int64_t k) {
  int64_t inner = 1;
  for (size_t d = size_t(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  return (k / inner) % shape[size_t(axis)];
}

void CheckChannels(const Node& n, const QParams& p, const std::vector<int64_t>& shape) {
  if (p.axis >= 0 && (size_t(p.axis) >= shape.size() || shape[p.axis] != int64_t(p.scale.size()))) {
    throw Error(n.Describe() + ": " + std::to_string(p.scale.size()) +
                " per-channel scales do not match axis " + std::to_string(p.axis) +
                " of a tensor of shape " + ShapeString(shape));
  }
}

// (q - zp) * scale of an integer constant.
HTensor Dequantize(const Node& n, const HTensor& q, const QParams& p) {
  if (q.is_float()) throw Error(n.Describe() + ": input is float, expected quantised integers");
  CheckChannels(n, p, q.shape);
  HTensor out = HTensor::Zeros(HTensor::DType::kF32, q.shape);
  for (int64_t k = 0; k < q.numel(); ++k) {
    const int64_t c = p.axis >= 0 ? ChannelOf(q.shape, p.axis, k) : 0;
    out.f[k] = float(double(q.i[k] - p.zero[c]) * double(p.scale[c]));
  }
  return out;
}

// DQ(Q(x)) of a float constant: ONNX's rounding (half to even) and saturation.
HTensor FakeQuantize(const Node& n, const HTensor& x, const QParams& p) {
  if (!x.is_float()) throw Error(n.Describe() + ": input must be float");
  CheckChannels(n, p, x.shape);
  HTensor out = HTensor::Zeros(HTensor::DType::kF32, x.shape);
  for (int64_t k = 0; k < x.numel(); ++k) {
    const int64_t c = p.axis >= 0 ? ChannelOf(x.shape, p.axis, k) : 0;
    double q = std::nearbyint(double(x.f[k]) / double(p.scale[c])) + double(p.zero[c]);
    q = std::clamp(q, double(p.qmin), double(p.qmax));
    out.f[k] = float((q - double(p.zero[c])) * double(p.scale[c]));
  }
  return out;
}

QdqWeightScales WeightScales(const QParams& p) {
  QdqWeightScales w;
  w.scale = p.scale;
  w.axis = p.axis;
  w.symmetric = true;
  for (int64_t z : p.zero)
    if (z != 0) w.symmetric = false;
  return w;
}

// Resolves a chain of renames a → b → c.
std::string Resolve(const std::map<std::string, std::string>& subst, std::string v) {
  for (int guard = 0; guard < 1000; ++guard) {
    auto it = subst.find(v);
    if (it == subst.end()) return v;
    v = it->second;
  }
  throw Error("Q/DQ removal: cyclic renaming at '" + v + "'", Code::kInternal);
}

}  // namespace

QdqInfo StripQdq(Graph* g, const std::map<std::string, int>& elem_types) {
  QdqInfo info;
  bool any = false;
  for (const Node& n : g->nodes) any = any || IsQ(n) || IsDQ(n);
  if (!any) return info;

  std::set<std::string> graph_outputs, graph_inputs;
  for (const auto& o : g->outputs) graph_outputs.insert(o.name);
  for (const auto& i : g->inputs) graph_inputs.insert(i.name);
  const auto consumers = g->Consumers();
  auto users = [&](const std::string& v) -> std::vector<int> {
    auto it = consumers.find(v);
    return it == consumers.end() ? std::vector<int>{} : it->second;
  };

  std::vector<bool> removed(g->nodes.size(), false);
  std::map<std::string, std::string> subst;  // value → the value that replaces it
  std::map<std::string, std::string> rename_output;  // producer output X → graph output name

  for (size_t k = 0; k < g->nodes.size(); ++k) {
    const Node& n = g->nodes[k];
    if (removed[k]) continue;
    if (IsDQ(n)) {
      // A DQ reached here has no Q before it (pairs are handled from the Q side): only a
      // constant can be dequantised at import.
      const HTensor* q = g->Const(n.inputs.empty() ? "" : n.inputs[0]);
      if (!q) {
        throw Error(n.Describe() + " dequantises '" + (n.inputs.empty() ? "" : n.inputs[0]) +
                        "', which is neither a constant nor the output of a QuantizeLinear: "
                        "only QDQ-format models (Q/DQ pairs, quantised weights) are imported",
                    Code::kUnimplemented);
      }
      const QParams p = ReadParams(*g, n, int64_t(q->shape.size()), elem_types);
      g->initializers[n.outputs.at(0)] = Dequantize(n, *q, p);
      auto et = elem_types.find(n.inputs[0]);
      const bool is_bias = et != elem_types.end() && et->second == kOnnxInt32;
      if (!is_bias) info.weights[n.outputs[0]] = WeightScales(p);
      ++info.weights_folded;
      removed[k] = true;
      continue;
    }
    if (!IsQ(n)) continue;
    const std::string x = n.inputs.empty() ? "" : n.inputs[0];
    const std::string qv = n.outputs.at(0);
    const std::vector<int> q_users = users(qv);
    if (q_users.empty() || graph_outputs.count(qv)) {
      throw Error(n.Describe() + ": its quantised output '" + qv +
                      "' is not read by DequantizeLinear nodes only; the engine imports QDQ "
                      "pairs, not integer-typed graphs (QOperator format)",
                  Code::kUnimplemented);
    }
    for (int u : q_users) {
      if (u < 0 || !IsDQ(g->nodes[u]) || g->nodes[u].inputs[0] != qv) {
        throw Error(n.Describe() + ": its quantised output '" + qv + "' is read by " +
                        (u < 0 ? std::string("the graph outputs") : g->nodes[u].Describe()) +
                        "; the engine imports QDQ pairs (QuantizeLinear → DequantizeLinear) only",
                    Code::kUnimplemented);
      }
    }
    const HTensor* xc = g->Const(x);
    const QParams p = ReadParams(*g, n, xc ? int64_t(xc->shape.size()) : -1, elem_types);
    for (int u : q_users) {
      const Node& dq = g->nodes[u];
      const QParams pd = ReadParams(*g, dq, xc ? int64_t(xc->shape.size()) : -1, elem_types);
      if (!p.Same(pd)) {
        throw Error(n.Describe() + " and " + dq.Describe() +
                    " disagree on scale, zero point or axis; a QDQ pair must use the same ones");
      }
      removed[u] = true;
    }
    removed[k] = true;
    if (xc) {  // fake-quantised constant (QAT exports keep fp32 weights behind a Q→DQ pair)
      const HTensor fq = FakeQuantize(n, *xc, p);
      for (int u : q_users) {
        g->initializers[g->nodes[u].outputs.at(0)] = fq;
        info.weights[g->nodes[u].outputs[0]] = WeightScales(p);
      }
      ++info.weights_folded;
      continue;
    }
    // An activation pair: consumers of the DQ outputs read x (or the graph output's name).
    std::string target = x;
    for (int u : q_users) {
      const std::string& y = g->nodes[u].outputs.at(0);
      if (graph_outputs.count(y)) {
        if (target != x) {
          throw Error(n.Describe() + " feeds two graph outputs ('" + target + "', '" + y +
                      "') through DequantizeLinear; cannot keep both names");
        }
        if (graph_inputs.count(x) || graph_outputs.count(x)) {
          throw Error(n.Describe() + ": '" + x + "' is a graph input or output and its "
                      "dequantised copy '" + y + "' is a graph output; cannot merge them");
        }
        target = y;
      }
    }
    if (target != x) rename_output[x] = target;
    for (int u : q_users) {
      const std::string& y = g->nodes[u].outputs[0];
      if (y != target) subst[y] = target;
    }
    float amax = 0;
    if (p.scale.size() > 1) {
      info.notes.push_back(n.Describe() + ": per-channel activation scales; the largest is used "
                           "for the per-tensor range");
    }
    for (size_t c = 0; c < p.scale.size(); ++c) {
      const float span = p.Symmetric()
                             ? 127.f
                             : float(std::max(p.zero[c] - p.qmin, p.qmax - p.zero[c]));
      amax = std::max(amax, span * p.scale[c]);
    }
    if (!p.Symmetric()) {
      info.notes.push_back(n.Describe() + ": asymmetric activation quantisation (zero point " +
                           std::to_string(p.zero[0]) + ") widened to the symmetric range ±" +
                           std::to_string(amax));
    }
    info.activation_amax[target] = amax;
    ++info.pairs_removed;
  }

  // Rewrite: drop removed nodes, rename producer outputs, substitute consumers' inputs.
  std::vector<Node> kept;
  kept.reserve(g->nodes.size());
  for (size_t k = 0; k < g->nodes.size(); ++k) {
    if (removed[k]) continue;
    Node n = std::move(g->nodes[k]);
    for (auto& o : n.outputs) {
      auto it = rename_output.find(o);
      if (it != rename_output.end()) o = it->second;
    }
    for (auto& in : n.inputs) {
      if (in.empty()) continue;
      auto it = rename_output.find(in);
      if (it != rename_output.end()) in = it->second;
      in = Resolve(subst, in);
    }
    kept.push_back(std::move(n));
  }
  g->nodes = std::move(kept);
  for (auto& o : g->outputs) o.name = Resolve(subst, o.name);
  // Constants only the removed nodes read (int8 weights, scales, zero points).
  std::set<std::string> used;
  for (const Node& n : g->nodes)
    for (const auto& in : n.inputs) used.insert(in);
  for (const auto& o : g->outputs) used.insert(o.name);
  for (auto it = g->initializers.begin(); it != g->initializers.end();) {
    it = used.count(it->first) ? std::next(it) : g->initializers.erase(it);
  }
  for (auto it = info.weights.begin(); it != info.weights.end();) {
    it = used.count(it->first) ? std::next(it) : info.weights.erase(it);
  }
  // Pairs in a row (X → Q → DQ → Y → Q → DQ → Z) keyed their ranges by names renamed since.
  std::map<std::string, float> amax;
  for (const auto& [v, a] : info.activation_amax) {
    auto it = rename_output.find(v);
    const std::string key = Resolve(subst, it == rename_output.end() ? v : it->second);
    amax[key] = amax.count(key) ? std::min(amax[key], a) : a;
  }
  info.activation_amax = std::move(amax);
  return info;
}

}  // namespace hotline::engine
