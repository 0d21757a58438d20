#include "engine/passes.h"

#include <algorithm>
#include <set>

#include "base/error.h"
#include "engine/ref_ops.h"

namespace hotline::engine {

InputRole RoleOf(const std::string& input_name) {
  std::string n = input_name;
  std::transform(n.begin(), n.end(), n.begin(), ::tolower);
  if (n.find("mask") != std::string::npos) return InputRole::kMask;
  if (n.find("position") != std::string::npos) return InputRole::kPositions;
  if (n.find("type") != std::string::npos || n.find("segment") != std::string::npos) {
    return InputRole::kTypes;
  }
  return InputRole::kIds;
}

std::map<std::string, HTensor> RunReference(const Graph& g,
                                            const std::map<std::string, HTensor>& feeds,
                                            bool keep_all) {
  std::map<std::string, const HTensor*> env;
  for (const auto& [name, t] : g.initializers) env[name] = &t;
  for (const auto& in : g.inputs) {
    auto it = feeds.find(in.name);
    if (it == feeds.end()) throw Error("missing input '" + in.name + "'");
    if (it->second.dtype != in.dtype) {
      throw Error("input '" + in.name + "' must be " + DTypeName(in.dtype) + ", got " +
                  DTypeName(it->second.dtype));
    }
    if (!in.dims.empty() && it->second.shape.size() != in.dims.size()) {
      throw Error("input '" + in.name + "' must have rank " + std::to_string(in.dims.size()) +
                  ", got shape " + ShapeString(it->second.shape));
    }
    env[in.name] = &it->second;
  }
  // Last use of each value, to free intermediates early.
  std::map<std::string, size_t> last_use;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    for (const auto& in : g.nodes[k].inputs) last_use[in] = k;
  }
  std::set<std::string> keep;
  for (const auto& o : g.outputs) keep.insert(o.name);
  std::map<std::string, HTensor> values;
  std::vector<const HTensor*> ins;
  std::vector<HTensor> outs;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    ins.clear();
    for (const auto& in : n.inputs) {
      if (in.empty()) {
        ins.push_back(nullptr);
        continue;
      }
      auto it = env.find(in);
      if (it == env.end()) throw Error(n.Describe() + ": value '" + in + "' is not available");
      ins.push_back(it->second);
    }
    outs.clear();
    RunRefOp(n, g.opset, ins, &outs);
    for (size_t o = 0; o < n.outputs.size() && o < outs.size(); ++o) {
      if (n.outputs[o].empty()) continue;
      HTensor& slot = values[n.outputs[o]];
      slot = std::move(outs[o]);
      env[n.outputs[o]] = &slot;
    }
    if (!keep_all) {
      for (const auto& in : n.inputs) {
        if (!in.empty() && last_use[in] == k && values.count(in) && !keep.count(in)) {
          env.erase(in);
          values.erase(in);
        }
      }
    }
  }
  if (keep_all) return values;
  std::map<std::string, HTensor> result;
  for (const auto& o : g.outputs) {
    auto it = env.find(o.name);
    if (it == env.end()) throw Error("graph output '" + o.name + "' was not produced");
    result[o.name] = *it->second;
  }
  return result;
}

int FoldConstants(Graph* g) {
  int folded = 0;
  std::vector<Node> kept;
  for (auto& n : g->nodes) {
    bool all_const = !n.inputs.empty();
    for (const auto& in : n.inputs) {
      if (!in.empty() && !g->IsConst(in)) all_const = false;
    }
    if (!all_const) {
      kept.push_back(std::move(n));
      continue;
    }
    std::vector<const HTensor*> ins;
    for (const auto& in : n.inputs) ins.push_back(in.empty() ? nullptr : g->Const(in));
    std::vector<HTensor> outs;
    RunRefOp(n, g->opset, ins, &outs);
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      if (!n.outputs[o].empty()) g->initializers[n.outputs[o]] = std::move(outs[o]);
    }
    ++folded;
  }
  g->nodes = std::move(kept);
  return folded;
}

int EliminateDeadNodes(Graph* g) {
  std::set<std::string> live;
  for (const auto& o : g->outputs) live.insert(o.name);
  std::vector<bool> keep(g->nodes.size(), false);
  for (size_t k = g->nodes.size(); k-- > 0;) {
    const Node& n = g->nodes[k];
    for (const auto& o : n.outputs) {
      if (live.count(o)) keep[k] = true;
    }
    if (keep[k]) {
      for (const auto& in : n.inputs) live.insert(in);
    }
  }
  std::vector<Node> kept;
  for (size_t k = 0; k < g->nodes.size(); ++k) {
    if (keep[k]) kept.push_back(std::move(g->nodes[k]));
  }
  const int removed = int(g->nodes.size() - kept.size());
  g->nodes = std::move(kept);
  for (auto it = g->initializers.begin(); it != g->initializers.end();) {
    it = live.count(it->first) ? std::next(it) : g->initializers.erase(it);
  }
  return removed;
}

namespace {

// Smallest first dimension of a constant table gathered by `input` (its vocabulary), or `def`.
int64_t TableRows(const Graph& g, const std::string& input, int64_t def) {
  int64_t rows = -1;
  for (const auto& n : g.nodes) {
    if (n.op != "Gather" && n.op != "EmbedLayerNorm") continue;
    if (n.op == "Gather" && n.inputs.size() == 2 && n.inputs[1] == input) {
      if (const HTensor* t = g.Const(n.inputs[0])) {
        rows = rows < 0 ? t->shape[0] : std::min(rows, t->shape[0]);
      }
    }
  }
  return rows > 0 ? rows : def;
}

}  // namespace

std::map<std::string, HTensor> MakeProbeFeeds(const Graph& g, int batch, int seq,
                                              const std::vector<int>& lengths) {
  std::map<std::string, HTensor> feeds;
  for (const auto& in : g.inputs) {
    if (in.dtype == HTensor::DType::kF32) {
      throw Error("graph input '" + in.name + "' is float; the engine feeds token ids, masks and "
                  "token types (integer inputs)");
    }
    HTensor t = HTensor::Zeros(in.dtype, {batch, seq});
    const InputRole role = RoleOf(in.name);
    const int64_t vocab = TableRows(g, in.name, role == InputRole::kTypes ? 2 : 100);
    for (int b = 0; b < batch; ++b) {
      const int len = lengths[b];
      for (int s = 0; s < seq; ++s) {
        int64_t v = 0;
        if (role == InputRole::kMask) {
          v = s < len;
        } else if (role == InputRole::kPositions) {
          v = s;
        } else if (role == InputRole::kTypes) {
          v = (s < len && s >= len / 2) ? std::min<int64_t>(1, vocab - 1) : 0;
        } else {
          v = s < len ? 1 + (7 * b + 13 * s + 3) % std::max<int64_t>(vocab - 1, 1) : 0;
        }
        t.i[b * seq + s] = v;
      }
    }
    feeds[in.name] = std::move(t);
  }
  return feeds;
}

int64_t ShapeInfo::Inner(const std::string& v, size_t lead) const {
  auto it = dims.find(v);
  if (it == dims.end()) return -1;
  int64_t n = 1;
  for (size_t k = lead; k < it->second.size(); ++k) {
    const std::string& d = it->second[k];
    if (d.empty() || !std::isdigit(static_cast<unsigned char>(d[0]))) return -1;
    n *= std::stoll(d);
  }
  return n;
}

ShapeInfo InferShapes(const Graph& g) {
  // The second probe has no full-length row, so a dim that follows the longest sequence rather
  // than the padded length (5 then 6, not 7) is "?", not "seq": shape rewrites may then rely on
  // "seq" being the input's second dim.
  auto v1 = RunReference(g, MakeProbeFeeds(g, 2, 5, {5, 3}), true);
  const auto v2 = RunReference(g, MakeProbeFeeds(g, 3, 7, {6, 4, 2}), true);
  ShapeInfo info;
  auto record = [&](const std::string& name, const std::vector<int64_t>& a,
                    const std::vector<int64_t>& b) {
    std::vector<std::string> dims;
    if (a.size() == b.size()) {
      for (size_t k = 0; k < a.size(); ++k) {
        if (a[k] == b[k]) dims.push_back(std::to_string(a[k]));
        else if (a[k] == 2 && b[k] == 3) dims.push_back("batch");
        else if (a[k] == 5 && b[k] == 7) dims.push_back("seq");
        else if (a[k] == 10 && b[k] == 21) dims.push_back("batch*seq");
        else dims.push_back("?");
      }
    } else {
      dims.assign(a.size(), "?");
    }
    info.dims[name] = dims;
    info.probe[name] = a;
  };
  for (const auto& [name, t] : v1) {
    auto it = v2.find(name);
    if (it != v2.end()) record(name, t.shape, it->second.shape);
  }
  const auto f1 = MakeProbeFeeds(g, 2, 5, {5, 3});
  const auto f2 = MakeProbeFeeds(g, 3, 7, {6, 4, 2});
  for (const auto& in : g.inputs) record(in.name, f1.at(in.name).shape, f2.at(in.name).shape);
  info.values = std::move(v1);
  info.feeds = f1;
  for (const auto& [name, t] : g.initializers) {
    info.dims[name].clear();
    for (int64_t d : t.shape) info.dims[name].push_back(std::to_string(d));
    info.probe[name] = t.shape;
  }
  return info;
}

namespace {

bool IsStaticDim(const std::string& d) {
  return !d.empty() && std::isdigit(static_cast<unsigned char>(d[0]));
}

Node NewNode(const std::string& name, const std::string& op, std::vector<std::string> in,
             std::vector<std::string> out) {
  Node n;
  n.name = name;
  n.op = op;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

// The dims a Shape node reports (its start/end attributes applied).
std::vector<std::string> ShapeDims(const Node& n, const std::vector<std::string>& dims) {
  const int64_t r = int64_t(dims.size());
  int64_t start = n.i("start", 0), end = n.i("end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, start, r);
  return {dims.begin() + start, dims.begin() + end};
}

}  // namespace

int RewireShapes(Graph* g, const ShapeInfo& s) {
  if (g->inputs.empty()) return 0;
  const std::string src = g->inputs[0].name;  // [batch, seq] (checked by the builder)
  const auto consumers = g->Consumers();
  int rewritten = 0;
  std::vector<Node> out;
  std::string src_shape;  // Shape(src), made once
  auto dim_of_src = [&](const std::string& sym, const std::string& base,
                        std::vector<Node>* add) -> std::string {
    if (src_shape.empty()) {
      src_shape = "/hotline/input_shape";
      add->push_back(NewNode(src_shape, "Shape", {src}, {src_shape}));
    }
    const std::string idx = base + "/" + sym + "_index";
    g->initializers[idx] = HTensor::Int({1}, {sym == "batch" ? 0 : 1});
    const std::string v = base + "/" + sym;
    Node ga = NewNode(v, "Gather", {src_shape, idx}, {v});
    ga.attrs["axis"] = Attr{int64_t(0)};
    add->push_back(ga);
    return v;
  };
  // Constant-selecting consumers of a Shape: Gather(shape, const idx) and Slice(shape, const …).
  std::map<int, HTensor> folded;  // consumer node index → its constant output
  for (size_t k = 0; k < g->nodes.size(); ++k) {
    const Node& n = g->nodes[k];
    if (n.op != "Shape" || !s.Has(n.inputs[0]) || g->IsInput(n.inputs[0])) continue;
    const auto dims = ShapeDims(n, s.dims.at(n.inputs[0]));
    auto it = consumers.find(n.outputs[0]);
    if (it == consumers.end()) continue;
    for (int c : it->second) {
      if (c < 0) continue;
      const Node& u = g->nodes[c];
      if (u.inputs.empty() || u.inputs[0] != n.outputs[0]) continue;
      std::vector<int64_t> picked;
      if (u.op == "Gather" && u.inputs.size() == 2 && g->Const(u.inputs[1])) {
        const HTensor& ix = *g->Const(u.inputs[1]);
        bool ok = !ix.is_float() && ix.shape.size() <= 1;
        for (int64_t e = 0; ok && e < ix.numel(); ++e) {
          int64_t v = ix.i[e] < 0 ? ix.i[e] + int64_t(dims.size()) : ix.i[e];
          ok = v >= 0 && v < int64_t(dims.size()) && IsStaticDim(dims[v]);
          if (ok) picked.push_back(std::stoll(dims[v]));
        }
        if (ok) folded[c] = ix.shape.empty() ? HTensor::Int({}, picked)
                                             : HTensor::Int({int64_t(picked.size())}, picked);
      } else if (u.op == "Slice" && g->opset >= 10 && u.inputs.size() >= 3 &&
                 g->Const(u.inputs[1]) && g->Const(u.inputs[2]) &&
                 (u.inputs.size() < 4 || u.inputs[3].empty() || g->Const(u.inputs[3])) &&
                 (u.inputs.size() < 5 || u.inputs[4].empty() || g->Const(u.inputs[4]))) {
        // Run the Slice on the dims' positions and check that it picks static ones only.
        std::vector<int64_t> pos(dims.size());
        for (size_t d = 0; d < dims.size(); ++d) pos[d] = int64_t(d);
        std::vector<const HTensor*> ins;
        HTensor p = HTensor::Int({int64_t(pos.size())}, pos);
        ins.push_back(&p);
        for (size_t a = 1; a < u.inputs.size(); ++a) {
          ins.push_back(u.inputs[a].empty() ? nullptr : g->Const(u.inputs[a]));
        }
        std::vector<HTensor> r(1);
        RunRefOp(u, g->opset, ins, &r);
        bool ok = true;
        for (int64_t v : r[0].i) {
          ok = ok && IsStaticDim(dims[v]);
          if (ok) picked.push_back(std::stoll(dims[v]));
        }
        if (ok) folded[c] = HTensor::Int(r[0].shape, picked);
      }
    }
  }
  for (size_t k = 0; k < g->nodes.size(); ++k) {
    Node& n = g->nodes[k];
    if (auto f = folded.find(int(k)); f != folded.end()) {
      g->initializers[n.outputs[0]] = f->second;
      ++rewritten;
      continue;
    }
    if (n.op != "Shape" || !s.Has(n.inputs[0]) || g->IsInput(n.inputs[0])) {
      out.push_back(std::move(n));
      continue;
    }
    const auto dims = ShapeDims(n, s.dims.at(n.inputs[0]));
    bool all_static = true, known = true;
    for (const auto& d : dims) {
      all_static = all_static && IsStaticDim(d);
      known = known && (IsStaticDim(d) || d == "batch" || d == "seq");
    }
    if (all_static) {
      std::vector<int64_t> v;
      for (const auto& d : dims) v.push_back(std::stoll(d));
      g->initializers[n.outputs[0]] = HTensor::Int({int64_t(v.size())}, v);
      ++rewritten;
      continue;
    }
    if (!known) {
      out.push_back(std::move(n));
      continue;
    }
    // Concat of the input's batch/seq and constants, one piece per dim.
    std::vector<std::string> pieces;
    for (size_t d = 0; d < dims.size(); ++d) {
      if (IsStaticDim(dims[d])) {
        const std::string c = n.name + "/dim" + std::to_string(d);
        g->initializers[c] = HTensor::Int({1}, {std::stoll(dims[d])});
        pieces.push_back(c);
      } else {
        pieces.push_back(dim_of_src(dims[d], n.name + "/dim" + std::to_string(d), &out));
      }
    }
    Node cat = NewNode(n.name + "/from_input", "Concat", pieces, {n.outputs[0]});
    cat.attrs["axis"] = Attr{int64_t(0)};
    out.push_back(cat);
    ++rewritten;
  }
  g->nodes = std::move(out);
  return rewritten;
}

}  // namespace hotline::engine
