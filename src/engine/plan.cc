#include "engine/plan.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include "base/error.h"

namespace hotline::engine {
namespace {

using json = nlohmann::json;

// Element count of a weight's shape, or -1 when a dim is negative or the count passes 2^40 (no
// plan holds a tensor that large; the cap keeps numel * element size from overflowing).
int64_t CheckedNumel(const std::vector<int64_t>& shape) {
  constexpr int64_t kMax = int64_t(1) << 40;
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && n > kMax / d)) return -1;
    n *= d;
  }
  return n;
}

// Structure the runtime indexes without further checks: every value defined before use, the
// fused ops' required inputs present (INT8 plans add inputs and outputs, so only the minimum is
// checked), and EmbedLayerNorm's tables constant [rows, hidden].
void CheckPlanGraph(const Graph& g) {
  g.Validate();
  static const std::map<std::string, size_t> kMinInputs = {
      {"Dense", 2}, {"DenseLayerNorm", 6}, {"LayerNorm", 3},
      {"EmbedLayerNorm", 7}, {"Attention", 1}, {"FirstToken", 1}};
  for (const Node& n : g.nodes) {
    auto it = kMinInputs.find(n.op);
    if (it == kMinInputs.end()) continue;
    if (n.inputs.size() < it->second || n.outputs.empty() || n.outputs[0].empty()) {
      throw Error(n.Describe() + ": expected " + std::to_string(it->second) +
                      " inputs and an output, got " + std::to_string(n.inputs.size()) +
                      " inputs and " + std::to_string(n.outputs.size()) + " outputs",
                  Code::kDataLoss);
    }
    for (size_t k = 0; k < it->second; ++k) {
      // Optional: the bias of Dense*, #2; the token types of EmbedLayerNorm, #1 and #4.
      const bool optional = ((n.op == "Dense" || n.op == "DenseLayerNorm") && k == 2) ||
                            (n.op == "EmbedLayerNorm" && (k == 1 || k == 4));
      if (!optional && n.inputs[k].empty()) {
        throw Error(n.Describe() + ": input #" + std::to_string(k) + " is missing",
                    Code::kDataLoss);
      }
    }
    if (n.op != "EmbedLayerNorm") continue;
    for (size_t k : {size_t(2), size_t(3), size_t(4)}) {
      if (n.inputs[k].empty()) continue;
      const HTensor* t = g.Const(n.inputs[k]);
      if (!t || t->shape.size() != 2 || t->shape[0] < 1 || t->shape[1] < 1) {
        throw Error(n.Describe() + ": input #" + std::to_string(k) +
                        " must be a constant [rows, hidden] table",
                    Code::kDataLoss);
      }
    }
  }
}

json TensorToJson(const HTensor& t) {
  json j = {{"dtype", int(t.dtype)}, {"shape", t.shape}};
  if (t.is_float()) j["f"] = t.f; else j["i"] = t.i;
  return j;
}

HTensor TensorFromJson(const json& j) {
  HTensor t;
  t.dtype = HTensor::DType(j.at("dtype").get<int>());
  t.shape = j.at("shape").get<std::vector<int64_t>>();
  if (t.is_float()) t.f = j.at("f").get<std::vector<float>>();
  else t.i = j.at("i").get<std::vector<int64_t>>();
  if (int64_t(t.is_float() ? t.f.size() : t.i.size()) != CheckedNumel(t.shape)) {
    throw Error("plan attribute tensor does not match its shape", Code::kDataLoss);
  }
  return t;
}

Attr AttrFromJson(const json& j) {
  if (j.contains("i")) return Attr{j["i"].get<int64_t>()};
  if (j.contains("f")) return Attr{j["f"].get<float>()};
  if (j.contains("s")) return Attr{j["s"].get<std::string>()};
  if (j.contains("ints")) return Attr{j["ints"].get<std::vector<int64_t>>()};
  if (j.contains("floats")) return Attr{j["floats"].get<std::vector<float>>()};
  if (j.contains("t")) return Attr{TensorFromJson(j["t"])};
  throw Error("plan holds an attribute of unknown kind", Code::kDataLoss);
}

json ValueInfoToJson(const ValueInfo& v) {
  return {{"name", v.name}, {"dtype", int(v.dtype)}, {"dims", v.dims}};
}

ValueInfo ValueInfoFromJson(const json& j) {
  ValueInfo v;
  v.name = j.at("name");
  v.dtype = HTensor::DType(j.at("dtype").get<int>());
  v.dims = j.at("dims").get<std::vector<std::string>>();
  return v;
}

size_t Align64(size_t n) { return (n + 63) / 64 * 64; }

// float32 -> bf16, round to nearest even (NaN stays a quiet NaN).
uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) return uint16_t(u >> 16 | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// The initializers a plan stores as bf16 (plan.h, version 2): in a packed BF16 plan, the weights
// of every fp32-typed GEMM (the backends compute them in bf16) and the fp32 word table of the
// embedding (rounded to bf16: 2^-9 relative, the precision BF16 activations have anyway).
std::set<std::string> Bf16Stored(const PlanData& plan) {
  std::set<std::string> names;
  if (plan.info.precision != Precision::kBF16 || plan.mode != "packed") return names;
  for (const Node& n : plan.graph.nodes) {
    size_t k = SIZE_MAX;
    if ((n.op == "Dense" || n.op == "DenseLayerNorm") && n.s("quant", "").empty()) k = 1;
    if (n.op == "EmbedLayerNorm" && !n.has("word_scale")) k = 2;
    if (k < n.inputs.size() && !n.inputs[k].empty()) {
      const HTensor* t = plan.graph.Const(n.inputs[k]);
      if (t != nullptr && t->is_float()) names.insert(n.inputs[k]);
    }
  }
  return names;
}

// A read-only mapping of a whole file.
struct Mapping {
  const uint8_t* data = nullptr;
  size_t size = 0;
  explicit Mapping(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) throw Error("cannot open plan '" + path + "'", Code::kNotFound);
    struct stat st{};
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      throw Error("cannot stat plan '" + path + "'", Code::kNotFound);
    }
    size = size_t(st.st_size);
    if (size > 0) {
      void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        ::close(fd);
        throw Error("cannot map plan '" + path + "'", Code::kInternal);
      }
      data = static_cast<const uint8_t*>(p);
    }
    ::close(fd);
  }
  ~Mapping() {
    if (data) ::munmap(const_cast<uint8_t*>(data), size);
  }
};

}  // namespace

json AttrsToJson(const Node& n) {
  json j = json::object();
  for (const auto& kv : n.attrs) {
    const std::string& name = kv.first;  // not a structured binding: clang 14 cannot capture one
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, int64_t>) j[name] = {{"i", v}};
          else if constexpr (std::is_same_v<T, float>) j[name] = {{"f", v}};
          else if constexpr (std::is_same_v<T, std::string>) j[name] = {{"s", v}};
          else if constexpr (std::is_same_v<T, std::vector<int64_t>>) j[name] = {{"ints", v}};
          else if constexpr (std::is_same_v<T, std::vector<float>>) j[name] = {{"floats", v}};
          else j[name] = {{"t", TensorToJson(v)}};
        },
        kv.second.v);
  }
  return j;
}

void WritePlan(const PlanData& plan, const std::string& path) {
  const PlanInfo& info = plan.info;
  json j;
  j["format_version"] = kPlanFormatVersion;
  j["fingerprint"] = info.fingerprint;
  j["precision"] = PrecisionName(info.precision);
  j["backend"] = BackendName(info.backend);
  j["profile"] = info.profile.ToString();
  j["mode"] = plan.mode;
  j["opset"] = plan.graph.opset;
  j["inputs"] = json::array();
  for (const auto& v : plan.graph.inputs) j["inputs"].push_back(ValueInfoToJson(v));
  j["outputs"] = json::array();
  for (size_t k = 0; k < plan.graph.outputs.size(); ++k) {
    json o = ValueInfoToJson(plan.graph.outputs[k]);
    const OutputInfo& oi = info.outputs.at(k);
    o["kind"] = oi.kind == Output::Kind::kPerToken ? "per_token" : "per_sequence";
    o["inner_shape"] = oi.inner_shape;
    j["outputs"].push_back(o);
  }
  j["dims"] = plan.dims;
  j["nodes"] = json::array();
  for (size_t k = 0; k < plan.graph.nodes.size(); ++k) {
    const Node& n = plan.graph.nodes[k];
    j["nodes"].push_back({{"name", n.name}, {"op", n.op}, {"inputs", n.inputs},
                          {"outputs", n.outputs}, {"attrs", AttrsToJson(n)},
                          {"precision", k < info.ops.size() ? info.ops[k].precision : "fp32"}});
  }
  j["extra"] = plan.extra;
  // Weights table.
  const std::set<std::string> bf16 = Bf16Stored(plan);
  auto stored_bytes = [&](const std::string& name, const HTensor& t) {
    return size_t(t.numel()) * (bf16.count(name) ? 2 : t.is_float() ? 4 : 8);
  };
  size_t offset = 0;
  json weights = json::array();
  for (const auto& [name, t] : plan.graph.initializers) {
    const size_t bytes = stored_bytes(name, t);
    weights.push_back({{"name", name}, {"dtype", int(t.dtype)}, {"shape", t.shape},
                       {"offset", offset}, {"bytes", bytes}});
    if (bf16.count(name)) weights.back()["storage"] = "bf16";
    offset = Align64(offset + bytes);
  }
  j["weights"] = weights;
  j["weight_bytes"] = offset;
  const std::string meta = j.dump();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw Error("cannot write plan '" + path + "'", Code::kPermissionDenied);
    const uint32_t version = kPlanFormatVersion, reserved = 0;
    const uint64_t len = meta.size();
    f.write(kPlanMagic, 8);
    f.write(reinterpret_cast<const char*>(&version), 4);
    f.write(reinterpret_cast<const char*>(&reserved), 4);
    f.write(reinterpret_cast<const char*>(&len), 8);
    f.write(meta.data(), std::streamsize(meta.size()));
    const size_t head = 24 + meta.size();
    const std::string pad(Align64(head) - head, '\0');
    f.write(pad.data(), std::streamsize(pad.size()));
    size_t written = 0;
    for (const auto& [name, t] : plan.graph.initializers) {
      const size_t bytes = stored_bytes(name, t);
      if (bf16.count(name)) {
        std::vector<uint16_t> h(t.f.size());
        for (size_t e = 0; e < h.size(); ++e) h[e] = ToBf16(t.f[e]);
        f.write(reinterpret_cast<const char*>(h.data()), std::streamsize(bytes));
      } else if (t.is_float()) {
        f.write(reinterpret_cast<const char*>(t.f.data()), std::streamsize(bytes));
      } else {
        f.write(reinterpret_cast<const char*>(t.i.data()), std::streamsize(bytes));
      }
      written += bytes;
      const std::string p2(Align64(written) - written, '\0');
      f.write(p2.data(), std::streamsize(p2.size()));
      written = Align64(written);
    }
    if (!f) throw Error("error writing plan '" + path + "'", Code::kDataLoss);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw Error("cannot move plan into place at '" + path + "'", Code::kPermissionDenied);
  }
}

PlanData ReadPlan(const std::string& path, bool load_weights) {
  Mapping m(path);
  if (m.size < 24 || std::memcmp(m.data, kPlanMagic, 8) != 0) {
    throw Error("'" + path + "' is not a hotline plan (no HOTLPLAN header; " +
                    std::to_string(m.size) + " bytes)",
                Code::kInvalidArgument);
  }
  uint32_t version;
  uint64_t len;
  std::memcpy(&version, m.data + 8, 4);
  std::memcpy(&len, m.data + 16, 8);
  if (version != kPlanFormatVersion) {
    throw Error("plan '" + path + "' has format version " + std::to_string(version) +
                    ", this build of hotline reads format version " +
                    std::to_string(kPlanFormatVersion) + ": rebuild the plan from the ONNX model",
                Code::kFailedPrecondition);
  }
  if (len > m.size - 24) {
    throw Error("plan '" + path + "' is truncated: metadata needs " + std::to_string(len) +
                    " bytes, the file has " + std::to_string(m.size - 24),
                Code::kDataLoss);
  }
  json j;
  try {
    j = json::parse(m.data + 24, m.data + 24 + len);
  } catch (const std::exception& e) {
    throw Error("plan '" + path + "' has corrupt metadata: " + e.what(), Code::kDataLoss);
  }
  PlanData p;
  try {
    p.info.format_version = j.at("format_version");
    p.info.fingerprint = j.at("fingerprint").get<std::map<std::string, std::string>>();
    p.info.precision = ParsePrecision(j.at("precision").get<std::string>());
    p.info.backend = ParseBackend(j.at("backend").get<std::string>());
    p.info.profile = Profile::Parse(j.at("profile").get<std::string>());
    p.mode = j.at("mode");
    p.graph.opset = j.at("opset");
    for (const auto& v : j.at("inputs")) {
      p.graph.inputs.push_back(ValueInfoFromJson(v));
      p.info.input_names.push_back(p.graph.inputs.back().name);
    }
    for (const auto& v : j.at("outputs")) {
      p.graph.outputs.push_back(ValueInfoFromJson(v));
      OutputInfo oi;
      oi.name = v.at("name");
      oi.kind = v.at("kind") == "per_token" ? Output::Kind::kPerToken : Output::Kind::kPerSequence;
      oi.inner_shape = v.at("inner_shape").get<std::vector<int64_t>>();
      p.info.outputs.push_back(oi);
    }
    p.dims = j.at("dims").get<std::map<std::string, std::vector<std::string>>>();
    for (const auto& jn : j.at("nodes")) {
      Node n;
      n.name = jn.at("name");
      n.op = jn.at("op");
      n.inputs = jn.at("inputs").get<std::vector<std::string>>();
      n.outputs = jn.at("outputs").get<std::vector<std::string>>();
      for (const auto& [k, v] : jn.at("attrs").items()) n.attrs[k] = AttrFromJson(v);
      p.info.ops.push_back({n.name, n.op, jn.at("precision")});
      p.graph.nodes.push_back(std::move(n));
    }
    p.extra = j.value("extra", json::object());
    p.info.weight_bytes = j.at("weight_bytes");
    const size_t blob_start = Align64(24 + len);
    // Compared by subtraction: blob_start + weight_bytes can wrap around in 64 bits.
    if (blob_start > m.size || p.info.weight_bytes > m.size - blob_start) {
      throw Error("plan '" + path + "' is truncated: weights need " +
                      std::to_string(p.info.weight_bytes) + " bytes after offset " +
                      std::to_string(blob_start) + ", the file has " + std::to_string(m.size),
                  Code::kDataLoss);
    }
    for (const auto& w : j.at("weights")) {
      HTensor t;
      t.dtype = HTensor::DType(w.at("dtype").get<int>());
      t.shape = w.at("shape").get<std::vector<int64_t>>();
      const int dtype = w.at("dtype").get<int>();
      const int64_t numel = CheckedNumel(t.shape);
      if ((dtype != int(HTensor::DType::kF32) && dtype != int(HTensor::DType::kI64) &&
           dtype != int(HTensor::DType::kBool)) ||
          numel < 0) {
        throw Error("plan '" + path + "': weight '" + w.at("name").get<std::string>() +
                        "' has an invalid dtype or shape",
                    Code::kDataLoss);
      }
      const size_t offset = w.at("offset"), bytes = w.at("bytes");
      const std::string storage = w.value("storage", "");
      if (!storage.empty() && (storage != "bf16" || !t.is_float())) {
        throw Error("plan '" + path + "': weight '" + w.at("name").get<std::string>() +
                        "' has unknown storage '" + storage + "' (this build reads bf16)",
                    Code::kDataLoss);
      }
      const size_t elem = storage == "bf16" ? 2 : t.is_float() ? 4 : 8;
      // offset + bytes can wrap around in 64 bits: compare by subtraction.
      if (bytes != size_t(numel) * elem || bytes > p.info.weight_bytes ||
          offset > p.info.weight_bytes - bytes) {
        throw Error("plan '" + path + "': weight '" + w.at("name").get<std::string>() +
                        "' does not fit its table entry",
                    Code::kDataLoss);
      }
      if (load_weights) {
        const uint8_t* src = m.data + blob_start + offset;
        if (storage == "bf16") {  // widen: the bf16 bits are the upper half of the float32
          t.f.resize(t.numel());
          for (size_t e = 0; e < t.f.size(); ++e) {
            uint16_t h;
            std::memcpy(&h, src + 2 * e, 2);
            const uint32_t u = uint32_t(h) << 16;
            std::memcpy(&t.f[e], &u, 4);
          }
        } else if (t.is_float()) {
          t.f.resize(t.numel());
          std::memcpy(t.f.data(), src, bytes);
        } else {
          t.i.resize(t.numel());
          std::memcpy(t.i.data(), src, bytes);
        }
      }
      p.graph.initializers[w.at("name")] = std::move(t);
    }
    try {
      CheckPlanGraph(p.graph);
    } catch (const Error& e) {
      throw Error("plan '" + path + "' has an invalid graph: " + e.what(), Code::kDataLoss);
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error("plan '" + path + "' has corrupt metadata: " + e.what(), Code::kDataLoss);
  }
  p.info.format_version = version;
  return p;
}

}  // namespace hotline::engine
