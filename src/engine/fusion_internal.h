// Internal to the fusion passes: a rewriting view of a graph and small pattern helpers.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/ir.h"
#include "engine/passes.h"

namespace hotline::engine::fusion {

// Graph view with producer/consumer maps; rewrites mark nodes dead and may replace a node by a
// short list of nodes in place (keeping topological order), then Commit() compacts.
class Rewriter {
 public:
  Rewriter(Graph* g) : g_(g) { Refresh(); }

  void Refresh() {
    prod_ = g_->Producers();
    cons_ = g_->Consumers();
    dead_.assign(g_->nodes.size(), false);
    replace_.clear();
  }
  const Node* Prod(const std::string& v) const {
    auto it = prod_.find(v);
    return it == prod_.end() || dead_[it->second] ? nullptr : &g_->nodes[it->second];
  }
  const Node* ProdOp(const std::string& v, const char* op) const {
    const Node* n = Prod(v);
    return n && n->op == op ? n : nullptr;
  }
  int Index(const Node* n) const { return int(n - g_->nodes.data()); }
  bool SingleUse(const std::string& v) const {
    auto it = cons_.find(v);
    return it != cons_.end() && it->second.size() == 1 && it->second[0] >= 0;
  }
  // Number of readers of v (a graph output counts as one).
  size_t Uses(const std::string& v) const {
    auto it = cons_.find(v);
    return it == cons_.end() ? 0 : it->second.size();
  }
  // The only consumer of v, when v has exactly one (and is not a graph output).
  const Node* OnlyConsumer(const std::string& v, const char* op = nullptr) const {
    if (!SingleUse(v)) return nullptr;
    const Node* n = &g_->nodes[cons_.at(v)[0]];
    if (dead_[cons_.at(v)[0]]) return nullptr;
    return !op || n->op == op ? n : nullptr;
  }
  std::optional<float> Scalar(const std::string& v) const {
    const HTensor* t = g_->Const(v);
    if (!t || t->numel() != 1) return std::nullopt;
    return float(t->at_f(0));
  }
  // The operand of a binary node that is not `x` (or "" if neither/both).
  static std::string Other(const Node& n, const std::string& x) {
    if (n.inputs.size() != 2) return "";
    if (n.inputs[0] == x && n.inputs[1] != x) return n.inputs[1];
    if (n.inputs[1] == x && n.inputs[0] != x) return n.inputs[0];
    return "";
  }
  void Kill(const Node* n) { dead_[Index(n)] = true; }
  void Replace(const Node* n, std::vector<Node> with) {
    dead_[Index(n)] = true;
    replace_[Index(n)] = std::move(with);
  }
  std::string NewConst(const std::string& base, HTensor t) {
    std::string name = base;
    for (int k = 1; g_->initializers.count(name); ++k) name = base + "_" + std::to_string(k);
    g_->initializers[name] = std::move(t);
    return name;
  }
  void Commit() {
    std::vector<Node> out;
    for (size_t k = 0; k < g_->nodes.size(); ++k) {
      if (auto it = replace_.find(int(k)); it != replace_.end()) {
        for (auto& n : it->second) out.push_back(std::move(n));
      } else if (!dead_[k]) {
        out.push_back(std::move(g_->nodes[k]));
      }
    }
    g_->nodes = std::move(out);
    EliminateDeadNodes(g_);
    Refresh();
  }
  Graph* g() { return g_; }

 private:
  Graph* g_;
  std::map<std::string, int> prod_;
  std::map<std::string, std::vector<int>> cons_;
  std::vector<bool> dead_;
  std::map<int, std::vector<Node>> replace_;
};

inline Node MakeNode(std::string name, std::string op, std::vector<std::string> in,
              std::vector<std::string> out) {
  Node n;
  n.name = std::move(name);
  n.op = std::move(op);
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

inline bool Near(std::optional<float> v, float want, float tol = 1e-3f) {
  return v && std::fabs(*v - want) <= tol * std::max(1.f, std::fabs(want));
}

inline bool LastAxisOnly(const Node& n, const Graph& g, const ShapeInfo& s) {
  std::vector<int64_t> axes = n.ints("axes");
  if (axes.empty() && n.inputs.size() > 1 && g.Const(n.inputs[1])) {
    const HTensor* t = g.Const(n.inputs[1]);
    for (int64_t k = 0; k < t->numel(); ++k) axes.push_back(t->at_i(k));
  }
  if (axes.size() != 1) return false;
  auto it = s.dims.find(n.inputs[0]);
  const int64_t rank = it == s.dims.end() ? -1 : int64_t(it->second.size());
  return axes[0] == -1 || (rank > 0 && axes[0] == rank - 1);
}

inline HTensor Filled(int64_t n, float v) { return HTensor::Float({n}, std::vector<float>(n, v)); }

inline int64_t LastDim(const ShapeInfo& s, const std::string& v) {
  auto it = s.probe.find(v);
  return it == s.probe.end() || it->second.empty() ? -1 : it->second.back();
}

}  // namespace hotline::engine::fusion
