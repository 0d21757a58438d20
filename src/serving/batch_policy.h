// The dynamic batcher's decision, as a pure function: (options, queue snapshot, now) → which
// requests to run together now, which have expired, or how long to wait. No threads, no clocks:
// the plumbing in batcher.h calls it under its lock with steady_clock::now(); tests call it with
// hand-made times.
#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <vector>

namespace hotline::serving {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;
using Duration = Clock::duration;

struct BatchingOptions {
  int max_batch_size = 32;      // sequences per execution
  int max_batch_tokens = 4096;  // estimated tokens per execution (a lone larger request still runs)
  Duration max_queue_delay = std::chrono::microseconds(2000);  // longest wait to fill a batch
  int max_queue_size = 1024;  // queued requests beyond this are refused (RESOURCE_EXHAUSTED)
};

// What the policy sees of one queued request.
struct QueuedItem {
  TimePoint enqueued;
  TimePoint deadline = TimePoint::max();  // TimePoint::max(): none
  int tokens = 1;
};

struct BatchDecision {
  // Indices into the snapshot of requests whose deadline has passed: answer DEADLINE_EXCEEDED.
  std::vector<size_t> expired;
  // Indices to execute now as one batch, in queue order. Empty: nothing to run yet.
  std::vector<size_t> run;
  // When `run` is empty: decide again no later than this (TimePoint::max(): only when a request
  // arrives).
  TimePoint wake_at = TimePoint::max();
};

// Rules, in order:
//  1. Requests with deadline <= now are expired.
//  2. The candidate batch takes live requests from the front of the queue (FIFO, no skipping, so
//     nobody starves) while it holds fewer than max_batch_size and the next request's tokens fit
//     in max_batch_tokens. The first live request is always taken.
//  3. The candidate runs now when it is full (max_batch_size reached, or the next request does not
//     fit), when its oldest request has waited max_queue_delay, or when one of its requests would
//     pass its deadline before the wait ends.
//  4. Otherwise wait until the oldest request's delay ends or the earliest deadline in the queue
//     passes, whichever is first.
BatchDecision DecideBatch(const BatchingOptions& options, std::span<const QueuedItem> queue,
                          TimePoint now);

}  // namespace hotline::serving
