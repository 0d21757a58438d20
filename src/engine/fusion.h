// Pattern rewrites, in two stages.
//
// Canonicalize (valid for any layout, padded included): LayerNormalization and the decomposed
// ReduceMean/Sub/Pow/Sqrt/Div/Mul/Add form → LayerNorm; the erf GELU formula → Gelu, its tanh
// form → Gelu(approximate=tanh);
// MatMul(+Add bias) with constant weights and Gemm → Dense; Dense + Gelu/Tanh → Dense with an
// epilogue; LayerNorm(a + b) → LayerNorm with a residual input.
//
// FuseEncoder (for packed, padding-free execution): word/position/type Gather + Add + LayerNorm →
// EmbedLayerNorm; Q, K, V Dense + reshapes/transposes + scaled, masked softmax attention →
// one Dense over the concatenated QKV weights + Attention; Dense + residual Add + LayerNorm →
// DenseLayerNorm; Gather(x, 0, axis=1) → FirstToken. Each rewrite checks its pattern's shapes with
// ShapeInfo and, for the attention mask, its values on the probe batch; a pattern that does not
// match exactly is left alone.
#pragma once

#include <string>
#include <vector>

#include "engine/ir.h"
#include "engine/passes.h"

namespace hotline::engine {

struct FusionReport {
  std::vector<std::string> notes;  // why a pattern was not fused, for `inspect`/logs
};

void Canonicalize(Graph* g, const ShapeInfo& shapes, FusionReport* report);
void FuseEncoder(Graph* g, ShapeInfo* shapes, FusionReport* report);

// Packed execution needs every value to be per-token [batch, seq, …] or per-sequence [batch, …]
// with static inner dims, token inputs consumed only by EmbedLayerNorm, and only ops the packed
// executor runs. Returns "" when the graph qualifies, else the first reason it does not.
std::string PackedIncompatibility(const Graph& g, const ShapeInfo& shapes);

}  // namespace hotline::engine
