// The attributes of the engine's fused ops ("hotline" domain: Dense, DenseLayerNorm, LayerNorm,
// EmbedLayerNorm, Attention, FirstToken), read and validated once, in one place, for every
// backend. A backend calls FusedOpAttrs::From(node) when it prepares a node and reads plain
// fields afterwards; a malformed node (missing heads, non-positive head_dim, unknown epilogue,
// non-finite scale, epsilon outside (0, 1), ...) is a hotline::Error naming the node, the
// attribute, what was expected and what came.
//
// Input layout of the fused ops (fusion.cc / fusion_encoder.cc write them so):
//   Dense          x, W[K,N], bias[N] or ""                         attrs epilogue, tactic
//   DenseLayerNorm x, W[K,N], bias[N] or "", residual, gamma, beta   attrs epsilon, tactic
//   LayerNorm      x, gamma, beta[, residual]                        attrs epsilon
//   EmbedLayerNorm ids, types or "", word, pos, type table or "", gamma, beta   attrs epsilon
//   Attention      qkv [tokens, 3*heads*head_dim] as Q|K|V           attrs heads, head_dim, scale
//   FirstToken     x                                                 (none)
#pragma once

#include <cstdint>
#include <string>

#include "engine/ir.h"

namespace hotline::engine {

enum class FusedEpilogue { kNone, kGelu, kTanh };  // Dense "epilogue": "none", "gelu", "tanh"
const char* FusedEpilogueName(FusedEpilogue e);

struct FusedOpAttrs {
  // Dense, DenseLayerNorm.
  FusedEpilogue epilogue = FusedEpilogue::kNone;
  int tactic = 0;          // build-time GEMM choice (0: none recorded)
  bool has_bias = false;   // input #2 present
  bool has_residual = false;  // DenseLayerNorm: input #3; LayerNorm: input #3 (optional)
  // LayerNorm, DenseLayerNorm, EmbedLayerNorm.
  float eps = 1e-12f;
  bool has_types = false;  // EmbedLayerNorm: token type ids and table present
  // Attention.
  int heads = 0, head_dim = 0;
  float scale = 1.f;
  int hidden() const { return heads * head_dim; }  // Attention output width

  // Reads and validates the attributes (and input arity) of a fused op. Throws hotline::Error
  // (kInvalidArgument) naming the node for a malformed one and for an op that is not fused.
  static FusedOpAttrs From(const Node& node);
  // Whether `op` is one of the fused ops above.
  static bool IsFusedOp(const std::string& op);
};

}  // namespace hotline::engine
