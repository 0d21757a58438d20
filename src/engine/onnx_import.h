// ONNX → IR import (Debian's libonnx protobuf definitions).
#pragma once

#include <string>

#include "engine/ir.h"

namespace hotline::engine {

// Imports an ONNX model file. Initializers and Constant nodes become IR constants; weights in
// external data files are read from paths relative to the model's folder (paths that leave it are
// rejected). Throws hotline::Error for unreadable, truncated or corrupt files, for tensors whose
// data does not match their shape, and for ops the engine cannot run (naming op, node and opset).
Graph ImportOnnx(const std::string& path);

}  // namespace hotline::engine
