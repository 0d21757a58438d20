#include "engine/onnx_import.h"

#include <onnx/onnx_pb.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "base/error.h"
#include "engine/ref_ops.h"

namespace hotline::engine {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const fs::path& path, uint64_t offset = 0, int64_t length = -1) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot open '" + path.string() + "'", Code::kNotFound);
  f.seekg(0, std::ios::end);
  const uint64_t size = uint64_t(f.tellg());
  if (offset > size || (length >= 0 && offset + uint64_t(length) > size)) {
    throw Error("'" + path.string() + "' is " + std::to_string(size) + " bytes, too short for " +
                    std::to_string(length) + " bytes at offset " + std::to_string(offset) +
                    " (truncated external data?)",
                Code::kDataLoss);
  }
  const uint64_t n = length >= 0 ? uint64_t(length) : size - offset;
  std::string data(n, '\0');
  f.seekg(std::streamoff(offset));
  f.read(data.data(), std::streamsize(n));
  if (!f) throw Error("read error on '" + path.string() + "'", Code::kDataLoss);
  return data;
}

HTensor::DType MapType(int t, const std::string& what) {
  switch (t) {
    case onnx::TensorProto::FLOAT:
    case onnx::TensorProto::DOUBLE:
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16:
      return HTensor::DType::kF32;
    case onnx::TensorProto::INT64:
    case onnx::TensorProto::INT32:
    case onnx::TensorProto::INT8:
    case onnx::TensorProto::UINT8:
    case onnx::TensorProto::INT16:
      return HTensor::DType::kI64;
    case onnx::TensorProto::BOOL:
      return HTensor::DType::kBool;
    default:
      throw Error(what + " has ONNX element type " + std::to_string(t) +
                      ", the engine imports float, double, float16, bfloat16, int8/16/32/64, "
                      "uint8 and bool");
  }
}

// IEEE binary16 bits to float, exactly (subnormals, infinities and NaN included).
float HalfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: man * 2^-24, exact in float
    const float v = float(man) * 5.9604644775390625e-8f;
    std::memcpy(&bits, &v, 4);
    bits |= sign;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// bfloat16 bits are the upper half of a float's.
float Bf16ToFloat(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Resolves an external-data location inside the model's folder; rejects escapes.
fs::path ExternalPath(const fs::path& base_dir, const std::string& location,
                      const std::string& tensor) {
  fs::path loc(location);
  if (location.empty() || loc.is_absolute()) {
    throw Error("tensor '" + tensor + "': external data location '" + location +
                "' must be a relative path inside the model's folder");
  }
  const fs::path base = fs::weakly_canonical(base_dir);
  const fs::path full = fs::weakly_canonical(base / loc);
  auto [bend, fend] = std::mismatch(base.begin(), base.end(), full.begin(), full.end());
  if (bend != base.end()) {
    throw Error("tensor '" + tensor + "': external data location '" + location +
                "' leaves the model's folder " + base.string());
  }
  return full;
}

HTensor ToTensor(const onnx::TensorProto& tp, const fs::path& base_dir) {
  std::string what = "tensor '" + tp.name() + "'";
  HTensor t;
  t.dtype = MapType(tp.data_type(), what);
  for (int64_t d : tp.dims()) {
    if (d < 0) throw Error(what + " has a negative dimension");
    t.shape.push_back(d);
  }
  const int64_t n = t.numel();
  if (n > (int64_t(1) << 34)) throw Error(what + " is implausibly large: " + ShapeString(t.shape));
  std::string raw;
  bool has_raw = false;
  if (tp.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location;
    uint64_t offset = 0;
    int64_t length = -1;
    for (const auto& kv : tp.external_data()) {
      if (kv.key() == "location") location = kv.value();
      if (kv.key() == "offset") offset = std::stoull(kv.value());
      if (kv.key() == "length") length = std::stoll(kv.value());
    }
    raw = ReadFile(ExternalPath(base_dir, location, tp.name()), offset, length);
    what += " (external data in '" + location + "')";
    has_raw = true;
  } else if (tp.has_raw_data()) {
    raw = tp.raw_data();
    has_raw = true;
  }
  const int et = tp.data_type();
  auto elem_size = [&]() -> size_t {
    switch (et) {
      case onnx::TensorProto::DOUBLE: case onnx::TensorProto::INT64: return 8;
      case onnx::TensorProto::FLOAT: case onnx::TensorProto::INT32: return 4;
      case onnx::TensorProto::INT16: case onnx::TensorProto::FLOAT16:
      case onnx::TensorProto::BFLOAT16: return 2;
      default: return 1;
    }
  };
  if (has_raw) {
    if (raw.size() != size_t(n) * elem_size()) {
      throw Error(what + " of shape " + ShapeString(t.shape) + " needs " +
                      std::to_string(size_t(n) * elem_size()) + " bytes of data, found " +
                      std::to_string(raw.size()) + " (truncated or corrupt model)",
                  Code::kDataLoss);
    }
    const char* p = raw.data();
    if (t.dtype == HTensor::DType::kF32) {
      t.f.resize(n);
      if (et == onnx::TensorProto::FLOAT) {
        std::memcpy(t.f.data(), p, n * 4);
      } else if (et == onnx::TensorProto::FLOAT16 || et == onnx::TensorProto::BFLOAT16) {
        // Stored half-width to keep the file small; computed in float from here on.
        const bool half = et == onnx::TensorProto::FLOAT16;
        for (int64_t k = 0; k < n; ++k) {
          uint16_t v;  // little-endian, as ONNX raw_data is
          std::memcpy(&v, p + 2 * k, 2);
          t.f[k] = half ? HalfToFloat(v) : Bf16ToFloat(v);
        }
      } else {
        for (int64_t k = 0; k < n; ++k) {
          double v;
          std::memcpy(&v, p + 8 * k, 8);
          t.f[k] = float(v);
        }
      }
    } else {
      t.i.resize(n);
      for (int64_t k = 0; k < n; ++k) {
        switch (et) {
          case onnx::TensorProto::INT64: { int64_t v; std::memcpy(&v, p + 8 * k, 8); t.i[k] = v; break; }
          case onnx::TensorProto::INT32: { int32_t v; std::memcpy(&v, p + 4 * k, 4); t.i[k] = v; break; }
          case onnx::TensorProto::INT16: { int16_t v; std::memcpy(&v, p + 2 * k, 2); t.i[k] = v; break; }
          case onnx::TensorProto::INT8: t.i[k] = int8_t(p[k]); break;
          default: t.i[k] = uint8_t(p[k]); break;  // UINT8, BOOL
        }
        if (t.dtype == HTensor::DType::kBool) t.i[k] = t.i[k] != 0;
      }
    }
    return t;
  }
  // Typed repeated fields.
  auto check = [&](int64_t have) {
    if (have != n) {
      throw Error(what + " of shape " + ShapeString(t.shape) + " has " + std::to_string(have) +
                      " values (truncated or corrupt model)",
                  Code::kDataLoss);
    }
  };
  if (et == onnx::TensorProto::FLOAT) {
    check(tp.float_data_size());
    t.f.assign(tp.float_data().begin(), tp.float_data().end());
  } else if (et == onnx::TensorProto::DOUBLE) {
    check(tp.double_data_size());
    for (double v : tp.double_data()) t.f.push_back(float(v));
  } else if (et == onnx::TensorProto::FLOAT16 || et == onnx::TensorProto::BFLOAT16) {
    // ONNX keeps each 16-bit pattern in the low half of an int32_data entry.
    check(tp.int32_data_size());
    const bool half = et == onnx::TensorProto::FLOAT16;
    for (int32_t v : tp.int32_data()) {
      if (v < 0 || v > 0xFFFF)
        throw Error(what + " holds " + std::to_string(v) +
                        " in int32_data, not a 16-bit float pattern (corrupt model)",
                    Code::kDataLoss);
      t.f.push_back(half ? HalfToFloat(uint16_t(v)) : Bf16ToFloat(uint16_t(v)));
    }
  } else if (et == onnx::TensorProto::INT64) {
    check(tp.int64_data_size());
    t.i.assign(tp.int64_data().begin(), tp.int64_data().end());
  } else {
    check(tp.int32_data_size());
    for (int32_t v : tp.int32_data()) t.i.push_back(t.dtype == HTensor::DType::kBool ? v != 0 : v);
  }
  return t;
}

Attr ToAttr(const onnx::AttributeProto& a, const Node& node, const fs::path& base_dir) {
  switch (a.type()) {
    case onnx::AttributeProto::INT: return Attr{a.i()};
    case onnx::AttributeProto::FLOAT: return Attr{a.f()};
    case onnx::AttributeProto::STRING: return Attr{a.s()};
    case onnx::AttributeProto::INTS:
      return Attr{std::vector<int64_t>(a.ints().begin(), a.ints().end())};
    case onnx::AttributeProto::FLOATS:
      return Attr{std::vector<float>(a.floats().begin(), a.floats().end())};
    case onnx::AttributeProto::TENSOR: return Attr{ToTensor(a.t(), base_dir)};
    default:
      throw Error(node.Describe() + ": attribute '" + a.name() + "' has type " +
                  std::to_string(int(a.type())) + " (graphs/sparse tensors are not supported)");
  }
}

ValueInfo ToValueInfo(const onnx::ValueInfoProto& vi) {
  ValueInfo v;
  v.name = vi.name();
  const auto& tt = vi.type().tensor_type();
  v.dtype = MapType(tt.elem_type(), "graph input/output '" + vi.name() + "'");
  for (const auto& d : tt.shape().dim()) {
    if (d.has_dim_value()) {
      v.dims.push_back(std::to_string(d.dim_value()));
    } else if (d.has_dim_param() && !d.dim_param().empty()) {
      v.dims.push_back(d.dim_param());
    } else {
      v.dims.push_back("?");
    }
  }
  return v;
}

// Turns a Constant node's value into a tensor.
HTensor ConstantValue(const Node& n) {
  if (const HTensor* t = n.t("value")) return *t;
  if (n.has("value_float")) return HTensor::Float({}, {n.f("value_float", 0)});
  if (n.has("value_int")) return HTensor::Int({}, {n.i("value_int", 0)});
  if (n.has("value_ints")) {
    auto v = n.ints("value_ints");
    return HTensor::Int({int64_t(v.size())}, v);
  }
  if (n.has("value_floats")) {
    auto v = std::get<std::vector<float>>(n.attrs.at("value_floats").v);
    return HTensor::Float({int64_t(v.size())}, v);
  }
  throw Error(n.Describe() + " has no value the engine can read (value, value_float, value_int, "
              "value_ints, value_floats)");
}

// Folds Cast(to=FLOAT) of a float constant into a constant: models that store their weights as
// FLOAT16/BFLOAT16 initializers (already widened at import) cast each one to float before use,
// and the encoder fusions look for constant weights. A source no node reads any more is dropped.
void FoldFloatCasts(Graph* g, std::map<std::string, int>* elem_types) {
  std::set<std::string> graph_outputs, sources;
  for (const auto& o : g->outputs) graph_outputs.insert(o.name);
  std::vector<Node> kept;
  for (auto& n : g->nodes) {
    const bool fold = n.op == "Cast" && n.inputs.size() == 1 && n.outputs.size() == 1 &&
                      n.i("to", 0) == onnx::TensorProto::FLOAT && g->IsConst(n.inputs[0]) &&
                      g->Const(n.inputs[0])->is_float() && !graph_outputs.count(n.outputs[0]);
    if (!fold) {
      kept.push_back(std::move(n));
      continue;
    }
    g->initializers[n.outputs[0]] = *g->Const(n.inputs[0]);
    (*elem_types)[n.outputs[0]] = onnx::TensorProto::FLOAT;
    sources.insert(n.inputs[0]);
  }
  g->nodes = std::move(kept);
  for (const auto& n : g->nodes)
    for (const auto& in : n.inputs) sources.erase(in);
  for (const auto& s : sources)
    if (!graph_outputs.count(s)) g->initializers.erase(s);
}

}  // namespace

Graph ImportOnnx(const std::string& path) {
  QdqInfo unused;
  return ImportOnnx(path, &unused);
}

Graph ImportOnnx(const std::string& path, QdqInfo* qdq) {
  const std::string bytes = ReadFile(path);
  if (bytes.empty()) throw Error("'" + path + "' is empty, not an ONNX model", Code::kDataLoss);
  onnx::ModelProto model;
  if (bytes.size() > size_t(std::numeric_limits<int>::max()) ||
      !model.ParseFromString(bytes)) {
    throw Error("'" + path + "' is not a valid ONNX model (truncated or corrupt protobuf, " +
                    std::to_string(bytes.size()) + " bytes)",
                Code::kDataLoss);
  }
  if (!model.has_graph() || model.graph().node_size() == 0) {
    throw Error("'" + path + "' holds no ONNX graph (truncated, corrupt or not a model)",
                Code::kDataLoss);
  }
  const fs::path base_dir = fs::absolute(fs::path(path)).parent_path();
  Graph g;
  g.producer = model.producer_name() + " " + model.producer_version();
  for (const auto& os : model.opset_import()) {
    if (os.domain().empty() || os.domain() == "ai.onnx") g.opset = os.version();
  }
  if (g.opset == 0) throw Error("'" + path + "' declares no default-domain opset");
  const auto& gp = model.graph();
  std::map<std::string, int> elem_types;  // constants' ONNX element types (for Q/DQ ranges)
  for (const auto& init : gp.initializer()) {
    g.initializers[init.name()] = ToTensor(init, base_dir);
    elem_types[init.name()] = init.data_type();
  }
  for (const auto& in : gp.input()) {
    if (!g.initializers.count(in.name())) g.inputs.push_back(ToValueInfo(in));
  }
  for (const auto& out : gp.output()) g.outputs.push_back(ToValueInfo(out));
  int index = 0;
  for (const auto& np : gp.node()) {
    Node n;
    n.name = np.name().empty() ? np.op_type() + "_" + std::to_string(index) : np.name();
    ++index;
    n.op = np.op_type();
    n.inputs.assign(np.input().begin(), np.input().end());
    n.outputs.assign(np.output().begin(), np.output().end());
    if (!np.domain().empty() && np.domain() != "ai.onnx") {
      throw Error("unsupported op " + np.domain() + "::" + n.op + " (node '" + n.name +
                      "', opset " + std::to_string(g.opset) + "): only the default ONNX domain "
                      "is imported",
                  Code::kUnimplemented);
    }
    const bool qdq_op = n.op == "QuantizeLinear" || n.op == "DequantizeLinear";
    if (!qdq_op && !IsSupportedOp(n.op)) {
      throw Error("unsupported op " + n.op + " (node '" + n.name + "', opset " +
                      std::to_string(g.opset) + ")",
                  Code::kUnimplemented);
    }
    for (const auto& a : np.attribute()) n.attrs[a.name()] = ToAttr(a, n, base_dir);
    if (n.op == "Constant") {
      if (n.outputs.size() != 1) throw Error(n.Describe() + " must have one output");
      g.initializers[n.outputs[0]] = ConstantValue(n);
      for (const auto& a : np.attribute())
        if (a.name() == "value" && a.type() == onnx::AttributeProto::TENSOR)
          elem_types[n.outputs[0]] = a.t().data_type();
      continue;
    }
    g.nodes.push_back(std::move(n));
  }
  FoldFloatCasts(&g, &elem_types);
  *qdq = StripQdq(&g, elem_types);
  g.Validate();
  return g;
}

}  // namespace hotline::engine
