// How an INT8 build honours a QDQ model's own scales (qdq.h): the activation ranges its Q/DQ
// pairs give become the build's CalibrationTable (method "qdq", no calibration pass), and every
// quantisable GEMM whose input the model left unquantised stays fp32 (keep_fp), as the model says.
#pragma once

#include <memory>
#include <string>

#include "engine/engine.h"
#include "engine/qdq.h"

namespace hotline::engine {

struct CalibrationTable;

// The calibration table a QDQ model's activation pairs describe (amax = 127 * scale for
// symmetric pairs; see qdq.h for asymmetric ones). nullptr when the model has none.
std::shared_ptr<const CalibrationTable> QdqCalibrationTable(const QdqInfo& qdq);

// For an INT8 build of `onnx_path` without a calib_table: when the model is QDQ, sets
// options->calib_table from its scales and appends to options->keep_fp the GEMMs whose input has
// no Q/DQ pair, and "embeddings" unless the model stores its embedding tables quantised (DQ).
// Returns true when it did; false (options untouched) for a model without Q/DQ or a
// build that is not INT8 or already has a table.
bool ApplyQdqScales(const std::string& onnx_path, BuildOptions* options);

}  // namespace hotline::engine
