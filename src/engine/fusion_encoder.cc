// The encoder fusions for packed execution: embeddings, attention, first-token selection.
#include <cmath>

#include "base/error.h"
#include "engine/fusion.h"
#include "engine/fusion_internal.h"

namespace hotline::engine {
using namespace fusion;  // NOLINT: the passes' internal helpers

namespace {

bool AllZero(const HTensor& t) {
  if (t.is_float()) return false;
  for (int64_t v : t.i) {
    if (v != 0) return false;
  }
  return true;
}

// Position ids on the probe: k + offset at every kept token k of each row ([batch, seq] or a
// broadcast [1, seq] / [seq]). Padded tokens are not looked at (RoBERTa gives them its pad index).
bool PositionOffset(const HTensor& t, const ShapeInfo& s, int64_t* offset) {
  if (t.is_float() || t.shape.empty() || t.numel() == 0) return false;
  const int64_t S = t.shape.back(), rows = t.numel() / S;
  const HTensor* am = nullptr;
  for (const auto& [name, f] : s.feeds) {
    if (RoleOf(name) == InputRole::kMask) am = &f;
  }
  const int64_t off = t.i[0];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < S; ++k) {
      const bool kept = !am || rows != am->shape[0] || am->i[r * S + k] != 0;
      if (kept && t.i[r * S + k] != k + off) return false;
    }
  }
  if (off < 0) return false;
  *offset = off;
  return true;
}

const Node* Transposed(const Rewriter& rw, const std::string& v, std::vector<int64_t> perm) {
  const Node* t = rw.ProdOp(v, "Transpose");
  return t && t->ints("perm") == perm && rw.SingleUse(v) ? t : nullptr;
}

// Dense ← Reshape ← value; returns the Dense and the Reshape's output.
const Node* DenseBeforeReshape(const Rewriter& rw, const std::string& v, std::string* reshaped) {
  const Node* r = rw.ProdOp(v, "Reshape");
  if (!r || !rw.SingleUse(v)) return nullptr;
  const Node* d = rw.ProdOp(r->inputs[0], "Dense");
  if (!d || !rw.SingleUse(r->inputs[0]) || d->has("epilogue") || d->inputs.size() > 3) return nullptr;
  *reshaped = v;
  return d;
}

// Why the chain of producers back from v is not `ops` (each link single-use, Transposes with the
// given perms, in order); "" when it is. Names the first node that breaks the pattern.
std::string ChainWhy(const Rewriter& rw, std::string v, const std::vector<std::string>& ops,
                     const std::vector<std::vector<int64_t>>& perms) {
  for (size_t k = 0; k < ops.size(); ++k) {
    const Node* n = rw.Prod(v);
    if (!n) return "'" + v + "' is not computed by a node (expected " + ops[k] + ")";
    if (n->op != ops[k]) return "'" + v + "' comes from " + n->Describe() + ", expected " + ops[k];
    if (!rw.SingleUse(v)) {
      return "'" + v + "' from " + n->Describe() + " has " + std::to_string(rw.Uses(v)) +
             " readers, the pattern needs 1";
    }
    if (n->op == "Transpose" && k < perms.size() && n->ints("perm") != perms[k]) {
      return n->Describe() + " has another perm than the pattern's";
    }
    if (n->op == "Dense" && (n->has("epilogue") || n->inputs.size() > 3)) {
      return n->Describe() + " has an activation or extra inputs";
    }
    v = n->inputs[0];
  }
  return "";
}

// Follows Mul/Div by scalar constants back from v, folding them into *scale.
std::string PeelScalars(const Rewriter& rw, std::string v, float* scale) {
  for (;;) {
    const Node* n = rw.Prod(v);
    if (!n || !rw.SingleUse(v) || n->inputs.size() != 2) return v;
    if (n->op == "Div" && rw.Scalar(n->inputs[1]) && !rw.Scalar(n->inputs[0])) {
      *scale /= *rw.Scalar(n->inputs[1]);
      v = n->inputs[0];
    } else if (n->op == "Mul" && rw.Scalar(n->inputs[1]) && !rw.Scalar(n->inputs[0])) {
      *scale *= *rw.Scalar(n->inputs[1]);
      v = n->inputs[0];
    } else if (n->op == "Mul" && rw.Scalar(n->inputs[0]) && !rw.Scalar(n->inputs[1])) {
      *scale *= *rw.Scalar(n->inputs[0]);
      v = n->inputs[1];
    } else {
      return v;
    }
  }
}

// The additive mask must be 0 where attention_mask is 1 and very negative where it is 0, for
// every query row, on the probe batch.
std::string CheckMask(const Graph& g, const ShapeInfo& s, const std::string& mask) {
  auto it = s.values.find(mask);
  const HTensor* m = it != s.values.end() ? &it->second : g.Const(mask);
  if (!m || !m->is_float()) return "mask '" + mask + "' is not a float tensor on the probe";
  const HTensor* am = nullptr;
  for (const auto& [name, t] : s.feeds) {
    if (RoleOf(name) == InputRole::kMask) am = &t;
  }
  if (!am) return "no attention_mask input";
  const int64_t B = am->shape[0], S = am->shape[1];
  if (m->shape.size() != 4 || m->shape[0] != B || m->shape[3] != S) {
    return "mask shape " + ShapeString(m->shape) + " is not [batch, 1|heads, 1|seq, seq]";
  }
  const int64_t H = m->shape[1], Q = m->shape[2];
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t q = 0; q < Q; ++q) {
        for (int64_t j = 0; j < S; ++j) {
          const float v = m->f[((b * H + h) * Q + q) * S + j];
          const bool keep = am->i[b * S + j] != 0;
          if (keep ? std::fabs(v) > 1e-6f : v > -1e3f) {
            return "mask '" + mask + "' is not 0 for kept and ≤ -1000 for padded keys";
          }
        }
      }
    }
  }
  return "";
}

// A masked_fill condition must be true exactly at padded keys, for every query row, on the probe.
std::string CheckBoolMask(const ShapeInfo& s, const std::string& cond) {
  auto it = s.values.find(cond);
  if (it == s.values.end() || it->second.dtype != HTensor::DType::kBool) {
    return "masked_fill condition '" + cond + "' is not a bool tensor on the probe";
  }
  const HTensor& m = it->second;
  const HTensor* am = nullptr;
  for (const auto& [name, t] : s.feeds) {
    if (RoleOf(name) == InputRole::kMask) am = &t;
  }
  if (!am) return "no attention_mask input";
  const int64_t B = am->shape[0], S = am->shape[1];
  if (m.shape.size() != 4 || m.shape[0] != B || m.shape[3] != S) {
    return "masked_fill condition shape " + ShapeString(m.shape) + " is not [batch, 1|heads, 1|seq, seq]";
  }
  const int64_t inner = m.shape[1] * m.shape[2];
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < inner; ++h) {
      for (int64_t j = 0; j < S; ++j) {
        if ((m.i[(b * inner + h) * S + j] != 0) != (am->i[b * S + j] == 0)) {
          return "masked_fill condition '" + cond + "' is not true exactly at padded keys";
        }
      }
    }
  }
  return "";
}

}  // namespace

void FuseEmbeddings(Graph* g, ShapeInfo* s, FusionReport* report) {
  Rewriter rw(g);
  for (const Node& ln : g->nodes) {
    if (ln.op != "LayerNorm" || ln.inputs.size() != 3) continue;
    std::vector<std::string> leaves, stack{ln.inputs[0]};
    while (!stack.empty()) {
      std::string v = stack.back();
      stack.pop_back();
      const Node* add = rw.ProdOp(v, "Add");
      if (add && (v == ln.inputs[0] || rw.SingleUse(v))) {
        stack.push_back(add->inputs[0]);
        stack.push_back(add->inputs[1]);
      } else {
        leaves.push_back(v);
      }
    }
    if (leaves.size() < 2 || leaves.size() > 3) continue;
    std::string ids, types, word, pos, type, why;
    bool embedding_like = false;  // some leaf gathers a table by a graph input
    for (const auto& leaf : leaves) {
      const Node* ga = rw.ProdOp(leaf, "Gather");
      if (ga && g->IsInput(ga->inputs[1])) embedding_like = true;
    }
    for (const auto& leaf : leaves) {
      const Node* ga = rw.ProdOp(leaf, "Gather");
      const HTensor* table = ga ? g->Const(ga->inputs[0]) : nullptr;
      if (!ga || ga->i("axis", 0) != 0 || !table || table->shape.size() != 2) {
        why = "'" + leaf + "' is not a Gather of a constant [rows, hidden] table";
        break;
      }
      const std::string& idx = ga->inputs[1];
      const HTensor* probe = s->values.count(idx) ? &s->values.at(idx) : nullptr;
      const bool per_token = s->Has(idx) && s->dims.at(idx) == std::vector<std::string>{"batch", "seq"};
      int64_t offset = 0;
      if (g->IsInput(idx) && RoleOf(idx) == InputRole::kPositions) {
        pos = ga->inputs[0];  // position ids given: 0..len-1 (checked when a batch is run)
      } else if (g->IsInput(idx)) {
        (RoleOf(idx) == InputRole::kTypes ? types : ids) = idx;
        (RoleOf(idx) == InputRole::kTypes ? type : word) = ga->inputs[0];
      } else if (probe && per_token && AllZero(*probe) && type.empty() && types.empty()) {
        type = ga->inputs[0];  // token types absent: the exporter gathers row 0 everywhere
      } else if (probe && s->Has(idx) && !s->dims.at(idx).empty() && s->dims.at(idx).back() == "seq" &&
                 PositionOffset(*probe, *s, &offset) && offset < table->shape[0]) {
        if (offset == 0) {
          pos = ga->inputs[0];
        } else {  // e.g. RoBERTa: positions start after the padding index
          HTensor rows = HTensor::Float({table->shape[0] - offset, table->shape[1]},
                                        std::vector<float>(table->f.begin() + offset * table->shape[1],
                                                           table->f.end()));
          pos = rw.NewConst(ga->inputs[0] + "/from" + std::to_string(offset), std::move(rows));
        }
      } else {
        why = "'" + idx + "' (indices of " + ga->Describe() + ") is neither a graph input, "
              "positions 0..seq-1 (plus an offset) nor all zeros on the probe";
        break;
      }
    }
    if (why.empty() && ids.empty()) why = "no table is gathered by the token ids";
    if (why.empty() && pos.empty()) why = "no position embedding (a Gather by 0..seq-1)";
    if (!why.empty()) {
      if (report && embedding_like) {
        report->notes.push_back("embeddings at " + ln.Describe() + ": " + why);
      }
      continue;
    }
    Node e = MakeNode(ln.name + "/EmbedLayerNorm", "EmbedLayerNorm",
                      {ids, types, word, pos, type, ln.inputs[1], ln.inputs[2]}, ln.outputs);
    e.attrs["epsilon"] = ln.attrs.at("epsilon");
    rw.Replace(&ln, {e});
  }
  rw.Commit();
}

void FuseAttention(Graph* g, ShapeInfo* s, FusionReport* report) {
  Rewriter rw(g);
  auto note = [&](const Node& n, const std::string& why) {
    if (report) report->notes.push_back("attention at " + n.Describe() + ": " + why);
  };
  for (const Node& sm : g->nodes) {
    if (sm.op != "Softmax") continue;
    const int64_t axis = sm.i("axis", -1);
    if (axis != -1 && axis != 3) { note(sm, "softmax axis"); continue; }
    const Node* pv = rw.OnlyConsumer(sm.outputs[0], "MatMul");
    if (!pv || pv->inputs[0] != sm.outputs[0]) {
      const Node* c = rw.OnlyConsumer(sm.outputs[0]);
      note(sm, "no probs·V MatMul: the probabilities go to " +
                   (c ? c->Describe() : std::to_string(rw.Uses(sm.outputs[0])) + " readers"));
      continue;
    }
    float scale = 1.f;
    std::string mask;
    const Node* qk = nullptr;
    if (const Node* add = rw.ProdOp(sm.inputs[0], "Add"); add && rw.SingleUse(sm.inputs[0])) {
      for (int k = 0; k < 2 && !qk; ++k) {
        float sc = 1.f;
        const std::string t = PeelScalars(rw, add->inputs[k], &sc);
        if ((qk = rw.ProdOp(t, "MatMul"))) {
          scale = sc;
          mask = add->inputs[1 - k];
        }
      }
    }
    std::string bool_mask;  // masked_fill form: Where(masked, fill, scores)
    if (const Node* wh = rw.ProdOp(sm.inputs[0], "Where"); !qk && wh && rw.SingleUse(sm.inputs[0]) &&
                                                           wh->inputs.size() == 3) {
      float sc = 1.f;
      const std::string t = PeelScalars(rw, wh->inputs[2], &sc);
      const auto fill = rw.Scalar(wh->inputs[1]);
      if ((qk = rw.ProdOp(t, "MatMul"))) {
        scale = sc;
        bool_mask = wh->inputs[0];
        if (!fill || *fill > -1e3f) {
          note(sm, "masked_fill " + wh->Describe() + " fills with a value above -1000");
          continue;
        }
      }
    }
    if (!qk) {
      const Node* p = rw.Prod(sm.inputs[0]);
      note(sm, "no mask Add over Q·K^T: the softmax reads " +
                   (p ? p->Describe() : "'" + sm.inputs[0] + "'") +
                   (p && p->op == "Add" && !rw.SingleUse(sm.inputs[0]) ? " (read twice)" : ""));
      continue;
    }
    const std::string qv = PeelScalars(rw, qk->inputs[0], &scale);
    const std::string kv = PeelScalars(rw, qk->inputs[1], &scale);
    std::string qr, kr, vr;
    const Node* tq = Transposed(rw, qv, {0, 2, 1, 3});
    const Node* dq = tq ? DenseBeforeReshape(rw, tq->inputs[0], &qr) : nullptr;
    const Node* dk = nullptr;
    if (const Node* tk = Transposed(rw, kv, {0, 2, 3, 1})) {
      dk = DenseBeforeReshape(rw, tk->inputs[0], &kr);
    } else if (const Node* tk2 = Transposed(rw, kv, {0, 1, 3, 2})) {
      if (const Node* tk1 = Transposed(rw, tk2->inputs[0], {0, 2, 1, 3})) {
        dk = DenseBeforeReshape(rw, tk1->inputs[0], &kr);
      }
    }
    const Node* tv = Transposed(rw, pv->inputs[1], {0, 2, 1, 3});
    const Node* dv = tv ? DenseBeforeReshape(rw, tv->inputs[0], &vr) : nullptr;
    if (!dq || !dk || !dv) {
      const std::vector<int64_t> bshd{0, 2, 1, 3};
      std::string why = !dq ? "Q: " + ChainWhy(rw, qv, {"Transpose", "Reshape", "Dense"}, {bshd})
                      : !dv ? "V: " + ChainWhy(rw, pv->inputs[1], {"Transpose", "Reshape", "Dense"},
                                               {bshd})
                            : "K: " + ChainWhy(rw, kv, {"Transpose", "Reshape", "Dense"},
                                               {{0, 2, 3, 1}});
      note(sm, "Q/K/V are not Dense → Reshape → Transpose: " + why);
      continue;
    }
    if (dq->inputs[0] != dk->inputs[0] || dq->inputs[0] != dv->inputs[0]) {
      note(sm, "Q, K and V read different inputs");
      continue;
    }
    const Node* tc = rw.OnlyConsumer(pv->outputs[0], "Transpose");
    const Node* rc = tc && tc->ints("perm") == std::vector<int64_t>{0, 2, 1, 3}
                         ? rw.OnlyConsumer(tc->outputs[0], "Reshape") : nullptr;
    if (!rc) {
      std::string why;
      if (const Node* t = rw.OnlyConsumer(pv->outputs[0]); !t) {
        why = pv->Describe() + " has " + std::to_string(rw.Uses(pv->outputs[0])) + " readers";
      } else if (!tc) {
        why = t->Describe() + " follows " + pv->Describe();
      } else if (tc->ints("perm") != std::vector<int64_t>{0, 2, 1, 3}) {
        why = tc->Describe() + " has another perm";
      } else {
        const Node* r = rw.OnlyConsumer(tc->outputs[0]);
        why = r ? r->Describe() + " follows " + tc->Describe()
                : tc->Describe() + " has " + std::to_string(rw.Uses(tc->outputs[0])) + " readers";
      }
      note(sm, "context is not Transpose(0,2,1,3) → Reshape: " + why);
      continue;
    }
    const auto& qshape = s->probe.at(qr);  // [b, s, heads, head_dim]
    const HTensor* wq = g->Const(dq->inputs[1]);
    const HTensor* wk = g->Const(dk->inputs[1]);
    const HTensor* wv = g->Const(dv->inputs[1]);
    const int64_t K = wq->shape[0], N = wq->shape[1];
    if (qshape.size() != 4 || qshape[2] * qshape[3] != N || wk->shape != wq->shape ||
        wv->shape != wq->shape || s->dims.at(rc->outputs[0]) !=
            std::vector<std::string>{"batch", "seq", std::to_string(N)}) {
      note(sm, "head shapes do not match the projections");
      continue;
    }
    if (std::string why = bool_mask.empty() ? CheckMask(*g, *s, mask) : CheckBoolMask(*s, bool_mask);
        !why.empty()) {
      note(sm, why);
      continue;
    }
    // One GEMM over [Wq | Wk | Wv].
    HTensor w = HTensor::Zeros(HTensor::DType::kF32, {K, 3 * N});
    HTensor b = HTensor::Zeros(HTensor::DType::kF32, {3 * N});
    const Node* ds[3] = {dq, dk, dv};
    for (int p = 0; p < 3; ++p) {
      const HTensor* wp = g->Const(ds[p]->inputs[1]);
      for (int64_t k = 0; k < K; ++k) {
        std::copy_n(wp->f.data() + k * N, N, w.f.data() + k * 3 * N + p * N);
      }
      if (ds[p]->inputs.size() > 2 && !ds[p]->inputs[2].empty()) {
        std::copy_n(g->Const(ds[p]->inputs[2])->f.data(), N, b.f.data() + p * N);
      }
    }
    const std::string base = dq->name + "/qkv";
    const std::string wn = rw.NewConst(base + "/weight", std::move(w));
    const std::string bn = rw.NewConst(base + "/bias", std::move(b));
    const std::string qkv = rc->outputs[0] + "/qkv";
    Node d = MakeNode(base, "Dense", {dq->inputs[0], wn, bn}, {qkv});
    Node a = MakeNode(sm.name + "/Attention", "Attention", {qkv}, rc->outputs);
    a.attrs["heads"] = Attr{qshape[2]};
    a.attrs["head_dim"] = Attr{qshape[3]};
    a.attrs["scale"] = Attr{scale};
    s->dims[qkv] = {"batch", "seq", std::to_string(3 * N)};
    s->probe[qkv] = {qshape[0], qshape[1], 3 * N};
    rw.Replace(rc, {d, a});
  }
  rw.Commit();
}

void FuseFirstToken(Graph* g, ShapeInfo* s) {
  Rewriter rw(g);
  for (const Node& n : g->nodes) {
    if (n.op != "Gather" || n.i("axis", 0) != 1) continue;
    const HTensor* idx = g->Const(n.inputs[1]);
    if (!idx || idx->numel() != 1 || !idx->shape.empty() || idx->at_i(0) != 0) continue;
    auto it = s->dims.find(n.inputs[0]);
    if (it == s->dims.end() || it->second.size() < 2 || it->second[0] != "batch" ||
        it->second[1] != "seq") {
      continue;
    }
    rw.Replace(&n, {MakeNode(n.name + "/FirstToken", "FirstToken", {n.inputs[0]}, n.outputs)});
  }
  rw.Commit();
}

}  // namespace hotline::engine
