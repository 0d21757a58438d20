#include "serving/batch_policy.h"

#include <algorithm>
#include <cmath>

namespace hotline::serving {

void CostModel::Observe(int tokens, double seconds) {
  if (tokens <= 0 || !(seconds >= 0) || !std::isfinite(seconds)) return;
  constexpr double kDecay = 0.9;  // an observation's weight halves after ~7 executions
  const double x = tokens, y = seconds;
  w_ = kDecay * w_ + 1;
  sx_ = kDecay * sx_ + x;
  sy_ = kDecay * sy_ + y;
  sxx_ = kDecay * sxx_ + x * x;
  sxy_ = kDecay * sxy_ + x * y;
  ++n_;
  const double var = w_ * sxx_ - sx_ * sx_;
  // Batches of (nearly) one size say nothing of the fixed part: the cost is then per token only.
  if (var > 1e-6 * w_ * sxx_) {
    per_token_ = (w_ * sxy_ - sx_ * sy_) / var;
    fixed_ = (sy_ - per_token_ * sx_) / w_;
  } else {
    per_token_ = -1;
  }
  if (per_token_ < 0 || fixed_ < 0) {
    per_token_ = sy_ / sx_;
    fixed_ = 0;
  }
}

Duration CostModel::Estimate(long tokens, long executions) const {
  if (n_ == 0) return Duration::zero();
  const double s =
      fixed_ * double(std::max(0L, executions)) + per_token_ * double(std::max(0L, tokens));
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s));
}

BatchDecision DecideBatch(const BatchingOptions& options, std::span<const QueuedItem> queue,
                          TimePoint now, const CostModel* cost, bool probe) {
  BatchDecision d;
  const bool costed = cost && cost->known();
  const size_t max_size = static_cast<size_t>(std::max(1, options.max_batch_size));
  TimePoint earliest_deadline = TimePoint::max();
  std::vector<size_t> live[2];
  for (size_t i = 0; i < queue.size(); ++i) {
    const QueuedItem& item = queue[i];
    if (item.deadline <= now) {
      d.expired.push_back(i);
    } else if (costed && !probe && item.deadline != TimePoint::max() &&
               item.deadline - now < cost->Estimate(item.tokens)) {
      d.doomed.push_back(i);
    } else {
      earliest_deadline = std::min(earliest_deadline, item.deadline);
      live[item.priority == Priority::kInteractive ? 0 : 1].push_back(i);
    }
  }
  int tokens = 0;
  bool full = false;
  TimePoint oldest = TimePoint::max();
  TimePoint batch_deadline = TimePoint::max();  // the earliest deadline among the members
  for (const std::vector<size_t>& cls : live) {
    for (size_t i : cls) {
      if (full) break;
      const QueuedItem& item = queue[i];
      if (!d.run.empty()) {
        const TimePoint must_end = std::min(batch_deadline, item.deadline);
        const bool in_time = !costed || must_end == TimePoint::max() ||
                             must_end - now >= cost->Estimate(tokens + item.tokens);
        if (d.run.size() >= max_size || tokens + item.tokens > options.max_batch_tokens ||
            !in_time) {
          full = true;
          break;
        }
      }
      d.run.push_back(i);
      tokens += item.tokens;
      oldest = std::min(oldest, item.enqueued);
      batch_deadline = std::min(batch_deadline, item.deadline);
      if (d.run.size() == max_size) full = true;
    }
  }
  if (d.run.empty()) return d;
  const Duration run_time = costed ? cost->Estimate(tokens) : Duration::zero();
  const bool urgent = batch_deadline != TimePoint::max() &&
                      batch_deadline - now - run_time <= options.max_queue_delay;
  const TimePoint delay_end = oldest + options.max_queue_delay;
  if (full || urgent || delay_end <= now) return d;
  d.wake_at = std::min(delay_end, earliest_deadline);
  d.run.clear();
  return d;
}

}  // namespace hotline::serving
