// The backend interface: what the plan executor needs from a device. Small on purpose (compare
// ggml's ggml-backend-impl.h): memory, copies, a barrier, and fused ops prepared once (weights
// converted/uploaded at prepare time) and launched many times over packed batches.
//
// The executor owns the schedule and the buffers; a backend never allocates on the hot path
// (PreparedOp::Run gets its scratch from the executor, sized by ScratchBytes for the profile's
// maximum). CUDA #ifdefs live only in backend.cc (the registry) and src/engine/cuda/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "engine/ir.h"

namespace hotline::engine {

// One launch of a prepared op over a packed batch. Pointers are device pointers.
struct LaunchArgs {
  const void* const* in = nullptr;  // one per node input; nullptr for an absent optional input
  void* const* out = nullptr;       // one per node output
  int rows = 0;                     // rows of the op's first input (tokens or sequences)
  int batch = 0;                    // sequences in the batch
  int max_seqlen = 0;
  const int32_t* cu_seqlens = nullptr;  // [batch + 1]
  void* scratch = nullptr;              // ScratchBytes() bytes
};

class PreparedOp {
 public:
  virtual ~PreparedOp() = default;
  virtual void Run(const LaunchArgs& args) const = 0;
  // Scratch this op needs at the profile's maximum.
  virtual size_t ScratchBytes(int max_tokens, int max_seqlen) const { return 0; }
  // "fp32", "bf16", ...: the precision the op computes in (for inspect).
  virtual std::string precision() const = 0;
};

// Shapes an op runs on, known at prepare time. Rows vary per launch; inner sizes do not.
struct OpShapes {
  std::vector<int64_t> in_inner;   // per input: elements per row (0 for an absent input)
  std::vector<bool> in_const;      // per input: a constant (weights) rather than an activation
  std::vector<int64_t> out_inner;  // per output: elements per row
};

// A whole fused graph run at once (e.g. a graph-captured encoder on CUDA). A backend that
// recognises a plan's graph returns one from PrepareGraph; the runtime then uses it instead of
// per-node ops. One GraphRunnerContext per engine Context (it owns that context's scratch).
class GraphRunnerContext {
 public:
  virtual ~GraphRunnerContext() = default;
  // `batch` has been validated (offsets, profile, vocabulary). Fills `outputs` in the order and
  // packed shapes of PlanInfo::outputs (per-sequence [batch, ...], per-token [tokens, ...]).
  virtual void Run(const PackedBatch& batch, std::vector<Output>* outputs) = 0;
};

class GraphRunner {
 public:
  virtual ~GraphRunner() = default;
  virtual std::unique_ptr<GraphRunnerContext> CreateContext() const = 0;
  // Chooses (times, when tuning) and records the implementations for batches of these shapes
  // (batch x longest sequence) now, off the hot path: build time and warm-up.
  virtual void Warmup(const std::vector<std::pair<int, int>>& batch_x_seq) {}
  // The choices made so far as text for the plan (read back by PrepareGraph through
  // GraphOptions::tuning on the same hardware); "" when the runner records none.
  virtual std::string TuningRecord() const { return ""; }
  // One line for logs and `inspect`, e.g. "cuda encoder fp16: 12 layers, hidden 768, GPU 0".
  virtual std::string Describe() const = 0;
};

// How PrepareGraph prepares a runner.
struct GraphOptions {
  int device = 0;            // the device this runner's memory and contexts live on
  bool tune = true;          // time candidate implementations on first use of a shape
  std::string tuning;        // choices a build recorded (GraphRunner::TuningRecord), may be ""
  std::string timing_cache;  // optional file of timings, read now and updated after tuning
  // Token ids of calibration text (a build's --calib), for runners that calibrate activation
  // ranges themselves (the CUDA FP8 encoder); empty at load (plans carry their ranges).
  std::vector<std::vector<int32_t>> calib_sequences;
  // FP8 builds (the CUDA encoder): the weight scaling ("per_tensor" | "per_channel", "" = the
  // default) and the fast-accumulation K bound (-1 = the default); a plan's record wins at load.
  std::string fp8_weight_scaling;
  int fp8_fast_accum_max_k = -1;
  // INT8 plans (the CUDA encoder): the calibrated |x| range of each quantised GEMM input,
  // [layers][4] (qkv, attention output, FFN1, FFN2 inputs), from the plan's int8 record
  // (quant_internal.h RecordEncoderInt8Ranges); the scales a runner recorded win at load.
  std::vector<float> int8_act_amax;
  std::string int8_calib;  // where those ranges came from, for the runner's description
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;
  // What a plan built here must match to load here (backend, cpu_isa / gpu, sm, ...).
  virtual std::map<std::string, std::string> Fingerprint() const = 0;
  // Throws hotline::Error when this backend cannot run the precision on this hardware.
  virtual void CheckPrecision(Precision precision) const = 0;
  // Whether Prepare accepts this node (op type and attributes) at this precision.
  virtual bool SupportsOp(const Node& node, Precision precision) const = 0;

  virtual void* Allocate(size_t bytes) = 0;
  virtual void Free(void* ptr) = 0;
  virtual void CopyToDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual void CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  virtual void Synchronize() = 0;

  // Prepares `node`; constant inputs are read from `weights` now and not referenced later.
  virtual std::unique_ptr<PreparedOp> Prepare(const Node& node, const Graph& weights,
                                              const OpShapes& shapes, Precision precision) = 0;

  // Optional whole-graph path; nullptr (the default) means "run node by node". Constants are read
  // now and not referenced later.
  // Throws hotline::Error when the graph matches but cannot run here (precision, sizes).
  virtual std::unique_ptr<GraphRunner> PrepareGraph(const Graph& graph, const PlanInfo& info,
                                                    const GraphOptions& options) {
    return nullptr;
  }
  // Build-time tuning: a file of GEMM timings that TimeGemm reads (a hit skips timing) and
  // extends. Keyed by the hardware fingerprint, shape, precision and epilogue; "" means none.
  virtual void UseTimingCache(const std::string& path) {}

  // Build-time tuning: the GEMM implementations this backend can choose between, and the time
  // of one candidate on one shape (milliseconds, best of a few runs).
  virtual std::vector<int> GemmTactics(Precision precision) const = 0;
  virtual std::string TacticName(int tactic) const = 0;
  virtual double TimeGemm(int tactic, int M, int K, int N, Precision precision) = 0;
};

// The backend registry. Throws hotline::Error naming the backend when it is not built into this
// binary or has no device here; never falls back to another backend.
std::unique_ptr<Backend> CreateBackend(BackendKind kind, int device = 0);

}  // namespace hotline::engine
