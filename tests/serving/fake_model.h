// A test double for ServableModel: deterministic answers derived from the text (so tests can
// check every reply against an independent expectation), a record of each call's batch size, an
// optional gate that holds executions until the test opens it, and injected failures.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include "base/error.h"
#include "serving/model.h"
#include "serving/utf8.h"

namespace hotline::serving::testing {

// The intent a FakeModel gives a text: "len<code points>" (e.g. "len3" for "你好吗").
inline std::string FakeIntent(const std::string& text) {
  return "len" + std::to_string(CountCodePoints(text));
}

class FakeModel : public ServableModel {
 public:
  explicit FakeModel(int64_t memory = 1000, std::string tag = "")
      : memory_(memory), tag_(std::move(tag)) {}

  std::vector<nlu::Understanding> Understand(
      const std::vector<std::string>& texts,
      std::chrono::system_clock::time_point reference) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      batch_sizes_.push_back(int(texts.size()));
      ++running_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return open_; });
      --running_;
      texts_seen_.insert(texts_seen_.end(), texts.begin(), texts.end());
    }
    if (seconds_per_token_ > 0) {
      size_t tokens = 0;
      for (const std::string& t : texts) tokens += CountCodePoints(t) + 2;
      std::this_thread::sleep_for(std::chrono::duration<double>(seconds_per_token_ * tokens));
    }
    std::vector<nlu::Understanding> out;
    for (const std::string& t : texts) {
      if (t == "FAIL") throw Error("injected failure", Code::kInternal);
      nlu::Understanding u;
      u.intent = FakeIntent(t) + tag_;
      u.confidence = 0.5f;
      u.department = std::to_string(
          std::chrono::duration_cast<std::chrono::seconds>(reference.time_since_epoch()).count());
      u.category = "c" + std::to_string(CountCodePoints(t));  // c<code points>
      u.category_name = "类" + std::to_string(CountCodePoints(t));
      out.push_back(u);
    }
    return out;
  }
  int64_t memory_bytes() const override { return memory_; }
  int max_length() const override { return 64; }
  engine::Profile profile() const override {
    engine::Profile p;
    p.min_batch = 1, p.opt_batch = 4, p.max_batch = 8;
    p.min_seq = 1, p.opt_seq = 16, p.max_seq = 64;
    return p;
  }

  // Gate: while closed, Understand() blocks after recording its call.
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  // Waits until `n` executions are blocked at the gate.
  void WaitRunning(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return running_ >= n; });
  }
  std::vector<int> batch_sizes() {
    std::lock_guard<std::mutex> lock(mu_);
    return batch_sizes_;
  }
  // Texts in the order the model ran them.
  std::vector<std::string> texts_seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return texts_seen_;
  }
  // Each execution sleeps this long per token (code points + 2), after the gate: a model with a
  // cost the batcher can measure. Set before use.
  void set_seconds_per_token(double s) { seconds_per_token_ = s; }

 private:
  int64_t memory_;
  std::string tag_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  int running_ = 0;
  std::vector<int> batch_sizes_;
  std::vector<std::string> texts_seen_;
  double seconds_per_token_ = 0;
};

}  // namespace hotline::serving::testing
