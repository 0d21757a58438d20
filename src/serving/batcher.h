// The threaded plumbing around DecideBatch(): one bounded queue per model version and
// `instances` worker threads, each of which takes the batch the policy chooses and executes it on
// the model. Every admitted item's `done` is called exactly once, from a worker thread.
// Admission is deadline-aware: each execution's time feeds a CostModel, and Enqueue() refuses at
// once what the queue ahead (in the item's priority class and above) cannot finish in time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "serving/batch_policy.h"
#include "serving/model.h"
#include "serving/serving_metrics.h"

namespace hotline::serving {

struct ItemResult {
  Status status;
  nlu::Understanding understanding;
  double queue_seconds = 0;    // admission to execution start
  double compute_seconds = 0;  // duration of the execution that included this item
  int batch_size = 0;          // texts in that execution
};

struct WorkItem {
  std::string text;
  int tokens = 0;  // EstimateTokens(text); Enqueue() fills it when 0
  Priority priority = Priority::kBulk;
  TimePoint enqueued{};
  TimePoint deadline = TimePoint::max();
  // Unset: the execution's wall-clock time. Items with different explicit reference times run in
  // separate model calls of the same batch.
  std::optional<std::chrono::system_clock::time_point> reference_time;
  TimePoint predicted_finish = TimePoint::max();  // set at admission when the cost is known
  std::function<bool()> cancelled;                // optional; checked just before execution
  std::function<void(ItemResult)> done;           // required; must not throw
};

class Batcher {
 public:
  // `model` must outlive the batcher. `metrics` may be null.
  Batcher(std::string model_name, ServableModel* model, BatchingOptions options, int instances,
          ServingMetrics* metrics);
  ~Batcher();  // Stop()
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Admits all items or none; on refusal no `done` is called. Sets `enqueued` to now. Refusals:
  //  UNAVAILABLE after Stop();
  //  RESOURCE_EXHAUSTED when the queue lacks room (max_queue_size), when the estimated wait for
  //    the work ahead exceeds max_queue_wait, or when the items would finish after their
  //    deadline because of the work ahead;
  //  DEADLINE_EXCEEDED when the deadline is shorter than the estimated run of the items alone.
  // The estimates need one execution. Items whose deadline has passed are always refused. When
  // nothing is queued ahead, nothing executes and nothing has run for a second, items are
  // admitted whatever the estimate (a probe: a stale estimate that refuses everything would
  // otherwise never be corrected).
  Status Enqueue(std::vector<WorkItem> items);

  // Stops admission, executes everything already queued (ignoring max_queue_delay), joins the
  // workers. Idempotent. Must not be called from a `done` callback.
  void Stop();

  // From now on batches run without waiting to fill (max_queue_delay 0); admission goes on.
  void Flush();

  bool idle() const;       // nothing queued or executing
  bool accepting() const;  // false once Stop() has begun
  size_t queue_depth() const;
  uint64_t executions() const { return executions_.load(); }
  uint64_t inferences() const { return inferences_.load(); }
  CostModel cost() const;  // a copy of the current estimate

 private:
  void WorkerLoop();
  void Execute(std::vector<WorkItem>& batch);
  void Answer(WorkItem& item, ItemResult r);
  // Under mu_. *predicted: the estimated answer time (left alone when unknown).
  Status Admit(const std::vector<WorkItem>& items, TimePoint now, TimePoint* predicted) const;

  const std::string model_name_;
  ServableModel* const model_;
  const BatchingOptions options_;
  const int instances_;
  ServingMetrics* const metrics_;
  Gauge* queue_depth_gauge_ = nullptr;
  Gauge* in_flight_gauge_ = nullptr;

  mutable std::mutex mu_;            // guards queue_, in_flight_, stopping_, cost_, busy_until_
  std::condition_variable work_cv_;  // signalled on admission and on Stop()
  std::deque<WorkItem> queue_;
  int in_flight_ = 0;
  CostModel cost_;
  std::vector<TimePoint> busy_until_;  // per executing batch: its start + its estimated run
  TimePoint last_run_end_{};           // when the last execution ended
  // Answers' latency over the cost model's prediction at admission (EWMA, 1..8): the model's
  // execution time alone misses the CPU shared with other work and the thread hand-offs.
  double latency_factor_ = 1.0;
  bool Probe(TimePoint now) const {  // under mu_
    return busy_until_.empty() && now - last_run_end_ >= std::chrono::seconds(1);
  }
  bool stopping_ = false;
  bool flushing_ = false;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> executions_{0}, inferences_{0};
};

}  // namespace hotline::serving
