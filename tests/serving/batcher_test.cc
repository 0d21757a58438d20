// The batcher's plumbing with a gated fake model: the gate makes batch composition deterministic
// (requests pile up while the only instance is held), so no test depends on timing.
#include "serving/batcher.h"

#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <thread>

#include "fake_model.h"

namespace hotline::serving {
namespace {

using testing::FakeIntent;
using testing::FakeModel;

struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, ItemResult> results;  // by text
  void Wait(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(20), [&] { return results.size() >= n; }))
        << "only " << results.size() << " of " << n << " answered";
  }
  WorkItem Item(const std::string& text) {
    WorkItem w;
    w.text = text;
    w.done = [this, text](ItemResult r) {
      std::lock_guard<std::mutex> lock(mu);
      EXPECT_EQ(results.count(text), 0u) << text << " answered twice";
      results[text] = std::move(r);
      cv.notify_all();
    };
    return w;
  }
};

BatchingOptions Opts(int max_batch, int queue, int delay_ms = 0) {
  BatchingOptions o;
  o.max_batch_size = max_batch;
  o.max_queue_size = queue;
  o.max_queue_delay = std::chrono::milliseconds(delay_ms);
  return o;
}

std::string Text(int i) { return std::string(size_t(i + 1), 'a'); }  // distinct lengths

TEST(Batcher, QueuedRequestsRunTogetherUpToMaxBatch) {
  FakeModel model;
  MetricsRegistry registry;
  ServingMetrics metrics(registry);
  Batcher b("m", &model, Opts(8, 100), 1, &metrics);
  Collector c;
  model.Close();
  ASSERT_TRUE(b.Enqueue({c.Item(Text(0))}).ok());
  model.WaitRunning(1);  // the only instance is now held at the gate
  std::vector<WorkItem> items;
  for (int i = 1; i <= 10; ++i) items.push_back(c.Item(Text(i)));
  ASSERT_TRUE(b.Enqueue(std::move(items)).ok());
  EXPECT_EQ(b.queue_depth(), 10u);
  model.Open();
  c.Wait(11);
  EXPECT_EQ(model.batch_sizes(), (std::vector<int>{1, 8, 2}));
  for (int i = 0; i <= 10; ++i) {
    const ItemResult& r = c.results[Text(i)];
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(r.understanding.intent, FakeIntent(Text(i)));
  }
  EXPECT_EQ(c.results[Text(5)].batch_size, 8);
  EXPECT_EQ(b.executions(), 3u);
  EXPECT_EQ(b.inferences(), 11u);
  EXPECT_EQ(metrics.executions.WithLabels({"m"}).value(), 3);
  EXPECT_EQ(metrics.inferences.WithLabels({"m"}).value(), 11);
  EXPECT_EQ(metrics.batch_size.WithLabels({"m"}).count(), 3u);
}

TEST(Batcher, FullQueueRefusesWithResourceExhaustedAllOrNothing) {
  FakeModel model;
  Batcher b("m", &model, Opts(8, 4), 1, nullptr);
  Collector c;
  model.Close();
  ASSERT_TRUE(b.Enqueue({c.Item("x")}).ok());
  model.WaitRunning(1);
  ASSERT_TRUE(b.Enqueue({c.Item("a"), c.Item("bb"), c.Item("ccc")}).ok());
  Status st = b.Enqueue({c.Item("dddd"), c.Item("eeeee")});  // 3 + 2 > 4
  EXPECT_EQ(st.code(), Code::kResourceExhausted);
  EXPECT_NE(st.message().find("queue is full"), std::string::npos);
  EXPECT_EQ(b.queue_depth(), 3u);  // nothing of the refused call was admitted
  ASSERT_TRUE(b.Enqueue({c.Item("dddd")}).ok());
  EXPECT_EQ(b.Enqueue({c.Item("f")}).code(), Code::kResourceExhausted);
  model.Open();
  c.Wait(5);
  EXPECT_EQ(c.results.size(), 5u);
}

TEST(Batcher, ExpiredRequestsGetDeadlineExceededWithoutCompute) {
  FakeModel model;
  Batcher b("m", &model, Opts(8, 100), 1, nullptr);
  Collector c;
  model.Close();
  ASSERT_TRUE(b.Enqueue({c.Item("x")}).ok());
  model.WaitRunning(1);
  WorkItem late = c.Item("late");
  late.deadline = Clock::now() + std::chrono::milliseconds(30);  // passes while it is queued
  WorkItem fine = c.Item("fine");
  ASSERT_TRUE(b.Enqueue({std::move(late)}).ok());
  ASSERT_TRUE(b.Enqueue({std::move(fine)}).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  model.Open();
  c.Wait(3);
  EXPECT_EQ(c.results["late"].status.code(), Code::kDeadlineExceeded);
  EXPECT_TRUE(c.results["fine"].status.ok());
  EXPECT_EQ(model.batch_sizes(), (std::vector<int>{1, 1}));  // "late" never reached the model
}

TEST(Batcher, CancelledRequestsAreDropped) {
  FakeModel model;
  Batcher b("m", &model, Opts(8, 100), 1, nullptr);
  Collector c;
  std::atomic<bool> cancelled{false};
  model.Close();
  ASSERT_TRUE(b.Enqueue({c.Item("x")}).ok());
  model.WaitRunning(1);
  WorkItem w = c.Item("gone");
  w.cancelled = [&] { return cancelled.load(); };
  ASSERT_TRUE(b.Enqueue({std::move(w), c.Item("kept")}).ok());
  cancelled = true;
  model.Open();
  c.Wait(3);
  EXPECT_EQ(c.results["gone"].status.code(), Code::kCancelled);
  EXPECT_TRUE(c.results["kept"].status.ok());
  EXPECT_EQ(model.batch_sizes(), (std::vector<int>{1, 1}));
}

TEST(Batcher, FailureInBatchIsIsolatedToItsRequest) {
  FakeModel model;
  Batcher b("m", &model, Opts(8, 100), 1, nullptr);
  Collector c;
  model.Close();
  ASSERT_TRUE(b.Enqueue({c.Item("x")}).ok());
  model.WaitRunning(1);
  ASSERT_TRUE(b.Enqueue({c.Item("ok1"), c.Item("FAIL"), c.Item("ok22")}).ok());
  model.Open();
  c.Wait(4);
  EXPECT_EQ(c.results["FAIL"].status.code(), Code::kInternal);
  EXPECT_EQ(c.results["FAIL"].status.message(), "injected failure");
  EXPECT_EQ(c.results["ok1"].understanding.intent, "len3");
  EXPECT_EQ(c.results["ok22"].understanding.intent, "len4");
  // The batch of 3 failed once, then each request ran alone.
  EXPECT_EQ(model.batch_sizes(), (std::vector<int>{1, 3, 1, 1, 1}));
}

TEST(Batcher, ExplicitReferenceTimesRunInSeparateCalls) {
  FakeModel model;
  Batcher b("m", &model, Opts(8, 100), 1, nullptr);
  Collector c;
  model.Close();
  ASSERT_TRUE(b.Enqueue({c.Item("x")}).ok());
  model.WaitRunning(1);
  WorkItem a = c.Item("a"), bb = c.Item("bb");
  a.reference_time = std::chrono::system_clock::time_point(std::chrono::seconds(1000));
  bb.reference_time = std::chrono::system_clock::time_point(std::chrono::seconds(2000));
  ASSERT_TRUE(b.Enqueue({std::move(a), std::move(bb)}).ok());
  model.Open();
  c.Wait(3);
  EXPECT_EQ(c.results["a"].understanding.department, "1000");
  EXPECT_EQ(c.results["bb"].understanding.department, "2000");
}

TEST(Batcher, InstancesExecuteConcurrently) {
  FakeModel model;
  Batcher b("m", &model, Opts(1, 100), 3, nullptr);
  Collector c;
  model.Close();
  ASSERT_TRUE(b.Enqueue({c.Item("a"), c.Item("bb"), c.Item("ccc")}).ok());
  model.WaitRunning(3);  // would hang (test timeout) with fewer than 3 concurrent instances
  model.Open();
  c.Wait(3);
}

TEST(Batcher, StopAnswersEverythingQueuedThenRefuses) {
  FakeModel model;
  Batcher b("m", &model, Opts(4, 100, 1000), 1, nullptr);  // long delay: Stop must not wait it
  Collector c;
  model.Close();
  ASSERT_TRUE(b.Enqueue({c.Item("x")}).ok());
  model.WaitRunning(1);
  ASSERT_TRUE(b.Enqueue({c.Item("a"), c.Item("bb")}).ok());
  auto stopped = std::async(std::launch::async, [&] { b.Stop(); });
  // Stop() has set stopping (Enqueue refuses) before it waits for the workers.
  while (b.accepting()) std::this_thread::yield();
  EXPECT_EQ(b.Enqueue({c.Item("refused")}).code(), Code::kUnavailable);
  model.Open();
  stopped.get();
  EXPECT_EQ(c.results.size(), 3u);
  EXPECT_TRUE(c.results["a"].status.ok());
  EXPECT_TRUE(c.results["bb"].status.ok());
}

// Deadline-aware admission. The model sleeps 1 ms per token, and a text of 18 characters is 20
// tokens: each execution of one text costs ~20 ms, which the batcher learns from a first run.
// The bounds below hold for any machine at least as fast as that sleep (estimates only grow on a
// slower one, making refusals more likely, which the assertions allow for where it matters).
struct CostedBatcher {
  FakeModel model;
  Collector c;
  std::unique_ptr<Batcher> b;
  explicit CostedBatcher(Duration max_wait, int max_batch = 1) {
    model.set_seconds_per_token(0.001);
    BatchingOptions o = Opts(max_batch, 1000);
    o.max_queue_wait = max_wait;
    b = std::make_unique<Batcher>("m", &model, o, 1, nullptr);
    EXPECT_TRUE(b->Enqueue({c.Item("learn" + std::string(13, 'x'))}).ok());
    c.Wait(1);
    EXPECT_TRUE(b->cost().known());
    EXPECT_GE(b->cost().Estimate(20), std::chrono::milliseconds(19));
    // The only instance is held from here on, so nothing queued runs until the test opens it.
    model.Close();
    EXPECT_TRUE(b->Enqueue({c.Item("hold" + std::string(14, 'x'))}).ok());
    model.WaitRunning(1);
  }
  static std::string Text(int i) {  // 18 characters: 20 tokens
    std::string t = std::to_string(i);
    return t + std::string(18 - t.size(), 'y');
  }
};

TEST(Batcher, PassedDeadlineIsRefusedAtAdmission) {
  FakeModel model;
  Batcher b("m", &model, Opts(8, 100), 1, nullptr);
  Collector c;
  WorkItem late = c.Item("late");
  late.deadline = Clock::now();
  const Status st = b.Enqueue({std::move(late), c.Item("with it")});
  EXPECT_EQ(st.code(), Code::kDeadlineExceeded) << st.ToString();
  EXPECT_EQ(b.queue_depth(), 0u);  // all or nothing
  EXPECT_TRUE(model.batch_sizes().empty());
}

TEST(Batcher, TokensAreEstimatedFromTheText) {
  FakeModel model;
  MetricsRegistry registry;
  ServingMetrics metrics(registry);
  Batcher b("m", &model, Opts(8, 100), 1, &metrics);
  Collector c;
  model.Close();
  ASSERT_TRUE(b.Enqueue({c.Item("x")}).ok());
  model.WaitRunning(1);
  ASSERT_TRUE(b.Enqueue({c.Item("你好吗"), c.Item("abcdef")}).ok());
  model.Open();
  c.Wait(3);
  // (1 + 2) + (3 + 2) + (6 + 2): code points plus [CLS] and [SEP], in two executions.
  EXPECT_EQ(metrics.batch_tokens.WithLabels({"m"}).sum(), 16);
  EXPECT_EQ(metrics.batch_tokens.WithLabels({"m"}).count(), 2u);
}

TEST(Batcher, DeadlineShorterThanTheRunIsRefusedAtOnceWithoutRunning) {
  CostedBatcher t(std::chrono::seconds(10));
  WorkItem w = t.c.Item(CostedBatcher::Text(1));
  w.deadline = Clock::now() + std::chrono::milliseconds(5);  // a run takes ~20 ms
  const Status st = t.b->Enqueue({std::move(w)});
  EXPECT_EQ(st.code(), Code::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("needs about"), std::string::npos) << st.message();
  EXPECT_EQ(t.b->queue_depth(), 0u);
  t.model.Open();
  t.c.Wait(2);
  EXPECT_EQ(t.c.results.count(CostedBatcher::Text(1)), 0u);  // no answer: refused, never queued
  EXPECT_EQ(t.model.batch_sizes().size(), 2u);               // the learning and holding runs
}

TEST(Batcher, WorkAheadPastTheDeadlineIsResourceExhausted) {
  CostedBatcher t(std::chrono::seconds(10));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(t.b->Enqueue({t.c.Item(CostedBatcher::Text(i))}).ok());
  // 10 runs of ~20 ms are ahead: 100 ms is enough for this text alone, not behind them.
  WorkItem w = t.c.Item("late" + std::string(14, 'z'));
  w.deadline = Clock::now() + std::chrono::milliseconds(100);
  const Status st = t.b->Enqueue({std::move(w)});
  EXPECT_EQ(st.code(), Code::kResourceExhausted) << st.ToString();
  EXPECT_NE(st.message().find("the deadline leaves"), std::string::npos) << st.message();
  // Without a deadline it is admitted (10 s of queue allowed).
  ASSERT_TRUE(t.b->Enqueue({t.c.Item("patient" + std::string(11, 'z'))}).ok());
  t.model.Open();
  t.c.Wait(13);
  EXPECT_EQ(t.c.results.count("late" + std::string(14, 'z')), 0u);
}

TEST(Batcher, QueueIsBoundedInTime) {
  CostedBatcher t(std::chrono::milliseconds(100));
  int admitted = 0;
  Status refused;
  for (int i = 0; i < 200 && refused.ok(); ++i) {
    refused = t.b->Enqueue({t.c.Item(CostedBatcher::Text(i))});
    if (refused.ok()) ++admitted;
  }
  // ~20 ms each: about 5 fit in 100 ms of queue, far below max_queue_size (1000).
  EXPECT_EQ(refused.code(), Code::kResourceExhausted) << refused.ToString();
  EXPECT_NE(refused.message().find("max_queue_wait_ms"), std::string::npos) << refused.message();
  EXPECT_GE(admitted, 1);
  EXPECT_LE(admitted, 10);
  t.model.Open();
  t.c.Wait(size_t(admitted) + 2);
}

TEST(Batcher, DialogTurnsAreAdmittedPastBulkWorkAndRunFirst) {
  CostedBatcher t(std::chrono::milliseconds(100));
  int bulk = 0;
  while (t.b->Enqueue({t.c.Item(CostedBatcher::Text(bulk))}).ok()) ++bulk;
  ASSERT_GE(bulk, 1);
  // Bulk is full in time; a dialog turn counts only interactive work ahead, so it is admitted.
  WorkItem turn = t.c.Item("turn" + std::string(14, 't'));
  turn.priority = Priority::kInteractive;
  ASSERT_TRUE(t.b->Enqueue({std::move(turn)}).ok());
  t.model.Open();
  t.c.Wait(size_t(bulk) + 3);
  const std::vector<std::string> seen = t.model.texts_seen();
  ASSERT_EQ(seen.size(), size_t(bulk) + 3);
  EXPECT_EQ(seen[2], "turn" + std::string(14, 't'));  // after the learning and holding runs
}

TEST(Batcher, ExpiredWhileQueuedIsAnsweredWithoutRunning) {
  CostedBatcher t(std::chrono::seconds(10));
  WorkItem w = t.c.Item("soon" + std::string(14, 's'));
  w.deadline = Clock::now() + std::chrono::milliseconds(300);  // ~20 ms ahead, ~20 ms to run
  const Status st = t.b->Enqueue({std::move(w)});
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // the deadline passes queued
  t.model.Open();
  t.c.Wait(3);
  EXPECT_EQ(t.c.results["soon" + std::string(14, 's')].status.code(), Code::kDeadlineExceeded);
  EXPECT_EQ(t.model.batch_sizes().size(), 2u);
}

}  // namespace
}  // namespace hotline::serving
