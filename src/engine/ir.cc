#include "engine/ir.h"

#include <set>
#include <sstream>

#include "base/error.h"

namespace hotline::engine {

int64_t HTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

HTensor HTensor::Float(std::vector<int64_t> shape, std::vector<float> data) {
  HTensor t;
  t.dtype = DType::kF32;
  t.shape = std::move(shape);
  t.f = std::move(data);
  return t;
}

HTensor HTensor::Int(std::vector<int64_t> shape, std::vector<int64_t> data) {
  HTensor t;
  t.dtype = DType::kI64;
  t.shape = std::move(shape);
  t.i = std::move(data);
  return t;
}

HTensor HTensor::Bool(std::vector<int64_t> shape, std::vector<int64_t> data) {
  HTensor t = Int(std::move(shape), std::move(data));
  t.dtype = DType::kBool;
  return t;
}

HTensor HTensor::Zeros(DType dtype, std::vector<int64_t> shape) {
  HTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  if (dtype == DType::kF32) {
    t.f.assign(t.numel(), 0.f);
  } else {
    t.i.assign(t.numel(), 0);
  }
  return t;
}

const char* DTypeName(HTensor::DType d) {
  switch (d) {
    case HTensor::DType::kF32: return "float32";
    case HTensor::DType::kI64: return "int64";
    case HTensor::DType::kBool: return "bool";
  }
  return "?";
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t k = 0; k < shape.size(); ++k) s += (k ? "," : "") + std::to_string(shape[k]);
  return s + "]";
}

int64_t Node::i(const std::string& a, int64_t def) const {
  auto it = attrs.find(a);
  if (it == attrs.end()) return def;
  if (auto* p = std::get_if<int64_t>(&it->second.v)) return *p;
  if (auto* p = std::get_if<float>(&it->second.v)) return int64_t(*p);
  throw Error(Describe() + ": attribute '" + a + "' is not an integer");
}

float Node::f(const std::string& a, float def) const {
  auto it = attrs.find(a);
  if (it == attrs.end()) return def;
  if (auto* p = std::get_if<float>(&it->second.v)) return *p;
  if (auto* p = std::get_if<int64_t>(&it->second.v)) return float(*p);
  throw Error(Describe() + ": attribute '" + a + "' is not a float");
}

std::string Node::s(const std::string& a, const std::string& def) const {
  auto it = attrs.find(a);
  if (it == attrs.end()) return def;
  if (auto* p = std::get_if<std::string>(&it->second.v)) return *p;
  throw Error(Describe() + ": attribute '" + a + "' is not a string");
}

std::vector<int64_t> Node::ints(const std::string& a) const {
  auto it = attrs.find(a);
  if (it == attrs.end()) return {};
  if (auto* p = std::get_if<std::vector<int64_t>>(&it->second.v)) return *p;
  if (auto* p = std::get_if<int64_t>(&it->second.v)) return {*p};
  throw Error(Describe() + ": attribute '" + a + "' is not a list of integers");
}

const HTensor* Node::t(const std::string& a) const {
  auto it = attrs.find(a);
  if (it == attrs.end()) return nullptr;
  return std::get_if<HTensor>(&it->second.v);
}

std::string Node::Describe() const { return op + " node '" + name + "'"; }

const HTensor* Graph::Const(const std::string& v) const {
  auto it = initializers.find(v);
  return it == initializers.end() ? nullptr : &it->second;
}

bool Graph::IsInput(const std::string& v) const {
  for (const auto& in : inputs) {
    if (in.name == v) return true;
  }
  return false;
}

std::map<std::string, std::vector<int>> Graph::Consumers() const {
  std::map<std::string, std::vector<int>> c;
  for (size_t k = 0; k < nodes.size(); ++k) {
    for (const auto& in : nodes[k].inputs) {
      if (!in.empty()) c[in].push_back(int(k));
    }
  }
  for (const auto& o : outputs) c[o.name].push_back(-1);
  return c;
}

std::map<std::string, int> Graph::Producers() const {
  std::map<std::string, int> p;
  for (size_t k = 0; k < nodes.size(); ++k) {
    for (const auto& o : nodes[k].outputs) {
      if (!o.empty()) p[o] = int(k);
    }
  }
  return p;
}

std::map<std::string, int> Graph::OpHistogram() const {
  std::map<std::string, int> h;
  for (const auto& n : nodes) h[n.op]++;
  return h;
}

void Graph::Validate() const {
  std::set<std::string> defined;
  for (const auto& in : inputs) defined.insert(in.name);
  for (const auto& [name, t] : initializers) defined.insert(name);
  for (const auto& n : nodes) {
    for (const auto& in : n.inputs) {
      if (!in.empty() && !defined.count(in)) {
        throw Error(n.Describe() + " reads value '" + in +
                    "' that no earlier node, input or initializer defines");
      }
    }
    for (const auto& o : n.outputs) defined.insert(o);
  }
  for (const auto& o : outputs) {
    if (!defined.count(o.name)) throw Error("graph output '" + o.name + "' is never produced");
  }
}

}  // namespace hotline::engine
