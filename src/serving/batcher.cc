#include "serving/batcher.h"

#include <algorithm>
#include <exception>
#include <map>

namespace hotline::serving {
namespace {

double Seconds(Duration d) { return std::chrono::duration<double>(d).count(); }
std::string Ms(Duration d) {
  return std::to_string(
      std::max<long long>(0, std::chrono::duration_cast<std::chrono::milliseconds>(d).count()));
}

}  // namespace

Batcher::Batcher(std::string model_name, ServableModel* model, BatchingOptions options,
                 int instances, ServingMetrics* metrics)
    : model_name_(std::move(model_name)),
      model_(model),
      options_(options),
      instances_(std::max(1, instances)),
      metrics_(metrics) {
  if (metrics_) {
    queue_depth_gauge_ = &metrics_->queue_depth.WithLabels({model_name_});
    in_flight_gauge_ = &metrics_->in_flight.WithLabels({model_name_});
  }
  for (int i = 0; i < instances_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

Batcher::~Batcher() { Stop(); }

Status Batcher::Enqueue(std::vector<WorkItem> items) {
  const TimePoint now = Clock::now();
  for (WorkItem& item : items) {
    item.enqueued = now;
    if (item.tokens <= 0) item.tokens = EstimateTokens(item.text, model_->max_length());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      return Status(Code::kUnavailable, "model " + model_name_ + " is shutting down; retry");
    }
    TimePoint predicted = TimePoint::max();
    if (Status st = Admit(items, now, &predicted); !st.ok()) return st;
    for (WorkItem& item : items) item.predicted_finish = predicted;
    for (WorkItem& item : items) queue_.push_back(std::move(item));
    if (queue_depth_gauge_) queue_depth_gauge_->Set(double(queue_.size()));
  }
  work_cv_.notify_one();
  return Status::Ok();
}

Status Batcher::Admit(const std::vector<WorkItem>& items, TimePoint now,
                      TimePoint* predicted) const {
  if (queue_.size() + items.size() > size_t(options_.max_queue_size)) {
    return Status(Code::kResourceExhausted, "model " + model_name_ + " queue is full (" +
                                                std::to_string(queue_.size()) + " of " +
                                                std::to_string(options_.max_queue_size) +
                                                " queued); retry later or lower the request rate");
  }
  long own_tokens = 0;
  TimePoint deadline = TimePoint::max();
  for (const WorkItem& item : items) {
    own_tokens += item.tokens;
    deadline = std::min(deadline, item.deadline);
  }
  if (deadline <= now) {
    return Status(Code::kDeadlineExceeded,
                  "the deadline passed before the request reached model " + model_name_);
  }
  if (items.empty() || !cost_.known()) return Status::Ok();
  const Priority priority = items.front().priority;
  // The work that runs before these items: queued items of their class and above.
  long ahead_tokens = 0, ahead = 0;
  for (const WorkItem& w : queue_) {
    if (w.priority <= priority) ahead_tokens += w.tokens, ++ahead;
  }
  const bool idle = int(busy_until_.size()) < instances_;
  if (ahead == 0 && Probe(now)) return Status::Ok();  // its execution refreshes the cost
  Duration busy = Duration::zero();
  if (!idle) {
    busy =
        std::max(Duration::zero(), *std::min_element(busy_until_.begin(), busy_until_.end()) - now);
  }
  const long batch = std::max(1, options_.max_batch_size);
  // Scaled by how the predictions compared with the answers (CPU shared with other work,
  // hand-offs between threads: what the model's execution time alone does not see).
  const auto scaled = [this](Duration d) {
    return std::chrono::duration_cast<Duration>(d * latency_factor_);
  };
  const Duration wait =
      scaled(busy + cost_.Estimate(ahead_tokens, (ahead + batch - 1) / batch) / instances_);
  if (options_.max_queue_wait > Duration::zero() && wait > options_.max_queue_wait) {
    return Status(Code::kResourceExhausted,
                  "model " + model_name_ + " has about " + Ms(wait) +
                      " ms of work queued, over its max_queue_wait_ms of " +
                      Ms(options_.max_queue_wait) + "; retry later or lower the request rate");
  }
  const long n = long(items.size());
  const Duration finish =
      scaled(busy + cost_.Estimate(ahead_tokens + own_tokens, (ahead + n + batch - 1) / batch) /
                        instances_);
  *predicted = now + finish;
  if (deadline == TimePoint::max()) return Status::Ok();
  const Duration alone = cost_.Estimate(own_tokens, (n + batch - 1) / batch);
  if (deadline - now < alone) {
    return Status(Code::kDeadlineExceeded,
                  "the deadline leaves " + Ms(deadline - now) + " ms, and model " + model_name_ +
                      " needs about " + Ms(alone) + " ms to run this request; give it more time");
  }
  // A margin for the prediction's spread (half of it), and the wait for the batch to fill.
  if (deadline - now < finish + finish / 2 + options_.max_queue_delay) {
    return Status(Code::kResourceExhausted,
                  "model " + model_name_ + " would answer in about " + Ms(finish) +
                      " ms, which with half again for the estimate's spread is more than the " +
                      Ms(deadline - now) +
                      " ms the deadline leaves; retry later or lower the request rate");
  }
  return Status::Ok();
}

CostModel Batcher::cost() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cost_;
}

void Batcher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && workers_.empty()) return;
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
  std::lock_guard<std::mutex> lock(mu_);
  workers_.clear();
}

void Batcher::Flush() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    flushing_ = true;
  }
  work_cv_.notify_all();
}

bool Batcher::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.empty() && in_flight_ == 0;
}

bool Batcher::accepting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !stopping_;
}

size_t Batcher::queue_depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void Batcher::WorkerLoop() {
  std::vector<QueuedItem> snapshot;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (queue_.empty()) {
      if (stopping_) return;
      work_cv_.wait(lock);
      continue;
    }
    snapshot.clear();
    for (const WorkItem& w : queue_) {
      snapshot.push_back({w.enqueued, w.deadline, w.tokens, w.priority});
    }
    BatchingOptions opts = options_;
    // Draining: nothing more will come.
    if (stopping_ || flushing_) opts.max_queue_delay = Duration::zero();
    const TimePoint now = Clock::now();
    const BatchDecision d = DecideBatch(opts, snapshot, now, &cost_, Probe(now));
    if (d.run.empty() && d.expired.empty() && d.doomed.empty()) {
      work_cv_.wait_until(lock, d.wake_at);
      continue;
    }
    // Move the chosen items out; indices are ascending, so erase from the back.
    std::vector<WorkItem> expired, doomed, batch;
    std::vector<size_t> take;
    int batch_tokens = 0;
    for (size_t i : d.expired) expired.push_back(std::move(queue_[i]));
    for (size_t i : d.doomed) doomed.push_back(std::move(queue_[i]));
    for (size_t i : d.run) {
      batch_tokens += queue_[i].tokens;
      batch.push_back(std::move(queue_[i]));
    }
    take.insert(take.end(), d.expired.begin(), d.expired.end());
    take.insert(take.end(), d.doomed.begin(), d.doomed.end());
    take.insert(take.end(), d.run.begin(), d.run.end());
    std::sort(take.rbegin(), take.rend());
    for (size_t i : take) queue_.erase(queue_.begin() + std::ptrdiff_t(i));
    in_flight_ += int(batch.size());
    const TimePoint busy_until = now + cost_.Estimate(batch_tokens);
    if (!batch.empty()) busy_until_.push_back(busy_until);
    if (queue_depth_gauge_) queue_depth_gauge_->Set(double(queue_.size()));
    if (in_flight_gauge_) in_flight_gauge_->Set(double(in_flight_));
    const bool more = !queue_.empty();
    lock.unlock();
    if (more) work_cv_.notify_one();  // another idle instance may take the rest
    for (WorkItem& item : expired) {
      ItemResult r;
      r.status = Status(Code::kDeadlineExceeded,
                        "deadline passed after " +
                            std::to_string(int(Seconds(Clock::now() - item.enqueued) * 1000)) +
                            " ms in the queue of model " + model_name_);
      r.queue_seconds = Seconds(Clock::now() - item.enqueued);
      Answer(item, std::move(r));
    }
    for (WorkItem& item : doomed) {
      ItemResult r;
      r.status = Status(Code::kDeadlineExceeded,
                        "the deadline would pass before model " + model_name_ +
                            " could run the request (" + Ms(item.deadline - Clock::now()) +
                            " ms left after " + Ms(Clock::now() - item.enqueued) +
                            " ms in the queue); not run");
      r.queue_seconds = Seconds(Clock::now() - item.enqueued);
      Answer(item, std::move(r));
    }
    if (!batch.empty()) Execute(batch);
    lock.lock();
    if (!batch.empty()) {
      busy_until_.erase(std::find(busy_until_.begin(), busy_until_.end(), busy_until));
      last_run_end_ = Clock::now();
    }
    in_flight_ -= int(batch.size());
    if (in_flight_gauge_) in_flight_gauge_->Set(double(in_flight_));
  }
}

void Batcher::Answer(WorkItem& item, ItemResult r) {
  try {
    item.done(std::move(r));
  } catch (...) {
    // A callback that throws is a bug in the caller; the worker must survive it.
  }
}

void Batcher::Execute(std::vector<WorkItem>& batch) {
  const TimePoint start = Clock::now();
  // Cancelled callers get CANCELLED and cost no compute.
  std::vector<WorkItem*> live;
  for (WorkItem& item : batch) {
    if (item.cancelled && item.cancelled()) {
      ItemResult r;
      r.status = Status(Code::kCancelled, "the caller cancelled the request");
      r.queue_seconds = Seconds(start - item.enqueued);
      Answer(item, std::move(r));
    } else {
      live.push_back(&item);
    }
  }
  if (live.empty()) return;
  // One model call per distinct explicit reference time (usually one call for the whole batch).
  const auto now_wall = std::chrono::system_clock::now();
  std::map<std::chrono::system_clock::time_point, std::vector<WorkItem*>> groups;
  for (WorkItem* item : live) groups[item->reference_time.value_or(now_wall)].push_back(item);

  for (auto& [reference, items] : groups) {
    std::vector<std::string> texts;
    int tokens = 0;
    for (WorkItem* item : items) {
      texts.push_back(item->text);
      tokens += item->tokens;
    }
    const TimePoint t0 = Clock::now();
    std::vector<nlu::Understanding> out;
    Status status;
    try {
      out = model_->Understand(texts, reference);
      if (out.size() != texts.size()) {
        status = Status(Code::kInternal, "model " + model_name_ + " returned " +
                                             std::to_string(out.size()) + " results for " +
                                             std::to_string(texts.size()) + " texts");
      }
    } catch (const Error& e) {
      status = Status::FromError(e);
    } catch (const std::exception& e) {
      status = Status(Code::kInternal, std::string("model execution failed: ") + e.what());
    }
    const TimePoint t1 = Clock::now();
    const double compute = Seconds(t1 - t0);
    executions_.fetch_add(1);
    inferences_.fetch_add(texts.size());
    if (status.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      cost_.Observe(tokens, compute);
      for (WorkItem* item : items) {
        if (item->predicted_finish == TimePoint::max()) continue;
        const Duration predicted = item->predicted_finish - item->enqueued;
        if (predicted < std::chrono::milliseconds(1)) continue;  // too short to compare
        // What the prediction missed (this answer's latency over the unscaled prediction).
        const double ratio = latency_factor_ * Seconds(t1 - item->enqueued) / Seconds(predicted);
        latency_factor_ = std::clamp(0.95 * latency_factor_ + 0.05 * ratio, 1.0, 8.0);
      }
    }
    if (metrics_) {
      metrics_->executions.WithLabels({model_name_}).Inc();
      metrics_->inferences.WithLabels({model_name_}).Inc(double(texts.size()));
      metrics_->batch_size.WithLabels({model_name_}).Observe(double(texts.size()));
      metrics_->batch_tokens.WithLabels({model_name_}).Observe(double(tokens));
      metrics_->compute_seconds.WithLabels({model_name_}).Observe(compute);
    }
    if (!status.ok() && items.size() > 1) {
      // Isolate the failure: a request must not fail because another one in its batch did.
      for (WorkItem* item : items) {
        std::vector<WorkItem> single;
        single.push_back(std::move(*item));
        single.back().reference_time = reference;
        Execute(single);
      }
      continue;
    }
    for (size_t i = 0; i < items.size(); ++i) {
      ItemResult r;
      r.status = status;
      if (status.ok()) r.understanding = std::move(out[i]);
      r.queue_seconds = Seconds(t0 - items[i]->enqueued);
      r.compute_seconds = compute;
      r.batch_size = int(items.size());
      if (metrics_) metrics_->queue_seconds.WithLabels({model_name_}).Observe(r.queue_seconds);
      Answer(*items[i], std::move(r));
    }
  }
}

}  // namespace hotline::serving
