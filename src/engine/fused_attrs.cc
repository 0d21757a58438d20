// FusedOpAttrs: one validation of the fused ops' attributes for every backend.
#include "engine/fused_attrs.h"

#include <cmath>

#include "base/error.h"

namespace hotline::engine {
namespace {

[[noreturn]] void Bad(const Node& n, const std::string& what) {
  throw Error(n.Describe() + ": " + what, Code::kInvalidArgument);
}

bool Present(const Node& n, size_t k) { return k < n.inputs.size() && !n.inputs[k].empty(); }

void Arity(const Node& n, size_t min, size_t max) {
  if (n.inputs.size() < min || n.inputs.size() > max) {
    Bad(n, "expected " + std::to_string(min) + (min == max ? "" : " to " + std::to_string(max)) +
               " inputs, got " + std::to_string(n.inputs.size()));
  }
  for (size_t k = 0; k < min; ++k) {
    // Required inputs of every fused op except the optional bias (Dense*, #2) and token types
    // (EmbedLayerNorm, #1 and #4), which the callers check below.
    const bool optional = ((n.op == "Dense" || n.op == "DenseLayerNorm") && k == 2) ||
                          (n.op == "EmbedLayerNorm" && (k == 1 || k == 4));
    if (!optional && !Present(n, k)) Bad(n, "input #" + std::to_string(k) + " is missing");
  }
  if (n.outputs.size() != 1 || n.outputs[0].empty()) {
    Bad(n, "expected 1 output, got " + std::to_string(n.outputs.size()));
  }
}

float Epsilon(const Node& n) {
  const float eps = n.f("epsilon", 1e-12f);
  if (!(eps > 0.f && eps < 1.f)) {
    Bad(n, "attribute 'epsilon' must be in (0, 1), got " + std::to_string(eps));
  }
  return eps;
}

int Tactic(const Node& n) {
  const int64_t t = n.i("tactic", 0);
  if (t < 0 || t > 1000000) Bad(n, "attribute 'tactic' must be >= 0, got " + std::to_string(t));
  return int(t);
}

}  // namespace

const char* FusedEpilogueName(FusedEpilogue e) {
  switch (e) {
    case FusedEpilogue::kNone: return "none";
    case FusedEpilogue::kGelu: return "gelu";
    case FusedEpilogue::kTanh: return "tanh";
  }
  return "?";
}

bool FusedOpAttrs::IsFusedOp(const std::string& op) {
  return op == "Dense" || op == "DenseLayerNorm" || op == "LayerNorm" ||
         op == "EmbedLayerNorm" || op == "Attention" || op == "FirstToken";
}

FusedOpAttrs FusedOpAttrs::From(const Node& n) {
  FusedOpAttrs a;
  if (n.op == "Dense") {
    Arity(n, 2, 3);
    const std::string epi = n.s("epilogue", "none");
    if (epi == "none") a.epilogue = FusedEpilogue::kNone;
    else if (epi == "gelu") a.epilogue = FusedEpilogue::kGelu;
    else if (epi == "tanh") a.epilogue = FusedEpilogue::kTanh;
    else Bad(n, "attribute 'epilogue' must be none, gelu or tanh, got '" + epi + "'");
    a.has_bias = Present(n, 2);
    a.tactic = Tactic(n);
  } else if (n.op == "DenseLayerNorm") {
    Arity(n, 6, 6);
    if (n.has("epilogue") && n.s("epilogue", "none") != "none") {
      Bad(n, "attribute 'epilogue' must be none (LayerNorm follows), got '" +
                 n.s("epilogue", "") + "'");
    }
    a.has_bias = Present(n, 2);
    a.has_residual = true;
    a.eps = Epsilon(n);
    a.tactic = Tactic(n);
  } else if (n.op == "LayerNorm") {
    Arity(n, 3, 4);
    a.has_residual = Present(n, 3);
    a.eps = Epsilon(n);
  } else if (n.op == "EmbedLayerNorm") {
    Arity(n, 7, 7);
    if (Present(n, 1) != Present(n, 4)) {
      Bad(n, "token type ids (input #1) and the token type table (input #4) must come together");
    }
    a.has_types = Present(n, 1);
    a.eps = Epsilon(n);
  } else if (n.op == "Attention") {
    Arity(n, 1, 1);
    if (!n.has("heads") || !n.has("head_dim")) {
      Bad(n, std::string("attribute '") + (n.has("heads") ? "head_dim" : "heads") + "' is missing");
    }
    const int64_t heads = n.i("heads", 0), head_dim = n.i("head_dim", 0);
    if (heads < 1 || heads > 1024) {
      Bad(n, "attribute 'heads' must be in [1, 1024], got " + std::to_string(heads));
    }
    if (head_dim < 1 || head_dim > 1024) {
      Bad(n, "attribute 'head_dim' must be in [1, 1024], got " + std::to_string(head_dim));
    }
    a.heads = int(heads);
    a.head_dim = int(head_dim);
    a.scale = n.f("scale", 1.f);  // fusion always records the folded scale
    if (!std::isfinite(a.scale) || a.scale <= 0.f) {
      Bad(n, "attribute 'scale' must be finite and positive, got " + std::to_string(a.scale));
    }
  } else if (n.op == "FirstToken") {
    Arity(n, 1, 1);
  } else {
    Bad(n, "is not a fused op (expected Dense, DenseLayerNorm, LayerNorm, EmbedLayerNorm, "
           "Attention or FirstToken)");
  }
  return a;
}

}  // namespace hotline::engine
