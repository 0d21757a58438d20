#include "engine/qdq_build.h"

#include "engine/onnx_import.h"
#include "engine/quant.h"

namespace hotline::engine {

std::shared_ptr<const CalibrationTable> QdqCalibrationTable(const QdqInfo& qdq) {
  if (qdq.activation_amax.empty()) return nullptr;
  auto table = std::make_shared<CalibrationTable>();
  table->amax = qdq.activation_amax;
  table->method = "qdq";
  table->model_fingerprint = "";  // the scales travel with the model itself
  table->calib_source = "QuantizeLinear/DequantizeLinear pairs of the model";
  return table;
}

bool ApplyQdqScales(const std::string& onnx_path, BuildOptions* options) {
  if (options->precision != Precision::kINT8 || options->calib_table) return false;
  QdqInfo qdq;
  const Graph g = ImportOnnx(onnx_path, &qdq);
  auto table = QdqCalibrationTable(qdq);
  if (!table) return false;
  for (const QuantGemm& q : ListQuantizableGemms(onnx_path)) {
    if (!table->amax.count(q.input)) options->keep_fp.push_back(q.node);
  }
  // The embedding tables stay fp32 unless the model itself stores them quantised (a DQ folded
  // into the table a Gather reads).
  bool tables_quantised = false;
  for (const Node& n : g.nodes) {
    if (n.op == "Gather" && !n.inputs.empty() && g.IsConst(n.inputs[0]) &&
        g.Const(n.inputs[0])->is_float() && qdq.weights.count(n.inputs[0])) {
      tables_quantised = true;
    }
  }
  if (!tables_quantised) options->keep_fp.push_back("embeddings");
  options->calib_table = std::move(table);
  return true;
}

}  // namespace hotline::engine
