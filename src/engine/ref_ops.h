// The generic (reference) executor's ops: every imported ONNX op on host tensors (float, int64,
// bool), plus padded-layout reference versions of the hotline fused ops where they have one.
// Used for constant folding, probing shapes at build time, and running graphs that do not fuse.
#pragma once

#include <string>
#include <vector>

#include "engine/ir.h"

namespace hotline::engine {

// True for every ONNX op type ImportOnnx accepts.
bool IsSupportedOp(const std::string& op);
// Every supported ONNX op type, sorted (for error messages and docs).
std::vector<std::string> SupportedOps();

// Runs `node` on `in` (one pointer per node input; null for an absent optional input) and writes
// its outputs. Throws hotline::Error naming the node on shape/dtype mismatches.
void RunRefOp(const Node& node, int64_t opset, const std::vector<const HTensor*>& in,
              std::vector<HTensor>* out);

// Shared helpers.
std::vector<int64_t> BroadcastShapes(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                                     const Node& node);
int64_t NormAxis(int64_t axis, int64_t rank, const Node& node);

// Reference kernels reused by fused-op references (ref_ops_nn.cc).
void RefLayerNormRows(const float* x, const float* residual, const float* gamma, const float* beta,
                      float eps, int64_t rows, int64_t hidden, float* y);
float RefGelu(float x);

}  // namespace hotline::engine
