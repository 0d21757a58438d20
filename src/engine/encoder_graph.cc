// MatchBertEncoder: data-flow match of the fused BERT encoder sequence (encoder_graph.h).
#include "engine/encoder_graph.h"

#include <cmath>
#include <map>
#include <set>

#include "base/error.h"
#include "engine/fused_attrs.h"

namespace hotline::engine {
namespace {

class Matcher {
 public:
  Matcher(const Graph& g) : g_(g), cons_(g.Consumers()) {}

  // The nodes (not graph outputs) that read v.
  std::vector<const Node*> Readers(const std::string& v) const {
    std::vector<const Node*> r;
    auto it = cons_.find(v);
    if (it == cons_.end()) return r;
    for (int k : it->second) {
      if (k >= 0) r.push_back(&g_.nodes[k]);
    }
    return r;
  }
  bool IsGraphOutput(const std::string& v) const {
    for (const auto& o : g_.outputs) {
      if (o.name == v) return true;
    }
    return false;
  }
  // A constant float tensor of exactly this shape, else null.
  const HTensor* Const(const Node& n, size_t k, std::vector<int64_t> shape) const {
    if (k >= n.inputs.size() || n.inputs[k].empty()) return nullptr;
    const HTensor* t = g_.Const(n.inputs[k]);
    return t && t->is_float() && t->shape == shape ? t : nullptr;
  }
  void Use(const Node* n) { used_.insert(n); }
  size_t used() const { return used_.size(); }

 private:
  const Graph& g_;
  std::map<std::string, std::vector<int>> cons_;
  std::set<const Node*> used_;
};

struct DenseParts {
  const HTensor *w = nullptr, *b = nullptr;
  int K = 0, N = 0;
};

// A Dense/DenseLayerNorm's weight [K, N] and its bias [N] (both required here).
std::string DenseOf(const Matcher& m, const Node& n, const Graph& g, DenseParts* d) {
  const HTensor* w = n.inputs.size() > 1 ? g.Const(n.inputs[1]) : nullptr;
  if (!w || !w->is_float() || w->shape.size() != 2) {
    return n.Describe() + ": weights are not a constant float32 matrix";
  }
  d->K = int(w->shape[0]);
  d->N = int(w->shape[1]);
  d->w = w;
  d->b = m.Const(n, 2, {int64_t(d->N)});
  if (!d->b) return n.Describe() + ": no float32 bias of " + std::to_string(d->N) + " values";
  return "";
}

bool SameEps(float a, float b) { return std::fabs(a - b) <= 1e-3f * std::fabs(b); }

}  // namespace

std::string MatchBertEncoder(const Graph& g, const PlanInfo& info, BertEncoderGraph* out) {
  BertEncoderGraph r;
  Matcher m(g);
  const Node* emb = nullptr;
  for (const auto& n : g.nodes) {
    if (n.op == "EmbedLayerNorm") {
      if (emb) return "more than one EmbedLayerNorm";
      emb = &n;
    }
  }
  if (!emb) return "no EmbedLayerNorm";
  const FusedOpAttrs ea = FusedOpAttrs::From(*emb);
  r.eps = ea.eps;
  r.word = g.Const(emb->inputs[2]);
  r.pos = g.Const(emb->inputs[3]);
  if (!r.word || !r.pos || !r.word->is_float() || !r.pos->is_float() ||
      r.word->shape.size() != 2 || r.pos->shape.size() != 2 ||
      r.word->shape[1] != r.pos->shape[1]) {
    return emb->Describe() + ": word/position tables are not constant [rows, hidden]";
  }
  const int64_t H = r.word->shape[1];
  r.hidden = int(H);
  r.vocab = int(r.word->shape[0]);
  r.max_pos = int(r.pos->shape[0]);
  if (ea.has_types) {
    r.type = g.Const(emb->inputs[4]);
    if (!r.type || !r.type->is_float() || r.type->shape.size() != 2 || r.type->shape[1] != H) {
      return emb->Describe() + ": token type table is not constant [rows, hidden]";
    }
    r.type_vocab = int(r.type->shape[0]);
  }
  r.emb_gamma = m.Const(*emb, 5, {H});
  r.emb_beta = m.Const(*emb, 6, {H});
  if (!r.emb_gamma || !r.emb_beta) return emb->Describe() + ": gamma/beta are not [hidden]";
  m.Use(emb);

  std::string x = emb->outputs[0];
  bool have_scale = false;
  for (;;) {
    if (m.IsGraphOutput(x)) return "hidden states '" + x + "' are a graph output";
    // Next layer: x is read by a QKV Dense (feeding one Attention) and a DenseLayerNorm residual.
    const auto readers = m.Readers(x);
    const Node *qkv = nullptr, *res_ln = nullptr;
    for (const Node* n : readers) {
      if (n->op == "Dense" && n->inputs[0] == x) {
        const auto rr = m.Readers(n->outputs[0]);
        if (rr.size() == 1 && rr[0]->op == "Attention") qkv = n;
      }
    }
    if (!qkv) break;  // the tail
    const Node* att = m.Readers(qkv->outputs[0])[0];
    const FusedOpAttrs qa = FusedOpAttrs::From(*qkv), aa = FusedOpAttrs::From(*att);
    const std::string L = "layer " + std::to_string(r.layers) + ": ";
    if (qa.epilogue != FusedEpilogue::kNone) return L + qkv->Describe() + " has an epilogue";
    if (aa.hidden() != H) {
      return L + att->Describe() + ": heads x head_dim " + std::to_string(aa.hidden()) +
             " != hidden " + std::to_string(H);
    }
    if (r.layers == 0) {
      r.heads = aa.heads;
    } else if (aa.heads != r.heads) {
      return L + "heads differ between layers";
    }
    if (!have_scale) {
      r.scale = aa.scale;
      have_scale = true;
    } else if (std::fabs(aa.scale - r.scale) > 1e-6f * r.scale) {
      return L + "attention scales differ between layers";
    }
    DenseParts dq, d1, d2, df;
    if (auto why = DenseOf(m, *qkv, g, &dq); !why.empty()) return L + why;
    if (dq.K != H || dq.N != 3 * H) return L + qkv->Describe() + " is not [hidden, 3*hidden]";
    const auto after_att = m.Readers(att->outputs[0]);
    if (after_att.size() != 1 || after_att[0]->op != "DenseLayerNorm" ||
        after_att[0]->inputs[0] != att->outputs[0]) {
      return L + "attention output is not read by one DenseLayerNorm";
    }
    const Node* o = after_att[0];
    res_ln = o;
    const FusedOpAttrs oa = FusedOpAttrs::From(*o);
    if (o->inputs[3] != x) return L + o->Describe() + ": residual is not the layer input";
    if (auto why = DenseOf(m, *o, g, &d1); !why.empty()) return L + why;
    if (d1.K != H || d1.N != H) return L + o->Describe() + " is not [hidden, hidden]";
    if (readers.size() != 2 || !(readers[0] == res_ln || readers[1] == res_ln)) {
      return L + "layer input '" + x + "' has readers besides the QKV Dense and the residual";
    }
    const std::string x1 = o->outputs[0];
    const auto r1 = m.Readers(x1);
    const Node *f1 = nullptr, *f2 = nullptr;
    for (const Node* n : r1) {
      if (n->op == "Dense" && n->inputs[0] == x1) f1 = n;
    }
    if (!f1 || r1.size() != 2 || m.IsGraphOutput(x1)) {
      return L + "attention block output is not read by exactly the FFN and its residual";
    }
    const FusedOpAttrs fa = FusedOpAttrs::From(*f1);
    if (fa.epilogue != FusedEpilogue::kGelu) return L + f1->Describe() + " has no gelu epilogue";
    if (auto why = DenseOf(m, *f1, g, &df); !why.empty()) return L + why;
    const auto rf = m.Readers(f1->outputs[0]);
    if (rf.size() != 1 || rf[0]->op != "DenseLayerNorm" || rf[0]->inputs[0] != f1->outputs[0] ||
        m.IsGraphOutput(f1->outputs[0])) {
      return L + "FFN activation is not read by one DenseLayerNorm";
    }
    f2 = rf[0];
    const FusedOpAttrs f2a = FusedOpAttrs::From(*f2);
    if (f2->inputs[3] != x1 || (r1[0] != f2 && r1[1] != f2)) {
      return L + f2->Describe() + ": residual is not the attention block output";
    }
    if (auto why = DenseOf(m, *f2, g, &d2); !why.empty()) return L + why;
    if (df.K != H || d2.N != H || d2.K != df.N) {
      return L + "FFN weights are not [hidden, I] and [I, hidden]";
    }
    if (r.layers == 0) {
      r.intermediate = df.N;
    } else if (df.N != r.intermediate) {
      return L + "FFN sizes differ between layers";
    }
    if (!SameEps(oa.eps, r.eps) || !SameEps(f2a.eps, r.eps)) return L + "LayerNorm epsilons differ";
    BertEncoderGraph::Layer ly;
    ly.qkv_w = dq.w;
    ly.qkv_b = dq.b;
    ly.out_w = d1.w;
    ly.out_b = d1.b;
    ly.ln1_gamma = m.Const(*o, 4, {H});
    ly.ln1_beta = m.Const(*o, 5, {H});
    ly.ff1_w = df.w;
    ly.ff1_b = df.b;
    ly.ff2_w = d2.w;
    ly.ff2_b = d2.b;
    ly.ln2_gamma = m.Const(*f2, 4, {H});
    ly.ln2_beta = m.Const(*f2, 5, {H});
    if (!ly.ln1_gamma || !ly.ln1_beta || !ly.ln2_gamma || !ly.ln2_beta) {
      return L + "LayerNorm gamma/beta are not [hidden]";
    }
    r.layer.push_back(ly);
    for (const Node* n : {qkv, att, o, f1, f2}) m.Use(n);
    ++r.layers;
    x = f2->outputs[0];
  }
  if (r.layers == 0) return "no encoder layer (Dense -> Attention) after the embeddings";

  // Tail: x read by FirstToken and the slot head.
  const auto tail = m.Readers(x);
  const Node *first = nullptr, *slot = nullptr;
  for (const Node* n : tail) {
    if (n->op == "FirstToken" && !first) first = n;
    else if (n->op == "Dense" && n->inputs[0] == x && !slot) slot = n;
    else return n->Describe() + " reads the final hidden states (expected FirstToken, slot Dense)";
  }
  if (!first || !slot) return "final hidden states are not read by FirstToken and a slot Dense";
  FusedOpAttrs::From(*first);
  const Node* intent = nullptr;
  const Node* pooler = nullptr;
  {
    const auto rc = m.Readers(first->outputs[0]);
    if (rc.size() != 1 || rc[0]->op != "Dense" || m.IsGraphOutput(first->outputs[0])) {
      return "[CLS] is not read by exactly one Dense";
    }
    const FusedOpAttrs ca = FusedOpAttrs::From(*rc[0]);
    if (ca.epilogue == FusedEpilogue::kTanh) {
      pooler = rc[0];
      const auto rp = m.Readers(pooler->outputs[0]);
      if (rp.size() != 1 || rp[0]->op != "Dense" || m.IsGraphOutput(pooler->outputs[0])) {
        return "pooler output is not read by exactly one Dense";
      }
      intent = rp[0];
    } else {
      intent = rc[0];
    }
  }
  for (const Node* n : {intent, slot}) {
    if (FusedOpAttrs::From(*n).epilogue != FusedEpilogue::kNone) {
      return n->Describe() + ": a head with an activation";
    }
    if (!m.Readers(n->outputs[0]).empty()) return n->Describe() + ": head output is read further";
  }
  DenseParts dp, di, ds;
  if (pooler) {
    if (auto why = DenseOf(m, *pooler, g, &dp); !why.empty()) return why;
    if (dp.K != H || dp.N != H) return pooler->Describe() + " is not [hidden, hidden]";
    r.pooler = true;
    r.pooler_w = dp.w;
    r.pooler_b = dp.b;
  }
  if (auto why = DenseOf(m, *intent, g, &di); !why.empty()) return why;
  if (auto why = DenseOf(m, *slot, g, &ds); !why.empty()) return why;
  if (di.K != H || ds.K != H) return "a head does not read hidden-sized rows";
  r.n_intents = di.N;
  r.n_slots = ds.N;
  r.intent_w = di.w;
  r.intent_b = di.b;
  r.slot_w = ds.w;
  r.slot_b = ds.b;
  for (const Node* n : {first, slot, intent}) m.Use(n);
  if (pooler) m.Use(pooler);
  if (m.used() != g.nodes.size()) {
    return "the graph has " + std::to_string(g.nodes.size() - m.used()) +
           " node(s) outside the encoder sequence";
  }
  // Outputs: exactly the two heads, in PlanInfo's kinds.
  if (g.outputs.size() != 2 || info.outputs.size() != 2) return "the graph does not have 2 outputs";
  for (int k = 0; k < 2; ++k) {
    const std::string& name = g.outputs[k].name;
    if (info.outputs[k].name != name) return "plan outputs do not match the graph's";
    if (name == intent->outputs[0]) {
      if (info.outputs[k].kind != Output::Kind::kPerSequence ||
          info.outputs[k].inner_shape != std::vector<int64_t>{r.n_intents}) {
        return "intent output '" + name + "' is not [batch, " + std::to_string(r.n_intents) + "]";
      }
      r.intent_output = k;
    } else if (name == slot->outputs[0]) {
      if (info.outputs[k].kind != Output::Kind::kPerToken ||
          info.outputs[k].inner_shape != std::vector<int64_t>{r.n_slots}) {
        return "slot output '" + name + "' is not [tokens, " + std::to_string(r.n_slots) + "]";
      }
      r.slot_output = k;
    }
  }
  if (r.intent_output < 0 || r.slot_output < 0) return "graph outputs are not the two heads";
  *out = std::move(r);
  return "";
}

}  // namespace hotline::engine
