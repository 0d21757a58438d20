// Internal: the Engine implementation behind engine.h, and the plan builder.
#pragma once

#include <memory>
#include <map>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/engine.h"
#include "engine/plan.h"

namespace hotline::engine {

// Imports, optimises, verifies and tunes; the result is ready to write or to load.
PlanData BuildPlanData(const std::string& onnx_path, const BuildOptions& options);

// Creates an engine from plan data (weights loaded). Checks the fingerprint against this
// machine's backend unless `check_hardware` is false.
std::shared_ptr<Engine> MakeEngine(PlanData plan, bool check_hardware);

struct EngineOptions {
  bool check_hardware = true;
  std::vector<int> devices;  // CUDA: one replica per device, contexts dealt out in turn; {} = {0}
  bool tune = true;          // whole-graph runners: time implementations for new shapes
  std::string timing_cache;  // whole-graph runners: optional timing file
  bool graph_runners = true; // false: never hand the graph to Backend::PrepareGraph (tests)
  std::vector<std::vector<int32_t>> calib_sequences;  // GraphOptions::calib_sequences (builds)
  std::string fp8_weight_scaling;                     // GraphOptions' FP8 choices (builds)
  int fp8_fast_accum_max_k = -1;
};
std::shared_ptr<Engine> MakeEngine(PlanData plan, const EngineOptions& options);

// Throws hotline::Error (kFailedPrecondition) when a key of `here` differs in `plan`, naming the
// key, both values and both whole fingerprints.
void CheckFingerprint(const std::map<std::string, std::string>& plan,
                      const std::map<std::string, std::string>& here);

}  // namespace hotline::engine
