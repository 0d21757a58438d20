// ONNX → IR import (Debian's libonnx protobuf definitions).
#pragma once

#include <string>

#include "engine/ir.h"
#include "engine/qdq.h"

namespace hotline::engine {

// Imports an ONNX model file. Initializers and Constant nodes become IR constants; weights in
// external data files are read from paths relative to the model's folder (paths that leave it are
// rejected). FLOAT16 and BFLOAT16 tensors are widened to float exactly, and Cast(to=FLOAT) of a
// float constant is folded at import, so a model that stores its weights half-width (each
// initializer followed by a Cast) imports as the float model with those weights. Throws
// hotline::Error for unreadable, truncated or corrupt files, for tensors whose data does not match
// their shape, and for ops the engine cannot run (naming op, node and opset).
//
// QuantizeLinear/DequantizeLinear (QDQ-format models) are removed at import as qdq.h describes;
// the overload returns what they said (weight and activation scales) in `qdq`, the plain form
// drops it (the graph is the model's fp32 equivalent).
Graph ImportOnnx(const std::string& path);
Graph ImportOnnx(const std::string& path, QdqInfo* qdq);

}  // namespace hotline::engine
