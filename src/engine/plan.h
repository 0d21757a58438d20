// Plan files. Layout (little-endian):
//   bytes 0..7    magic "HOTLPLAN"
//   bytes 8..11   uint32 format version (kPlanFormatVersion)
//   bytes 12..15  uint32 reserved (0)
//   bytes 16..23  uint64 length L of the JSON metadata
//   bytes 24..    JSON metadata (format_version, fingerprint, precision, backend, profile, mode,
//                 inputs, outputs, symbolic dims, nodes with attributes and precisions, tactics,
//                 op histograms before/after fusion, the weights table)
//   then zero padding to a multiple of 64, then the weight blobs: each initializer at a
//   64-byte-aligned offset (relative to the blob start) listed in the weights table.
// The whole file loads with one mmap; weights are read in place.
// Version 2: a weights-table entry may carry "storage": "bf16" (2 bytes per value, the upper
// half of the float32 rounded to nearest even; widened back to float32 at load). BF16 plans store
// their GEMM weights (which the backends round to bf16 anyway: lossless) and their word embedding
// table this way, so a BF16 plan is about half the size of the FP32 one. Version 1 plans are
// refused with the "rebuild the plan" error.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/ir.h"

namespace hotline::engine {

inline constexpr uint32_t kPlanFormatVersion = 2;
inline constexpr char kPlanMagic[8] = {'H', 'O', 'T', 'L', 'P', 'L', 'A', 'N'};

struct PlanData {
  PlanInfo info;
  std::string mode;  // "packed" (fused, padding-free) or "padded" (generic ops)
  Graph graph;       // the executed graph, with its constants
  std::map<std::string, std::vector<std::string>> dims;  // symbolic dims of every value
  nlohmann::json extra = nlohmann::json::object();        // histograms, notes, tuning, source
};

void WritePlan(const PlanData& plan, const std::string& path);
// Reads and checks a plan (magic, version, JSON, bounds of every blob). With load_weights false
// only the metadata is read. Hardware fingerprints are checked by Engine::Load, not here.
PlanData ReadPlan(const std::string& path, bool load_weights);

// JSON form of node attributes (also used by `inspect --json`).
nlohmann::json AttrsToJson(const Node& n);

}  // namespace hotline::engine
