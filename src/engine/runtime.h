// Internal: the Engine implementation behind engine.h, and the plan builder.
#pragma once

#include <memory>
#include <string>

#include "engine/backend.h"
#include "engine/engine.h"
#include "engine/plan.h"

namespace hotline::engine {

// Imports, optimises, verifies and tunes; the result is ready to write or to load.
PlanData BuildPlanData(const std::string& onnx_path, const BuildOptions& options);

// Creates an engine from plan data (weights loaded). Checks the fingerprint against this
// machine's backend unless `check_hardware` is false.
std::shared_ptr<Engine> MakeEngine(PlanData plan, bool check_hardware);

}  // namespace hotline::engine
