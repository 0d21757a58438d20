#include "serving/batch_policy.h"

#include <algorithm>

namespace hotline::serving {

BatchDecision DecideBatch(const BatchingOptions& options, std::span<const QueuedItem> queue,
                          TimePoint now) {
  BatchDecision d;
  const size_t max_size = static_cast<size_t>(std::max(1, options.max_batch_size));
  int tokens = 0;
  bool full = false;
  bool urgent = false;
  TimePoint oldest = TimePoint::max();
  TimePoint earliest_deadline = TimePoint::max();
  for (size_t i = 0; i < queue.size(); ++i) {
    const QueuedItem& item = queue[i];
    if (item.deadline <= now) {
      d.expired.push_back(i);
      continue;
    }
    earliest_deadline = std::min(earliest_deadline, item.deadline);
    if (full) continue;  // keep scanning for expired requests only
    const bool fits = d.run.empty() ||
                      (d.run.size() < max_size && tokens + item.tokens <= options.max_batch_tokens);
    if (!fits) {
      full = true;
      continue;
    }
    d.run.push_back(i);
    tokens += item.tokens;
    oldest = std::min(oldest, item.enqueued);
    if (item.deadline - now <= options.max_queue_delay) urgent = true;
    if (d.run.size() == max_size) full = true;
  }
  if (d.run.empty()) return d;
  const TimePoint delay_end = oldest + options.max_queue_delay;
  if (full || urgent || delay_end <= now) return d;
  d.wake_at = std::min(delay_end, earliest_deadline);
  d.run.clear();
  return d;
}

}  // namespace hotline::serving
