#include "serving/batcher.h"

#include <algorithm>
#include <exception>
#include <map>

namespace hotline::serving {
namespace {

double Seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

Batcher::Batcher(std::string model_name, ServableModel* model, BatchingOptions options,
                 int instances, ServingMetrics* metrics)
    : model_name_(std::move(model_name)), model_(model), options_(options), metrics_(metrics) {
  if (metrics_) {
    queue_depth_gauge_ = &metrics_->queue_depth.WithLabels({model_name_});
    in_flight_gauge_ = &metrics_->in_flight.WithLabels({model_name_});
  }
  for (int i = 0; i < std::max(1, instances); ++i) workers_.emplace_back([this] { WorkerLoop(); });
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
    if (queue_.size() + items.size() > size_t(options_.max_queue_size)) {
      return Status(Code::kResourceExhausted,
                    "model " + model_name_ + " queue is full (" + std::to_string(queue_.size()) +
                        " of " + std::to_string(options_.max_queue_size) +
                        " queued); retry later or lower the request rate");
    }
    for (WorkItem& item : items) queue_.push_back(std::move(item));
    if (queue_depth_gauge_) queue_depth_gauge_->Set(double(queue_.size()));
  }
  work_cv_.notify_one();
  return Status::Ok();
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
    for (const WorkItem& w : queue_) snapshot.push_back({w.enqueued, w.deadline, w.tokens});
    BatchingOptions opts = options_;
    if (stopping_) opts.max_queue_delay = Duration::zero();  // drain: nothing more will come
    const BatchDecision d = DecideBatch(opts, snapshot, Clock::now());
    if (d.run.empty() && d.expired.empty()) {
      work_cv_.wait_until(lock, d.wake_at);
      continue;
    }
    // Move the chosen items out; indices are ascending, so erase from the back.
    std::vector<WorkItem> expired, batch;
    std::vector<size_t> take;
    for (size_t i : d.expired) expired.push_back(std::move(queue_[i]));
    for (size_t i : d.run) batch.push_back(std::move(queue_[i]));
    take.insert(take.end(), d.expired.begin(), d.expired.end());
    take.insert(take.end(), d.run.begin(), d.run.end());
    std::sort(take.rbegin(), take.rend());
    for (size_t i : take) queue_.erase(queue_.begin() + std::ptrdiff_t(i));
    in_flight_ += int(batch.size());
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
    if (!batch.empty()) Execute(batch);
    lock.lock();
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
