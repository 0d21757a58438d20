// Graph passes: the reference interpreter, constant folding, dead-node removal, and shape
// inference with symbolic batch/sequence dimensions.
//
// Shape inference runs the graph on two probe batches (batch 2 × seq 5 and batch 3 × seq 7, with
// padding; the second has no row of full length) and compares every value's concrete shape: a dimension that follows the batch size is
// "batch", one that follows the sequence length is "seq", one that stays put is a number, anything
// else is "?". Exact for the graphs exporters produce (shapes there are functions of batch and
// seq), and it uses the same reference ops that execute the graph, so it cannot disagree with them.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "engine/ir.h"

namespace hotline::engine {

// What a graph input carries. Decided from its name (…mask…, …type…/…segment…, …position…,
// else ids). Position ids, when a model takes them, must be 0..len-1 in each sequence: the packed
// engine numbers positions itself.
enum class InputRole { kIds, kMask, kTypes, kPositions };
InputRole RoleOf(const std::string& input_name);

// Runs the graph with the reference ops. Returns the graph outputs, or every value when
// `keep_all`. Throws hotline::Error when an input is missing or has the wrong dtype/rank.
std::map<std::string, HTensor> RunReference(const Graph& g,
                                            const std::map<std::string, HTensor>& feeds,
                                            bool keep_all = false);

// Replaces every node whose inputs are all constants by its outputs (as initializers).
// Returns the number of nodes folded.
int FoldConstants(Graph* g);
// Removes nodes whose outputs reach no graph output, and unused initializers.
int EliminateDeadNodes(Graph* g);

// A padded probe batch: ids within [first_id, vocab), mask with the given row lengths,
// token types alternating 0/1 within each row's second half (bounded by type_vocab).
std::map<std::string, HTensor> MakeProbeFeeds(const Graph& g, int batch, int seq,
                                              const std::vector<int>& lengths);

struct ShapeInfo {
  std::map<std::string, std::vector<std::string>> dims;  // value → symbolic dims
  std::map<std::string, std::vector<int64_t>> probe;     // value → shape at the first probe
  std::map<std::string, HTensor> values;                 // value → contents at the first probe
  std::map<std::string, HTensor> feeds;                  // the first probe's inputs
  bool Has(const std::string& v) const { return dims.count(v) != 0; }
  // Product of dims after the first `lead` ones, when all static; -1 otherwise.
  int64_t Inner(const std::string& v, size_t lead) const;
};
ShapeInfo InferShapes(const Graph& g);

// Exporters compute reshape targets, position ids and masks from Shape nodes on intermediate
// values; those extra readers hide single-use chains from the fusions. With the shapes known, a
// Shape (or a Gather/Slice of one) that selects only static dims becomes a constant, and any other
// Shape of a [batch, seq, ...] value is rebuilt from the first graph input's shape. Returns the
// number of Shape nodes rewritten (fold and prune afterwards, then infer shapes again).
int RewireShapes(Graph* g, const ShapeInfo& shapes);

}  // namespace hotline::engine
