// The dynamic batcher's decision, as a pure function: (options, queue snapshot, now, cost
// estimate) → which requests to run together now, which have expired, or how long to wait. No
// threads, no clocks: the plumbing in batcher.h calls it under its lock with steady_clock::now();
// tests call it with hand-made times.
#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <vector>

namespace hotline::serving {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;
using Duration = Clock::duration;

// Priority classes: dialog turns (a caller is waiting on the line) run before bulk understanding.
enum class Priority { kInteractive = 0, kBulk = 1 };

struct BatchingOptions {
  int max_batch_size = 32;      // sequences per execution
  int max_batch_tokens = 4096;  // estimated tokens per execution (a lone larger request still runs)
  Duration max_queue_delay = std::chrono::microseconds(2000);  // longest wait to fill a batch
  int max_queue_size = 1024;  // queued requests beyond this are refused (RESOURCE_EXHAUSTED)
  // The queue bounded in time: a request whose estimated wait (the measured cost of the work
  // ahead of it) exceeds this is refused with RESOURCE_EXHAUSTED. Zero: no bound.
  Duration max_queue_wait = std::chrono::milliseconds(1000);
};

// A batch's run time as measured: fixed + per_token × tokens, fitted to the executions seen by
// exponentially weighted least squares (recent executions count most, so a slower or faster
// machine is followed within tens of batches). Not thread-safe; the batcher guards it.
class CostModel {
 public:
  void Observe(int tokens, double seconds);
  bool known() const { return n_ > 0; }
  int observations() const { return n_; }
  double fixed_seconds() const { return fixed_; }
  double per_token_seconds() const { return per_token_; }
  // Estimated time of `executions` model calls holding `tokens` tokens in all (0 when unknown).
  Duration Estimate(long tokens, long executions = 1) const;

 private:
  double w_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;
  double fixed_ = 0, per_token_ = 0;
  int n_ = 0;
};

// What the policy sees of one queued request.
struct QueuedItem {
  TimePoint enqueued;
  TimePoint deadline = TimePoint::max();  // TimePoint::max(): none
  int tokens = 1;
  Priority priority = Priority::kBulk;
};

struct BatchDecision {
  // Indices into the snapshot of requests whose deadline has passed: answer DEADLINE_EXCEEDED.
  std::vector<size_t> expired;
  // Indices of requests that cannot finish in time even alone (deadline < now + the estimated
  // run of their own tokens): answered DEADLINE_EXCEEDED without running.
  std::vector<size_t> doomed;
  // Indices to execute now as one batch, interactive before bulk, each class in queue order.
  // Empty: nothing to run yet.
  std::vector<size_t> run;
  // When `run` is empty: decide again no later than this (TimePoint::max(): only when a request
  // arrives).
  TimePoint wake_at = TimePoint::max();
};

// Rules, in order:
//  1. Requests with deadline <= now are expired. With a known cost (and `probe` false), requests
//     whose deadline falls before now + Estimate(own tokens) are doomed. `probe` (nothing is
//     executing) exempts them, so that an estimate that has become too high is corrected by a
//     fresh execution instead of refusing everything forever.
//  2. The candidate batch takes live requests, interactive ones first and each class first in,
//     first out (no skipping within a class), while it holds fewer than max_batch_size, the next
//     request's tokens fit in max_batch_tokens, and (with a known cost) the batch would still
//     finish before every member's deadline. The first live request is always taken.
//  3. The candidate runs now when it is full (one of the limits of rule 2 reached), when its
//     oldest request has waited max_queue_delay, or when one of its requests would pass its
//     deadline (less the batch's estimated run) before the wait ends.
//  4. Otherwise wait until the oldest request's delay ends or the earliest deadline in the queue
//     passes, whichever is first.
BatchDecision DecideBatch(const BatchingOptions& options, std::span<const QueuedItem> queue,
                          TimePoint now, const CostModel* cost = nullptr, bool probe = false);

}  // namespace hotline::serving
