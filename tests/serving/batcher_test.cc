// The batcher's plumbing with a gated fake model: the gate makes batch composition deterministic
// (requests pile up while the only instance is held), so no test depends on timing.
#include "serving/batcher.h"

#include <gtest/gtest.h>

#include <future>

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
  late.deadline = Clock::now();  // passes before the instance is free
  WorkItem fine = c.Item("fine");
  ASSERT_TRUE(b.Enqueue({std::move(late), std::move(fine)}).ok());
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

}  // namespace
}  // namespace hotline::serving
