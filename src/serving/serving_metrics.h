// The serving layer's metric families (names and labels are a contract with dashboards and
// deploy/prometheus; extend, never rename).
#pragma once

#include <string>

#include "serving/metrics.h"

namespace hotline::serving {

struct ServingMetrics {
  explicit ServingMetrics(MetricsRegistry& r);

  // One per understood text: {model, intent ("" on error), code (e.g. "OK", "DEADLINE_EXCEEDED")}.
  Family<Counter>& requests;
  // Per call, from admission to reply: {model}.
  Family<Histogram>& request_seconds;
  // Per text, from admission to the start of its execution: {model}.
  Family<Histogram>& queue_seconds;
  // Per execution (one model call on a batch): {model}.
  Family<Histogram>& compute_seconds;
  Family<Histogram>& batch_size;    // sequences per execution {model}
  Family<Histogram>& batch_tokens;  // estimated tokens per execution {model}
  Family<Gauge>& queue_depth;       // queued, not yet executing {model}
  Family<Gauge>& in_flight;         // executing now {model}
  // One-hot per model: {model, state} with state unloaded|loading|ready|failed.
  Family<Gauge>& model_state;
  Family<Gauge>& model_memory;       // bytes {model}
  Family<Counter>& inferences;       // texts executed {model}
  Family<Counter>& executions;       // model calls {model}; inferences/executions = mean batch
  Family<Counter>& model_loads;      // {model, result="ok"|"failed"}
  Family<Counter>& model_evictions;  // {model}
};

}  // namespace hotline::serving
