// Recognises a fused plan graph that is exactly a BERT-style joint intent + slot encoder, so a
// backend with a whole-encoder runner (the CUDA backend's CudaEncoder) can claim it through
// Backend::PrepareGraph. Pure IR: no device code, tested on the CPU.
//
// The sequence, as FuseEncoder writes it (names of values do not matter, data flow does):
//   x = EmbedLayerNorm(ids, types?, word, pos, type?, gamma, beta)
//   per layer:  qkv = Dense(x, Wqkv[H,3H], b)           (no epilogue)
//               ctx = Attention(qkv)                    heads * head_dim == H
//               x1  = DenseLayerNorm(ctx, Wo[H,H], b, residual x, gamma, beta)
//               h   = Dense(x1, W1[H,I], b, epilogue gelu)
//               x   = DenseLayerNorm(h, W2[I,H], b, residual x1, gamma, beta)
//   cls = FirstToken(x); [pooled = Dense(cls, Wp[H,H], b, epilogue tanh)]
//   intent = Dense(pooled or cls, Wi[H,n_intents], b)   a per-sequence graph output
//   slots  = Dense(x, Ws[H,n_slots], b)                 a per-token graph output
// with nothing else in the graph, every bias present, one epsilon for every LayerNorm and one
// attention scale for every layer.
#pragma once

#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/ir.h"

namespace hotline::engine {

struct BertEncoderGraph {
  int layers = 0, hidden = 0, heads = 0, intermediate = 0;
  int vocab = 0, max_pos = 0, type_vocab = 1;  // type_vocab 1 with type == nullptr: no types
  int n_intents = 0, n_slots = 0;
  bool pooler = false;
  float eps = 1e-12f, scale = 1.f;
  int intent_output = -1, slot_output = -1;  // indices into Graph::outputs / PlanInfo::outputs
  // Constants, pointing into the graph (valid while it lives). Linear weights are [in, out].
  const HTensor *word = nullptr, *pos = nullptr, *type = nullptr;
  const HTensor *emb_gamma = nullptr, *emb_beta = nullptr;
  struct Layer {
    const HTensor *qkv_w, *qkv_b, *out_w, *out_b, *ln1_gamma, *ln1_beta;
    const HTensor *ff1_w, *ff1_b, *ff2_w, *ff2_b, *ln2_gamma, *ln2_beta;
  };
  std::vector<Layer> layer;
  const HTensor *pooler_w = nullptr, *pooler_b = nullptr;
  const HTensor *intent_w = nullptr, *intent_b = nullptr, *slot_w = nullptr, *slot_b = nullptr;
};

// Returns "" and fills *out when `g` is exactly the sequence above with outputs as `info` lists
// them; otherwise the first reason it is not (for logs; the caller then runs node by node).
// Malformed fused nodes (FusedOpAttrs) throw hotline::Error.
std::string MatchBertEncoder(const Graph& g, const PlanInfo& info, BertEncoderGraph* out);

}  // namespace hotline::engine
