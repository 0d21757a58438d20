#include "serving/serving_metrics.h"

namespace hotline::serving {

ServingMetrics::ServingMetrics(MetricsRegistry& r)
    : requests(r.AddCounter("hotline_requests_total", "Texts answered, by model, intent and code",
                            {"model", "intent", "code"})),
      request_seconds(r.AddHistogram("hotline_request_duration_seconds",
                                     "End-to-end time of a call in the serving core", {"model"},
                                     LatencyBuckets())),
      queue_seconds(r.AddHistogram("hotline_queue_duration_seconds",
                                   "Time a text waited in the batcher's queue", {"model"},
                                   LatencyBuckets())),
      compute_seconds(r.AddHistogram("hotline_compute_duration_seconds",
                                     "Time of one model execution on a batch", {"model"},
                                     LatencyBuckets())),
      batch_size(r.AddHistogram("hotline_batch_size", "Sequences per execution", {"model"},
                                ExponentialBuckets(1, 2, 9))),
      batch_tokens(r.AddHistogram("hotline_batch_tokens", "Estimated tokens per execution",
                                  {"model"}, ExponentialBuckets(16, 2, 10))),
      queue_depth(
          r.AddGauge("hotline_queue_depth", "Texts waiting in the batcher's queue", {"model"})),
      in_flight(r.AddGauge("hotline_in_flight", "Texts executing now", {"model"})),
      model_state(r.AddGauge("hotline_model_state",
                             "1 for the model's current state (unloaded, loading, ready, failed)",
                             {"model", "state"})),
      model_memory(
          r.AddGauge("hotline_model_memory_bytes", "Memory held by the loaded model", {"model"})),
      inferences(r.AddCounter("hotline_inference_count_total", "Texts executed", {"model"})),
      executions(r.AddCounter("hotline_execution_count_total",
                              "Model executions (batches); inferences / executions is the mean "
                              "batch size",
                              {"model"})),
      model_loads(r.AddCounter("hotline_model_loads_total", "Model load attempts by result",
                               {"model", "result"})),
      model_evictions(r.AddCounter("hotline_model_evictions_total",
                                   "Idle models unloaded to stay within the memory budget",
                                   {"model"})) {}

}  // namespace hotline::serving
