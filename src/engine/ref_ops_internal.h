// Internal to the reference ops (ref_ops.cc, ref_ops_nn.cc, ref_ops_mask.cc).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "engine/ir.h"

namespace hotline::engine::ref {

using RefFn = void (*)(const Node&, int64_t opset, const std::vector<const HTensor*>&,
                       std::vector<HTensor>*);

std::vector<int64_t> BroadcastIndex(const std::vector<int64_t>& in,
                                    const std::vector<int64_t>& out);
const HTensor& Need(const std::vector<const HTensor*>& in, size_t k, const Node& n);
std::vector<int64_t> IntsOf(const HTensor& t);
void RegisterNnOps(std::map<std::string, RefFn>* m);
void RegisterMaskOps(std::map<std::string, RefFn>* m);
// Hotline's own fused op types (never accepted from an ONNX file).
bool IsFusedOp(const std::string& op);

}  // namespace hotline::engine::ref
