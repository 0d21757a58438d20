// The engine's intermediate representation: a graph of ONNX-style nodes over named values, with
// constant tensors (initializers). Imported ONNX graphs, canonicalised graphs and fused graphs all
// use it; fused ops live in the "hotline" domain (EmbedLayerNorm, Dense, DenseLayerNorm, Attention,
// LayerNorm, Gelu, FirstToken) and the plan file serialises exactly this structure.
//
// Batch and sequence dimensions are symbolic: a ValueInfo's dims are either a number or a symbol
// ("batch", "seq", or another name the exporter chose); ShapeInfo in passes.h records the symbolic
// shape of every intermediate value.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace hotline::engine {

// A dense host tensor used by import, constant folding and the generic (reference) executor.
// Bool tensors store 0/1 in `i`.
struct HTensor {
  enum class DType : uint8_t { kF32 = 1, kI64 = 7, kBool = 9 };  // ONNX TensorProto codes
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<float> f;
  std::vector<int64_t> i;

  int64_t numel() const;
  bool is_float() const { return dtype == DType::kF32; }
  static HTensor Float(std::vector<int64_t> shape, std::vector<float> data);
  static HTensor Int(std::vector<int64_t> shape, std::vector<int64_t> data);
  static HTensor Bool(std::vector<int64_t> shape, std::vector<int64_t> data);
  static HTensor Zeros(DType dtype, std::vector<int64_t> shape);
  // Element as double / int64 regardless of dtype (for small shape tensors and scalars).
  double at_f(int64_t k) const { return is_float() ? double(f[k]) : double(i[k]); }
  int64_t at_i(int64_t k) const { return is_float() ? int64_t(f[k]) : i[k]; }
};
const char* DTypeName(HTensor::DType d);
std::string ShapeString(const std::vector<int64_t>& shape);

struct Attr {
  std::variant<int64_t, float, std::string, std::vector<int64_t>, std::vector<float>, HTensor> v;
};

struct Node {
  std::string name;
  std::string op;                    // ONNX op type, or a hotline fused op type
  std::vector<std::string> inputs;   // "" marks an absent optional input
  std::vector<std::string> outputs;
  std::map<std::string, Attr> attrs;

  bool has(const std::string& a) const { return attrs.count(a) != 0; }
  int64_t i(const std::string& a, int64_t def) const;
  float f(const std::string& a, float def) const;
  std::string s(const std::string& a, const std::string& def) const;
  std::vector<int64_t> ints(const std::string& a) const;  // empty when absent
  const HTensor* t(const std::string& a) const;
  std::string Describe() const;  // "Softmax node '/layer.0/Softmax'"
};

struct ValueInfo {
  std::string name;
  HTensor::DType dtype = HTensor::DType::kF32;
  std::vector<std::string> dims;  // "3", "batch", "seq", "?" (unknown)
};

struct Graph {
  std::vector<Node> nodes;  // topological order
  std::map<std::string, HTensor> initializers;
  std::vector<ValueInfo> inputs;   // graph inputs without initializers
  std::vector<ValueInfo> outputs;
  int64_t opset = 0;
  std::string producer;

  bool IsConst(const std::string& v) const { return initializers.count(v) != 0; }
  const HTensor* Const(const std::string& v) const;
  bool IsInput(const std::string& v) const;
  // Consumers of each value (node indices), including graph outputs as index -1.
  std::map<std::string, std::vector<int>> Consumers() const;
  // Producer node index of each value.
  std::map<std::string, int> Producers() const;
  // Histogram of op types.
  std::map<std::string, int> OpHistogram() const;
  // Throws if the node order is not topological or a value is undefined.
  void Validate() const;
};

}  // namespace hotline::engine
