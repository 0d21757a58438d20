#include "engine/fusion.h"

#include <cmath>
#include <functional>
#include <optional>
#include <set>

#include "base/error.h"
#include "engine/fusion_internal.h"

namespace hotline::engine {
using namespace fusion;  // NOLINT: the passes' internal helpers

namespace {

// ---- canonicalisation ----

void LayerNorms(Rewriter& rw, const ShapeInfo& s) {
  Graph& g = *rw.g();
  for (const Node& n : g.nodes) {
    if (n.op == "LayerNormalization") {
      const int64_t H = LastDim(s, n.inputs[0]);
      auto axes = s.dims.count(n.inputs[0]) ? s.dims.at(n.inputs[0]).size() : 0;
      const int64_t axis = n.i("axis", -1);
      if (H <= 0 || !(axis == -1 || axis == int64_t(axes) - 1) || !g.IsConst(n.inputs[1])) continue;
      std::string beta = n.inputs.size() > 2 && !n.inputs[2].empty()
                             ? n.inputs[2] : rw.NewConst(n.name + "/beta", Filled(H, 0.f));
      if (!g.IsConst(beta)) continue;
      Node ln = MakeNode(n.name, "LayerNorm", {n.inputs[0], n.inputs[1], beta}, {n.outputs[0]});
      ln.attrs["epsilon"] = Attr{n.f("epsilon", 1e-5f)};
      rw.Replace(&n, {ln});
      continue;
    }
    if (n.op != "Div") continue;
    // Div(d = x - mean(x), sqrt(mean(d^2) + eps))
    const Node* sub = rw.ProdOp(n.inputs[0], "Sub");
    const Node* sq = rw.ProdOp(n.inputs[1], "Sqrt");
    if (!sub || !sq) continue;
    const std::string x = sub->inputs[0];
    const Node* mean = rw.ProdOp(sub->inputs[1], "ReduceMean");
    if (!mean || mean->inputs[0] != x || !LastAxisOnly(*mean, g, s)) continue;
    const Node* add = rw.ProdOp(sq->inputs[0], "Add");
    if (!add) continue;
    const Node* var = nullptr;
    std::optional<float> eps;
    for (int k = 0; k < 2; ++k) {
      if ((var = rw.ProdOp(add->inputs[k], "ReduceMean")) && (eps = rw.Scalar(add->inputs[1 - k]))) break;
      var = nullptr;
    }
    if (!var || !LastAxisOnly(*var, g, s)) continue;
    const Node* pow = rw.ProdOp(var->inputs[0], "Pow");
    const Node* mul_sq = rw.ProdOp(var->inputs[0], "Mul");
    const bool squares = (pow && pow->inputs[0] == n.inputs[0] && Near(rw.Scalar(pow->inputs[1]), 2.f)) ||
                         (mul_sq && mul_sq->inputs[0] == n.inputs[0] && mul_sq->inputs[1] == n.inputs[0]);
    if (!squares) continue;
    const int64_t H = LastDim(s, x);
    if (H <= 0) continue;
    // Optional affine: Mul(gamma) then Add(beta), each with a constant [H] operand.
    std::string out = n.outputs[0], gamma, beta;
    const Node* last = &n;
    if (const Node* mg = rw.OnlyConsumer(out, "Mul")) {
      std::string o = Rewriter::Other(*mg, out);
      if (g.IsConst(o) && g.Const(o)->numel() == H) {
        gamma = o;
        out = mg->outputs[0];
        last = mg;
        if (const Node* ab = rw.OnlyConsumer(out, "Add")) {
          std::string b = Rewriter::Other(*ab, out);
          if (g.IsConst(b) && g.Const(b)->numel() == H) {
            beta = b;
            out = ab->outputs[0];
            last = ab;
          }
        }
      }
    }
    if (gamma.empty()) gamma = rw.NewConst(n.name + "/gamma", Filled(H, 1.f));
    if (beta.empty()) beta = rw.NewConst(n.name + "/beta", Filled(H, 0.f));
    Node ln = MakeNode(n.name + "/LayerNorm", "LayerNorm", {x, gamma, beta}, {out});
    ln.attrs["epsilon"] = Attr{*eps};
    rw.Replace(last, {ln});
  }
  rw.Commit();
}

void Gelus(Rewriter& rw) {
  Graph& g = *rw.g();
  for (const Node& erf : g.nodes) {
    if (erf.op != "Erf") continue;
    const Node* scale = rw.Prod(erf.inputs[0]);
    if (!scale || !rw.SingleUse(erf.inputs[0])) continue;
    std::string x;
    if (scale->op == "Div" && Near(rw.Scalar(scale->inputs[1]), 1.41421356f)) x = scale->inputs[0];
    if (scale->op == "Mul") {
      for (int k = 0; k < 2; ++k) {
        if (Near(rw.Scalar(scale->inputs[k]), 0.70710678f)) x = scale->inputs[1 - k];
      }
    }
    if (x.empty()) continue;
    const Node* add = rw.OnlyConsumer(erf.outputs[0], "Add");
    if (!add || !Near(rw.Scalar(Rewriter::Other(*add, erf.outputs[0])), 1.f)) continue;
    const std::string a = add->outputs[0];
    const Node* m1 = rw.OnlyConsumer(a, "Mul");
    if (!m1) continue;
    const std::string o1 = Rewriter::Other(*m1, a);
    const Node* last = nullptr;
    if (o1 == x) {  // (x * a) * 0.5
      const Node* m2 = rw.OnlyConsumer(m1->outputs[0], "Mul");
      if (m2 && Near(rw.Scalar(Rewriter::Other(*m2, m1->outputs[0])), 0.5f)) last = m2;
    } else if (Near(rw.Scalar(o1), 0.5f)) {  // x * (a * 0.5)
      const Node* m2 = rw.OnlyConsumer(m1->outputs[0], "Mul");
      if (m2 && Rewriter::Other(*m2, m1->outputs[0]) == x) last = m2;
    } else if (const Node* h = rw.ProdOp(o1, "Mul")) {  // (x * 0.5) * a
      if (Rewriter::Other(*h, x) != "" && Near(rw.Scalar(Rewriter::Other(*h, x)), 0.5f) &&
          rw.SingleUse(o1)) {
        last = m1;
      }
    }
    if (!last) continue;
    rw.Replace(last, {MakeNode(erf.name + "/Gelu", "Gelu", {x}, {last->outputs[0]})});
  }
  rw.Commit();
}

// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) → Gelu(approximate="tanh") (gelu_new,
// gelu_pytorch_tanh), in the orders the exporters write it.
void TanhGelus(Rewriter& rw) {
  Graph& g = *rw.g();
  auto scaled = [&](const std::string& v, float c, std::string* other) -> const Node* {
    const Node* m = rw.ProdOp(v, "Mul");
    if (!m || !rw.SingleUse(v)) return nullptr;
    for (int k = 0; k < 2; ++k) {
      if (Near(rw.Scalar(m->inputs[k]), c, 1e-4f)) {
        *other = m->inputs[1 - k];
        return m;
      }
    }
    return nullptr;
  };
  for (const Node& t : g.nodes) {
    if (t.op != "Tanh") continue;
    std::string a, m, x;
    if (!scaled(t.inputs[0], 0.7978845608f, &a)) continue;
    const Node* add = rw.ProdOp(a, "Add");
    if (!add || !rw.SingleUse(a)) continue;
    for (int k = 0; k < 2 && x.empty(); ++k) {
      std::string p;
      if (!scaled(add->inputs[k], 0.044715f, &p)) continue;
      const Node* pw = rw.ProdOp(p, "Pow");
      if (pw && rw.SingleUse(p) && Near(rw.Scalar(pw->inputs[1]), 3.f) &&
          pw->inputs[0] == add->inputs[1 - k]) {
        x = pw->inputs[0];
      }
    }
    if (x.empty()) continue;
    const Node* u = rw.OnlyConsumer(t.outputs[0], "Add");
    if (!u || !Near(rw.Scalar(Rewriter::Other(*u, t.outputs[0])), 1.f)) continue;
    const Node* m1 = rw.OnlyConsumer(u->outputs[0], "Mul");
    if (!m1) continue;
    const std::string o1 = Rewriter::Other(*m1, u->outputs[0]);
    const Node* last = nullptr;
    std::string half;
    if (o1 == x) {  // (x * u) * 0.5
      const Node* m2 = rw.OnlyConsumer(m1->outputs[0], "Mul");
      if (m2 && Near(rw.Scalar(Rewriter::Other(*m2, m1->outputs[0])), 0.5f)) last = m2;
    } else if (Near(rw.Scalar(o1), 0.5f)) {  // x * (u * 0.5)
      const Node* m2 = rw.OnlyConsumer(m1->outputs[0], "Mul");
      if (m2 && Rewriter::Other(*m2, m1->outputs[0]) == x) last = m2;
    } else if (scaled(o1, 0.5f, &half) && half == x) {  // (x * 0.5) * u
      last = m1;
    }
    if (!last) continue;
    Node gelu = MakeNode(t.name + "/Gelu", "Gelu", {x}, {last->outputs[0]});
    gelu.attrs["approximate"] = Attr{std::string("tanh")};
    rw.Replace(last, {gelu});
  }
  rw.Commit();
}

void Denses(Rewriter& rw) {
  Graph& g = *rw.g();
  for (const Node& n : g.nodes) {
    if (n.op == "MatMul") {
      const HTensor* w = g.Const(n.inputs[1]);
      if (!w || w->shape.size() != 2 || !w->is_float() || g.IsConst(n.inputs[0])) continue;
      const int64_t N = w->shape[1];
      std::string bias, out = n.outputs[0];
      const Node* last = &n;
      if (const Node* add = rw.OnlyConsumer(out, "Add")) {
        std::string b = Rewriter::Other(*add, out);
        const HTensor* bt = g.Const(b);
        if (bt && bt->is_float() && bt->numel() == N && bt->shape.size() <= 1) {
          bias = b;
          out = add->outputs[0];
          last = add;
        }
      }
      rw.Replace(last, {MakeNode(n.name + "/Dense", "Dense", {n.inputs[0], n.inputs[1], bias}, {out})});
    } else if (n.op == "Gemm") {
      const HTensor* b = g.Const(n.inputs[1]);
      if (!b || n.i("transA", 0) || n.f("alpha", 1.f) != 1.f || g.IsConst(n.inputs[0])) continue;
      HTensor w = *b;
      if (n.i("transB", 0)) {
        const int64_t N = b->shape[0], K = b->shape[1];
        w.shape = {K, N};
        for (int64_t k = 0; k < K; ++k) {
          for (int64_t j = 0; j < N; ++j) w.f[k * N + j] = b->f[j * K + k];
        }
      }
      const int64_t N = w.shape[1];
      std::string bias;
      if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
        const HTensor* c = g.Const(n.inputs[2]);
        if (!c || !c->is_float()) continue;
        HTensor bt = Filled(N, 0.f);
        const float beta = n.f("beta", 1.f);
        if (c->numel() == N) {
          for (int64_t j = 0; j < N; ++j) bt.f[j] = beta * c->f[j];
        } else if (c->numel() == 1) {
          for (int64_t j = 0; j < N; ++j) bt.f[j] = beta * c->f[0];
        } else {
          continue;
        }
        bias = rw.NewConst(n.name + "/bias", std::move(bt));
      }
      const std::string wname = rw.NewConst(n.name + "/weight_kn", std::move(w));
      rw.Replace(&n, {MakeNode(n.name + "/Dense", "Dense", {n.inputs[0], wname, bias}, {n.outputs[0]})});
    }
  }
  rw.Commit();
  // Dense + activation → epilogue.
  for (const Node& n : g.nodes) {
    if (n.op != "Dense" || n.has("epilogue") || n.inputs.size() > 3) continue;
    const Node* act = rw.OnlyConsumer(n.outputs[0]);
    if (!act) continue;
    std::string epi;
    if (act->op == "Gelu" && act->s("approximate", "none") == "none") epi = "gelu";
    if (act->op == "Tanh") epi = "tanh";
    if (epi.empty()) continue;
    Node d = n;
    d.attrs["epilogue"] = Attr{epi};
    d.outputs = act->outputs;
    rw.Kill(&n);
    rw.Replace(act, {d});
  }
  rw.Commit();
}

// LayerNorm(Add(a, r)) → LayerNorm(a, residual r), or DenseLayerNorm when a is a plain Dense.
void ResidualLayerNorms(Rewriter& rw, const ShapeInfo& s, bool fuse_dense) {
  Graph& g = *rw.g();
  for (const Node& ln : g.nodes) {
    if (ln.op != "LayerNorm" || ln.inputs.size() != 3) continue;
    const Node* add = rw.ProdOp(ln.inputs[0], "Add");
    if (!add || !rw.SingleUse(ln.inputs[0]) || g.IsConst(add->inputs[0]) ||
        g.IsConst(add->inputs[1])) {
      continue;
    }
    if (!s.Has(add->inputs[0]) || !s.Has(add->inputs[1]) ||
        s.dims.at(add->inputs[0]) != s.dims.at(add->inputs[1])) {
      continue;  // a broadcasting add is not a residual
    }
    for (int k = 0; k < 2; ++k) {
      const Node* d = fuse_dense ? rw.ProdOp(add->inputs[k], "Dense") : nullptr;
      if (d && rw.SingleUse(add->inputs[k]) && !d->has("epilogue") && d->inputs.size() <= 3) {
        Node f = MakeNode(d->name + "/DenseLayerNorm", "DenseLayerNorm",
                          {d->inputs[0], d->inputs[1], d->inputs.size() > 2 ? d->inputs[2] : "",
                           add->inputs[1 - k], ln.inputs[1], ln.inputs[2]},
                          ln.outputs);
        f.attrs["epsilon"] = ln.attrs.at("epsilon");
        rw.Kill(d);
        rw.Kill(add);
        rw.Replace(&ln, {f});
        break;
      }
      if (k == 1 && !fuse_dense) {
        Node f = MakeNode(ln.name, "LayerNorm",
                          {add->inputs[0], ln.inputs[1], ln.inputs[2], add->inputs[1]}, ln.outputs);
        f.attrs["epsilon"] = ln.attrs.at("epsilon");
        rw.Kill(add);
        rw.Replace(&ln, {f});
      }
    }
  }
  rw.Commit();
}

// Where(IsNaN(p), 0, p) after a Softmax p (torch's export of SDPA with a bool mask) guards rows
// whose keys are all masked. Packed attention never has such a row (every sequence has a token),
// so the guard is dropped and the probabilities go straight to the next op.
void DropSoftmaxNanGuards(Graph* g) {
  const auto prod = g->Producers();
  std::set<std::string> outputs;
  for (const auto& o : g->outputs) outputs.insert(o.name);
  std::map<std::string, std::string> rename;
  for (const Node& n : g->nodes) {
    if (n.op != "Where" || n.inputs.size() != 3 || outputs.count(n.outputs[0])) continue;
    const std::string& p = n.inputs[2];
    auto ic = prod.find(n.inputs[0]);
    auto ip = prod.find(p);
    if (ic == prod.end() || ip == prod.end()) continue;
    const Node& isnan = g->nodes[ic->second];
    if (isnan.op != "IsNaN" || isnan.inputs[0] != p || g->nodes[ip->second].op != "Softmax") continue;
    const HTensor* z = g->Const(n.inputs[1]);
    bool zero = z && z->is_float();
    for (int64_t k = 0; zero && k < z->numel(); ++k) zero = z->f[k] == 0.f;
    if (zero) rename[n.outputs[0]] = p;
  }
  if (rename.empty()) return;
  for (auto& n : g->nodes) {
    for (auto& in : n.inputs) {
      if (auto it = rename.find(in); it != rename.end()) in = it->second;
    }
  }
  EliminateDeadNodes(g);
}

}  // namespace

void Canonicalize(Graph* g, const ShapeInfo& shapes, FusionReport* report) {
  DropSoftmaxNanGuards(g);
  Rewriter rw(g);
  LayerNorms(rw, shapes);
  Gelus(rw);
  TanhGelus(rw);
  Denses(rw);
}

// Defined in fusion_encoder.cc.
void FuseEmbeddings(Graph* g, ShapeInfo* shapes, FusionReport* report);
void FuseAttention(Graph* g, ShapeInfo* shapes, FusionReport* report);
void FuseFirstToken(Graph* g, ShapeInfo* shapes);

void FuseEncoder(Graph* g, ShapeInfo* shapes, FusionReport* report) {
  FuseEmbeddings(g, shapes, report);
  FuseAttention(g, shapes, report);
  {
    Rewriter rw(g);
    ResidualLayerNorms(rw, *shapes, /*fuse_dense=*/true);
    ResidualLayerNorms(rw, *shapes, /*fuse_dense=*/false);
  }
  FuseFirstToken(g, shapes);
  EliminateDeadNodes(g);
}

std::string PackedIncompatibility(const Graph& g, const ShapeInfo& s) {
  static const std::set<std::string> kOps = {"EmbedLayerNorm", "Dense", "DenseLayerNorm",
                                             "Attention", "LayerNorm", "FirstToken", "Gelu",
                                             "Tanh", "Relu", "Sigmoid", "Erf", "Identity",
                                             "Add", "Sub", "Mul", "Div"};
  auto layout_ok = [&](const std::string& v) {
    if (g.IsConst(v)) return true;
    auto it = s.dims.find(v);
    if (it == s.dims.end() || it->second.empty() || it->second[0] != "batch") return false;
    const size_t lead = it->second.size() > 1 && it->second[1] == "seq" ? 2 : 1;
    return s.Inner(v, lead) > 0;
  };
  for (const auto& n : g.nodes) {
    if (!kOps.count(n.op)) return n.Describe() + " has no packed implementation";
    if (n.op == "Gelu" && n.s("approximate", "none") != "none" &&
        n.s("approximate", "none") != "tanh") {
      return n.Describe() + ": GELU approximate=" + n.s("approximate", "") + " is not an ONNX form";
    }
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const std::string& in = n.inputs[k];
      if (in.empty()) continue;
      if (g.IsInput(in) && n.op != "EmbedLayerNorm") {
        return n.Describe() + " reads graph input '" + in + "' directly";
      }
      if (!g.IsInput(in) && !layout_ok(in)) {
        return n.Describe() + ": input '" + in + "' is not [batch, (seq,) static…]";
      }
    }
    for (const auto& o : n.outputs) {
      if (!layout_ok(o)) return n.Describe() + ": output '" + o + "' is not [batch, (seq,) static…]";
    }
    if (n.op == "Add" || n.op == "Sub" || n.op == "Mul" || n.op == "Div") {
      // Elementwise with a per-row-broadcast constant, or two values of one layout.
      const bool c0 = g.IsConst(n.inputs[0]), c1 = g.IsConst(n.inputs[1]);
      if (c0 && c1) return n.Describe() + " is constant";
      if (c0 || c1) {
        const HTensor* c = g.Const(n.inputs[c0 ? 0 : 1]);
        const std::string& x = n.inputs[c0 ? 1 : 0];
        if (c->numel() != 1 && c->numel() != LastDim(s, x)) {
          return n.Describe() + ": constant operand does not broadcast over the last axis only";
        }
        if (c->numel() != 1 && c->shape.size() > 1) {
          for (size_t d = 0; d + 1 < c->shape.size(); ++d) {
            if (c->shape[d] != 1) return n.Describe() + ": constant operand has leading dims";
          }
        }
      } else if (s.dims.at(n.inputs[0]) != s.dims.at(n.inputs[1])) {
        return n.Describe() + ": operands differ in shape";
      }
    }
  }
  for (const auto& o : g.outputs) {
    if (g.IsInput(o.name) || g.IsConst(o.name) || !layout_ok(o.name)) {
      return "graph output '" + o.name + "' is not [batch, (seq,) static…]";
    }
  }
  return "";
}

}  // namespace hotline::engine
