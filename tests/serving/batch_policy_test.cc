// The batching policy, deterministically: hand-made queue snapshots and times, no threads.
#include "serving/batch_policy.h"

#include <gtest/gtest.h>

namespace hotline::serving {
namespace {

using std::chrono::milliseconds;
const TimePoint T0 = TimePoint() + std::chrono::hours(1);

BatchingOptions Opts(int max_batch, int max_tokens, int delay_ms) {
  BatchingOptions o;
  o.max_batch_size = max_batch;
  o.max_batch_tokens = max_tokens;
  o.max_queue_delay = milliseconds(delay_ms);
  return o;
}

QueuedItem Item(int enqueued_ms, int tokens = 10, int deadline_ms = -1) {
  QueuedItem q;
  q.enqueued = T0 + milliseconds(enqueued_ms);
  q.tokens = tokens;
  if (deadline_ms >= 0) q.deadline = T0 + milliseconds(deadline_ms);
  return q;
}

using Idx = std::vector<size_t>;

TEST(BatchPolicy, EmptyQueueWaitsForArrivals) {
  BatchDecision d = DecideBatch(Opts(8, 1000, 5), {}, T0);
  EXPECT_TRUE(d.run.empty());
  EXPECT_TRUE(d.expired.empty());
  EXPECT_EQ(d.wake_at, TimePoint::max());
}

TEST(BatchPolicy, WaitsUntilOldestDelayEnds) {
  std::vector<QueuedItem> q = {Item(0), Item(1)};
  BatchDecision d = DecideBatch(Opts(8, 1000, 5), q, T0 + milliseconds(2));
  EXPECT_TRUE(d.run.empty());
  EXPECT_EQ(d.wake_at, T0 + milliseconds(5));  // oldest (t=0) + 5 ms
  // At the wake time both run together.
  d = DecideBatch(Opts(8, 1000, 5), q, T0 + milliseconds(5));
  EXPECT_EQ(d.run, (Idx{0, 1}));
}

TEST(BatchPolicy, ZeroDelayRunsImmediately) {
  std::vector<QueuedItem> q = {Item(0)};
  BatchDecision d = DecideBatch(Opts(8, 1000, 0), q, T0);
  EXPECT_EQ(d.run, (Idx{0}));
}

TEST(BatchPolicy, FullBatchRunsBeforeDelay) {
  std::vector<QueuedItem> q = {Item(0), Item(0), Item(1), Item(1), Item(2)};
  BatchDecision d = DecideBatch(Opts(4, 1000, 50), q, T0 + milliseconds(2));
  EXPECT_EQ(d.run, (Idx{0, 1, 2, 3}));  // max_batch_size reached; the fifth waits
}

TEST(BatchPolicy, TokenBudgetClosesBatchInFifoOrder) {
  // 40 + 50 = 90 fits in 100; the third (30) does not, so the batch is full and runs now.
  // The fourth (5) would fit but is not taken past the third: no skipping, nobody starves.
  std::vector<QueuedItem> q = {Item(0, 40), Item(0, 50), Item(0, 30), Item(0, 5)};
  BatchDecision d = DecideBatch(Opts(8, 100, 50), q, T0);
  EXPECT_EQ(d.run, (Idx{0, 1}));
}

TEST(BatchPolicy, OversizedRequestStillRunsAlone) {
  std::vector<QueuedItem> q = {Item(0, 500), Item(0, 10)};
  BatchDecision d = DecideBatch(Opts(8, 100, 50), q, T0);
  EXPECT_EQ(d.run, (Idx{0}));
}

TEST(BatchPolicy, ExpiredRequestsAreReportedAndSkipped) {
  // Item 1's deadline (3 ms) has passed at t=4; items 0 and 2 are live.
  std::vector<QueuedItem> q = {Item(0), Item(1, 10, 3), Item(2)};
  BatchDecision d = DecideBatch(Opts(8, 1000, 10), q, T0 + milliseconds(4));
  EXPECT_EQ(d.expired, (Idx{1}));
  EXPECT_TRUE(d.run.empty());
  EXPECT_EQ(d.wake_at, T0 + milliseconds(10));
  // A deadline exactly at now counts as passed.
  d = DecideBatch(Opts(8, 1000, 10), q, T0 + milliseconds(3));
  EXPECT_EQ(d.expired, (Idx{1}));
}

TEST(BatchPolicy, NearDeadlineRunsNow) {
  // Delay 10 ms, but item 1 must finish by t=6: waiting until t=10 would miss it.
  std::vector<QueuedItem> q = {Item(0), Item(1, 10, 6)};
  BatchDecision d = DecideBatch(Opts(8, 1000, 10), q, T0 + milliseconds(1));
  EXPECT_EQ(d.run, (Idx{0, 1}));
}

TEST(BatchPolicy, DistantDeadlineWaitsNearOneRuns) {
  std::vector<QueuedItem> q = {Item(0, 10), Item(0, 10, 40)};
  BatchDecision d = DecideBatch(Opts(8, 1000, 20), q, T0 + milliseconds(1));
  EXPECT_TRUE(d.run.empty());
  EXPECT_EQ(d.wake_at, T0 + milliseconds(20));
  std::vector<QueuedItem> q2 = {Item(0, 10), Item(0, 10, 15)};
  // Deadline at 15 is within the 20 ms delay from t=1 → urgent → runs now.
  d = DecideBatch(Opts(8, 1000, 20), q2, T0 + milliseconds(1));
  EXPECT_EQ(d.run, (Idx{0, 1}));
}

TEST(BatchPolicy, ExpiredAndRunTogether) {
  std::vector<QueuedItem> q = {Item(0, 10, 1), Item(0), Item(0)};
  BatchDecision d = DecideBatch(Opts(2, 1000, 5), q, T0 + milliseconds(2));
  EXPECT_EQ(d.expired, (Idx{0}));
  EXPECT_EQ(d.run, (Idx{1, 2}));
}

// A simulated queue: arrivals every 1 ms, a policy decision at each millisecond, and batches of
// size <= max that preserve arrival order; every request is answered exactly once.
TEST(BatchPolicy, SimulationAnswersEveryRequestOnceInOrder) {
  const BatchingOptions o = Opts(4, 1000, 3);
  std::vector<QueuedItem> queue;
  std::vector<int> ids;  // parallel to queue
  std::vector<int> answered;
  int next_id = 0;
  for (int t = 0; t < 40; ++t) {
    if (t < 30) {
      queue.push_back(Item(t));
      ids.push_back(next_id++);
    }
    BatchDecision d = DecideBatch(o, queue, T0 + milliseconds(t));
    ASSERT_TRUE(d.expired.empty());
    if (d.run.empty()) {
      if (!queue.empty()) {
        ASSERT_GT(d.wake_at, T0 + milliseconds(t));
        ASSERT_LE(d.wake_at, T0 + milliseconds(t + 3));
      }
      continue;
    }
    ASSERT_LE(d.run.size(), 4u);
    for (size_t k = 0; k < d.run.size(); ++k) ASSERT_EQ(d.run[k], k);  // a prefix: FIFO
    // Nobody waited beyond the delay.
    ASSERT_LE(T0 + milliseconds(t) - queue[0].enqueued, milliseconds(3));
    for (size_t i : d.run) answered.push_back(ids[i]);
    queue.erase(queue.begin(), queue.begin() + std::ptrdiff_t(d.run.size()));
    ids.erase(ids.begin(), ids.begin() + std::ptrdiff_t(d.run.size()));
  }
  ASSERT_EQ(answered.size(), 30u);
  for (int i = 0; i < 30; ++i) EXPECT_EQ(answered[i], i);
}

// A cost model fed exact costs (2 ms fixed + 0.1 ms per token) recovers both parts.
CostModel Exact(double fixed_ms, double per_token_ms) {
  CostModel c;
  for (int tokens : {10, 40, 100, 20, 80, 60, 30})
    c.Observe(tokens, (fixed_ms + per_token_ms * tokens) / 1000);
  return c;
}

TEST(CostModel, FitsFixedAndPerTokenParts) {
  CostModel c;
  EXPECT_FALSE(c.known());
  EXPECT_EQ(c.Estimate(100), Duration::zero());
  c = Exact(2, 0.1);
  ASSERT_TRUE(c.known());
  EXPECT_NEAR(c.fixed_seconds(), 0.002, 1e-9);
  EXPECT_NEAR(c.per_token_seconds(), 0.0001, 1e-12);
  // Two executions of 150 tokens in all: 2 × 2 ms + 15 ms.
  using Ms = std::chrono::duration<double, std::milli>;
  EXPECT_NEAR(Ms(c.Estimate(150, 2)).count(), 19, 1e-6);
}

TEST(CostModel, OneBatchSizeIsCostPerTokenAndRecentExecutionsCountMost) {
  CostModel c;
  for (int i = 0; i < 5; ++i) c.Observe(50, 0.010);  // one size: 0.2 ms per token, no fixed part
  EXPECT_NEAR(c.per_token_seconds(), 0.0002, 1e-12);
  EXPECT_EQ(c.fixed_seconds(), 0);
  // The machine becomes 3x slower: after 40 executions the estimate follows (decay 0.9).
  for (int i = 0; i < 40; ++i) c.Observe(50, 0.030);
  EXPECT_NEAR(c.per_token_seconds(), 0.0006, 0.00001);
  // Nonsense observations are ignored.
  c.Observe(0, 1.0);
  c.Observe(10, -1.0);
  EXPECT_NEAR(c.per_token_seconds(), 0.0006, 0.00001);
}

QueuedItem Prio(int enqueued_ms, Priority p, int tokens = 10) {
  QueuedItem q = Item(enqueued_ms, tokens);
  q.priority = p;
  return q;
}

TEST(BatchPolicy, InteractiveRunsBeforeBulk) {
  // Three bulk requests queued first, then two dialog turns: with room for three, both turns
  // run, then the oldest bulk one.
  std::vector<QueuedItem> q = {Prio(0, Priority::kBulk), Prio(1, Priority::kBulk),
                               Prio(2, Priority::kBulk), Prio(3, Priority::kInteractive),
                               Prio(4, Priority::kInteractive)};
  BatchDecision d = DecideBatch(Opts(3, 1000, 0), q, T0 + milliseconds(5));
  EXPECT_EQ(d.run, (Idx{3, 4, 0}));
}

TEST(BatchPolicy, DoomedRequestsAreNotRun) {
  const CostModel c = Exact(2, 0.1);  // 100 tokens: 12 ms
  // Item 1 has 10 ms left but needs ~12 ms even alone; item 0 has no deadline.
  std::vector<QueuedItem> q = {Item(0, 100), Item(0, 100, 20)};
  BatchDecision d = DecideBatch(Opts(8, 1000, 0), q, T0 + milliseconds(10), &c);
  EXPECT_EQ(d.doomed, (Idx{1}));
  EXPECT_TRUE(d.expired.empty());
  EXPECT_EQ(d.run, (Idx{0}));
  // Without a cost estimate, or while nothing executes (a probe), it runs.
  d = DecideBatch(Opts(8, 1000, 0), q, T0 + milliseconds(10));
  EXPECT_EQ(d.run, (Idx{0, 1}));
  // A probe keeps it (not doomed); it runs once it is alone, as it would miss item 0's batch.
  d = DecideBatch(Opts(8, 1000, 0), q, T0 + milliseconds(10), &c, /*probe=*/true);
  EXPECT_TRUE(d.doomed.empty());
  EXPECT_EQ(d.run, (Idx{0}));
  d = DecideBatch(Opts(8, 1000, 0), std::vector<QueuedItem>{q[1]}, T0 + milliseconds(10), &c,
                  /*probe=*/true);
  EXPECT_EQ(d.run, (Idx{0}));
}

TEST(BatchPolicy, BatchStopsWhereItWouldMissAMembersDeadline) {
  const CostModel c = Exact(2, 0.1);
  // Each item alone: 12 ms. Item 0 must end by t=20 (20 ms left): with item 1 the batch takes
  // 22 ms, so item 1 waits for the next batch, and the batch is full (runs now).
  std::vector<QueuedItem> q = {Item(0, 100, 20), Item(0, 100)};
  BatchDecision d = DecideBatch(Opts(8, 1000, 50), q, T0, &c);
  EXPECT_TRUE(d.doomed.empty());
  EXPECT_EQ(d.run, (Idx{0}));
  // With 30 ms left both fit (22 ms), and the batch waits for the delay.
  q[0].deadline = T0 + milliseconds(100);
  d = DecideBatch(Opts(8, 1000, 50), q, T0, &c);
  EXPECT_TRUE(d.run.empty());
  EXPECT_EQ(d.wake_at, T0 + milliseconds(50));
}

TEST(BatchPolicy, UrgencyCountsTheEstimatedRun) {
  const CostModel c = Exact(2, 0.1);  // two of 100 tokens: 22 ms
  // 30 ms left, delay 10 ms: without the run time there is time to wait; with it (30 - 22 = 8
  // ms <= 10) there is not.
  std::vector<QueuedItem> q = {Item(0, 100, 30), Item(0, 100, 200)};
  EXPECT_TRUE(DecideBatch(Opts(8, 1000, 10), q, T0).run.empty());
  EXPECT_EQ(DecideBatch(Opts(8, 1000, 10), q, T0, &c).run, (Idx{0, 1}));
}

}  // namespace
}  // namespace hotline::serving
