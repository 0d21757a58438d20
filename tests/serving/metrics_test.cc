#include "serving/metrics.h"

#include <gtest/gtest.h>

#include <thread>

#include "base/error.h"

namespace hotline::serving {
namespace {

TEST(Metrics, RendersCountersGaugesAndHistogramsInTextFormat) {
  MetricsRegistry r;
  auto& c = r.AddCounter("hotline_test_total", "Things counted", {"model", "code"});
  auto& g = r.AddGauge("hotline_depth", "Depth");
  auto& h = r.AddHistogram("hotline_latency_seconds", "Latency", {"model"}, {0.1, 1});
  c.WithLabels({"m", "OK"}).Inc();
  c.WithLabels({"m", "OK"}).Inc(2);
  c.WithLabels({"m", "NOT_FOUND"}).Inc();
  g.WithLabels({}).Set(7);
  auto& hm = h.WithLabels({"m"});
  hm.Observe(0.05);
  hm.Observe(0.1);  // le is inclusive: lands in the 0.1 bucket
  hm.Observe(0.5);
  hm.Observe(3);
  const std::string expected =
      "# HELP hotline_test_total Things counted\n"
      "# TYPE hotline_test_total counter\n"
      "hotline_test_total{model=\"m\",code=\"NOT_FOUND\"} 1\n"
      "hotline_test_total{model=\"m\",code=\"OK\"} 3\n"
      "# HELP hotline_depth Depth\n"
      "# TYPE hotline_depth gauge\n"
      "hotline_depth 7\n"
      "# HELP hotline_latency_seconds Latency\n"
      "# TYPE hotline_latency_seconds histogram\n"
      "hotline_latency_seconds_bucket{model=\"m\",le=\"0.1\"} 2\n"
      "hotline_latency_seconds_bucket{model=\"m\",le=\"1\"} 3\n"
      "hotline_latency_seconds_bucket{model=\"m\",le=\"+Inf\"} 4\n"
      "hotline_latency_seconds_sum{model=\"m\"} 3.65\n"
      "hotline_latency_seconds_count{model=\"m\"} 4\n";
  EXPECT_EQ(r.Render(), expected);
}

TEST(Metrics, EscapesLabelValues) {
  MetricsRegistry r;
  r.AddCounter("x_total", "h", {"l"}).WithLabels({"a\"b\\c\nd"}).Inc();
  EXPECT_NE(r.Render().find("x_total{l=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos);
}

TEST(Metrics, RejectsBadNamesDuplicatesAndLabelCounts) {
  MetricsRegistry r;
  EXPECT_THROW(r.AddCounter("9bad", "h"), Error);
  EXPECT_THROW(r.AddCounter("has space", "h"), Error);
  r.AddCounter("ok_total", "h", {"a"});
  EXPECT_THROW(r.AddGauge("ok_total", "h"), Error);
  auto& f = r.AddGauge("g", "h", {"a", "b"});
  EXPECT_THROW(f.WithLabels({"only-one"}), Error);
  EXPECT_THROW(r.AddHistogram("h", "h", {}, {1, 0.5}), Error);
}

TEST(Metrics, ConcurrentUpdatesAreNotLost) {
  MetricsRegistry r;
  auto& c = r.AddCounter("c_total", "h", {"t"});
  auto& h = r.AddHistogram("h_seconds", "h", {}, {0.5});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10000; ++i) {
        c.WithLabels({std::to_string(t % 2)}).Inc();
        h.WithLabels({}).Observe(i % 2 ? 0.25 : 1.0);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.WithLabels({"0"}).value() + c.WithLabels({"1"}).value(), 40000);
  EXPECT_EQ(h.WithLabels({}).count(), 40000u);
  EXPECT_EQ(h.WithLabels({}).bucket_counts()[0], 20000u);
  EXPECT_DOUBLE_EQ(h.WithLabels({}).sum(), 20000 * 0.25 + 20000 * 1.0);
}

TEST(Metrics, FormatsValues) {
  EXPECT_EQ(FormatValue(1), "1");
  EXPECT_EQ(FormatValue(0.00025), "0.00025");
  EXPECT_EQ(FormatValue(1e21), "1e+21");
  EXPECT_EQ(FormatValue(1.0 / 0.0), "+Inf");
}

}  // namespace
}  // namespace hotline::serving
