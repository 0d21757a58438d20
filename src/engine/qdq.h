// Explicitly quantised ONNX models (QDQ format): QuantizeLinear/DequantizeLinear pairs as
// quantisation-aware training exports and onnxruntime.quantization.quantize_static(QuantFormat.QDQ)
// write them. ImportOnnx removes them from the graph and keeps what they said:
//
//   - DequantizeLinear of a constant (an int8/uint8 weight, an int32 bias), or a Q→DQ pair on a
//     constant (fake-quantised fp32 weights), is folded into an fp32 constant holding exactly the
//     dequantised values (q - zero_point) * scale; the weight's scales (per tensor or per channel,
//     with their axis) are kept in QdqInfo::weights under the folded constant's name.
//   - A Q→DQ pair on an activation is removed (consumers read the unquantised value) and its scale
//     becomes an activation range in QdqInfo::activation_amax, keyed by the value's name in the
//     stripped graph: amax = 127 * scale for symmetric pairs (int8 with zero point 0, or uint8 with
//     zero point 128), which an engine quantising symmetrically with scale = amax / 127 honours
//     exactly. An asymmetric pair cannot be honoured exactly by a symmetric engine: its range is
//     widened to cover both ends (amax = scale * max(zp - qmin, qmax - zp)) and a note says so.
//   - When the DQ's output is a graph output, the value keeps the graph output's name.
//
// A lone Q or DQ on an activation (QOperator-style or a truncated graph) and blocked quantisation
// (opset 21's block_size) are rejected with hotline::Error naming the node.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "engine/ir.h"

namespace hotline::engine {

struct QdqWeightScales {
  std::vector<float> scale;  // one per tensor (size 1) or one per slice along `axis`
  int64_t axis = -1;         // -1 for per-tensor; else the axis of the folded constant
  bool symmetric = true;     // every zero point was 0 (int8) / 128 (uint8)
};

struct QdqInfo {
  int pairs_removed = 0;     // activation Q→DQ pairs
  int weights_folded = 0;    // DQ (or Q→DQ) on constants
  std::map<std::string, float> activation_amax;        // value → symmetric INT8 range
  std::map<std::string, QdqWeightScales> weights;      // folded constant → its scales
  std::vector<std::string> notes;                      // approximations made
  bool empty() const { return pairs_removed == 0 && weights_folded == 0; }
};

// Removes every QuantizeLinear/DequantizeLinear node from `g` as described above.
// `elem_types` maps constant names to their ONNX TensorProto element type (the IR keeps int8,
// uint8 and int32 all as int64; the zero point's type decides Q's range: int8 or uint8).
QdqInfo StripQdq(Graph* g, const std::map<std::string, int>& elem_types);

}  // namespace hotline::engine
