// The model repository's policy with fake models in a temporary folder: versions, load on first
// use, hot swap without dropping queued requests, failed loads, LRU eviction under a budget.
#include "serving/model_repository.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <future>

#include "fake_model.h"

namespace hotline::serving {
namespace {

namespace fs = std::filesystem;
using testing::FakeModel;

class RepositoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("hotline_repo_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  void AddModel(const std::string& folder, const std::string& yaml) {
    fs::create_directories(root_ / folder);
    std::ofstream(root_ / folder / "model.yaml") << yaml;
  }
  ModelLoader Loader() {
    return [this](const ModelSpec& spec) -> std::unique_ptr<ServableModel> {
      if (fs::exists(fs::path(spec.dir) / "BROKEN")) {
        throw Error("weights of " + spec.name + " are corrupt", Code::kDataLoss);
      }
      auto m = std::make_unique<FakeModel>(1000, "@v" + spec.version);
      std::lock_guard<std::mutex> lock(mu_);
      models_[spec.name + "@" + spec.version] = m.get();
      return m;
    };
  }
  FakeModel* Model(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    return models_.at(key);
  }
  ModelRepository::Options Opts(int64_t budget = 0, bool on_demand = true) {
    return {root_.string(), budget, on_demand};
  }

  fs::path root_;
  std::mutex mu_;
  std::map<std::string, FakeModel*> models_;
};

// Enqueues one text and returns a future of its result.
std::future<ItemResult> Submit(LoadedModel& m, const std::string& text) {
  auto p = std::make_shared<std::promise<ItemResult>>();
  WorkItem w;
  w.text = text;
  w.done = [p](ItemResult r) { p->set_value(std::move(r)); };
  std::vector<WorkItem> v;
  v.push_back(std::move(w));
  EXPECT_TRUE(m.batcher().Enqueue(std::move(v)).ok());
  return p->get_future();
}

TEST_F(RepositoryTest, ScansVersionsAndSkipsMalformedFolders) {
  AddModel("general-1", "name: general\nversion: 1\n");
  AddModel("general-10", "name: general\nversion: 10\nbusiness_lines: [traffic]\n");
  AddModel("general-9", "name: general\nversion: 9\n");
  AddModel("bad", "name: [unclosed\n");
  AddModel("noname", "version: 3\n");
  fs::create_directories(root_ / "not-a-model");
  ModelRepository repo(Opts(), Loader(), nullptr);
  std::vector<std::string> errors;
  EXPECT_EQ(repo.Scan(&errors).size(), 3u);
  EXPECT_EQ(errors.size(), 2u);
  auto list = repo.List();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].versions, (std::vector<std::string>{"1", "9", "10"}));
  EXPECT_EQ(list[0].state, ModelState::kUnloaded);
  // Numeric order: version 10 is the newest.
  auto m = repo.Acquire("general");
  EXPECT_EQ(m->spec().version, "10");
  EXPECT_EQ(repo.ModelForBusinessLine("traffic"), "general");
  EXPECT_EQ(repo.ModelForBusinessLine("tax"), "");
}

TEST_F(RepositoryTest, ReadsBatchingSettingsAndRejectsBadOnes) {
  AddModel("a",
           "name: a\nversion: 2\ninstances: 3\nwarmup: false\nmemory_mb: 1.5\n"
           "batching: {max_batch_size: 16, max_batch_tokens: 512, max_queue_delay_ms: 0.5,"
           " max_queue_size: 99, max_queue_wait_ms: 250}\n");
  AddModel("b0", "name: b0\n");
  ModelSpec s = ModelSpec::Load((root_ / "a").string());
  EXPECT_EQ(s.instances, 3);
  EXPECT_FALSE(s.warmup);
  EXPECT_EQ(s.memory_bytes_hint, 1572864);
  EXPECT_EQ(s.batching.max_batch_size, 16);
  EXPECT_EQ(s.batching.max_batch_tokens, 512);
  EXPECT_EQ(s.batching.max_queue_delay, std::chrono::microseconds(500));
  EXPECT_EQ(s.batching.max_queue_size, 99);
  EXPECT_EQ(s.batching.max_queue_wait, std::chrono::milliseconds(250));
  EXPECT_EQ(ModelSpec::Load((root_ / "b0").string()).batching.max_queue_wait,
            std::chrono::milliseconds(1000));  // the default
  AddModel("b", "name: b\ninstances: many\n");
  try {
    ModelSpec::Load((root_ / "b").string());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("instances"), std::string::npos) << e.what();
  }
  AddModel("c", "name: c\nbatching: {max_batch_size: 0}\n");
  EXPECT_THROW(ModelSpec::Load((root_ / "c").string()), Error);
  AddModel("d", "name: d\nbatching: {max_queue_wait_ms: -1}\n");
  EXPECT_THROW(ModelSpec::Load((root_ / "d").string()), Error);
}

TEST_F(RepositoryTest, KindAndHeadsOfClassifierFolders) {
  AddModel("joint", "name: joint\n");
  AddModel("dispatch",
           "name: dispatch\nkind: classifier\nbusiness_lines: [city]\n"
           "outputs: {department: department_logits, category: category_logits}\n");
  AddModel("headless", "name: headless\nkind: classifier\n");
  ModelRepository repo(Opts(), Loader(), nullptr);
  std::vector<std::string> errors;
  EXPECT_EQ(repo.Scan(&errors).size(), 2u);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("a classifier needs 'outputs'"), std::string::npos) << errors[0];
  std::map<std::string, ModelStatus> by_name;
  for (auto& m : repo.List()) by_name[m.name] = m;
  EXPECT_EQ(by_name.at("joint").kind, "joint");
  EXPECT_TRUE(by_name.at("joint").heads.empty());
  EXPECT_EQ(by_name.at("dispatch").kind, "classifier");
  EXPECT_EQ(by_name.at("dispatch").heads, (std::vector<std::string>{"department", "category"}));
  repo.Acquire("dispatch");  // the loaded version's spec says the same
  for (auto& m : repo.List())
    if (m.name == "dispatch") EXPECT_EQ(m.heads.size(), 2u);
  EXPECT_EQ(repo.ModelForBusinessLine("city"), "dispatch");
}

TEST_F(RepositoryTest, UnknownModelIsNotFoundAndOnDemandLoadingCanBeOff) {
  AddModel("a", "name: a\n");
  {
    ModelRepository repo(Opts(0, false), Loader(), nullptr);
    try {
      repo.Acquire("nope");
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kNotFound);
    }
    try {
      repo.Acquire("a");
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kUnavailable);
    }
    EXPECT_FALSE(repo.ready());
    repo.Load("a");
    EXPECT_TRUE(repo.ready());
    EXPECT_EQ(repo.Acquire("a")->spec().name, "a");
    repo.Unload("a");
    EXPECT_THROW(repo.Acquire("a"), Error);
    try {
      repo.Unload("a");
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kNotFound);
    }
  }
}

TEST_F(RepositoryTest, WarmUpRunsEveryProfileBucketBeforeReady) {
  AddModel("a", "name: a\nbatching: {max_batch_size: 6}\n");
  MetricsRegistry registry;
  ServingMetrics metrics(registry);
  ModelRepository repo(Opts(), Loader(), &metrics);
  repo.Load("a");
  // FakeModel's profile: batch 1/4/8, seq 1/16/64; batch capped at 6, seq at least 2.
  EXPECT_EQ(Model("a@1")->batch_sizes(), (std::vector<int>{1, 1, 1, 4, 4, 4, 6, 6, 6}));
  EXPECT_EQ(metrics.model_state.WithLabels({"a", "ready"}).value(), 1);
  // The batcher never asks for more than the plan's profile takes (FakeModel: 8).
  AddModel("big", "name: big\nwarmup: false\nbatching: {max_batch_size: 64}\n");
  EXPECT_EQ(repo.Acquire("big")->spec().batching.max_batch_size, 8);
  EXPECT_EQ(metrics.model_state.WithLabels({"a", "loading"}).value(), 0);
  engine::Profile p;
  p.min_batch = 1, p.opt_batch = 8, p.max_batch = 64, p.min_seq = 1, p.opt_seq = 64,
  p.max_seq = 512;
  std::vector<WarmupShape> shapes = WarmupShapes(p, 8, 128);
  EXPECT_EQ(shapes,
            (std::vector<WarmupShape>{{1, 2}, {1, 64}, {1, 128}, {8, 2}, {8, 64}, {8, 128}}));
}

TEST_F(RepositoryTest, NewVersionSwapsInWithoutDroppingQueuedRequests) {
  AddModel("m1", "name: m\nversion: 1\nwarmup: false\n");
  ModelRepository repo(Opts(), Loader(), nullptr);
  std::shared_ptr<LoadedModel> v1 = repo.Acquire("m");
  FakeModel* old_model = Model("m@1");
  old_model->Close();
  auto busy = Submit(*v1, "x");
  old_model->WaitRunning(1);
  auto queued = Submit(*v1, "yy");
  v1.reset();  // only the repository holds version 1 now

  AddModel("m2", "name: m\nversion: 2\nwarmup: false\n");
  auto load = std::async(std::launch::async, [&] { repo.Load("m"); });
  // The swap happens before version 1 has drained: new requests already reach version 2.
  for (;;) {
    auto list = repo.List();
    if (list[0].version == "2") break;
    std::this_thread::yield();
  }
  std::shared_ptr<LoadedModel> v2 = repo.Acquire("m");
  EXPECT_EQ(v2->spec().version, "2");
  ItemResult fresh = Submit(*v2, "zzz").get();
  EXPECT_EQ(fresh.understanding.intent, "len3@v2");
  old_model->Open();
  load.get();  // returns once version 1 has answered its queue
  ItemResult a = busy.get(), b = queued.get();
  ASSERT_TRUE(a.status.ok());
  ASSERT_TRUE(b.status.ok());
  EXPECT_EQ(a.understanding.intent, "len1@v1");
  EXPECT_EQ(b.understanding.intent, "len2@v1");
}

TEST_F(RepositoryTest, FailedLoadKeepsOldVersionServing) {
  AddModel("m1", "name: m\nversion: 1\nwarmup: false\n");
  MetricsRegistry registry;
  ServingMetrics metrics(registry);
  ModelRepository repo(Opts(), Loader(), &metrics);
  repo.Load("m");
  AddModel("m2", "name: m\nversion: 2\nwarmup: false\n");
  std::ofstream(root_ / "m2" / "BROKEN") << "x";
  try {
    repo.Load("m");
    FAIL() << "expected the load to fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kDataLoss);
    EXPECT_NE(std::string(e.what()).find("corrupt"), std::string::npos);
  }
  auto m = repo.Acquire("m");
  EXPECT_EQ(m->spec().version, "1");
  EXPECT_EQ(Submit(*m, "ab").get().understanding.intent, "len2@v1");
  auto list = repo.List();
  EXPECT_EQ(list[0].state, ModelState::kReady);
  EXPECT_NE(list[0].message.find("corrupt"), std::string::npos);
  EXPECT_EQ(metrics.model_loads.WithLabels({"m", "failed"}).value(), 1);
  EXPECT_EQ(metrics.model_loads.WithLabels({"m", "ok"}).value(), 1);
  // A model whose only version fails is "failed" and answers UNAVAILABLE without reloading.
  AddModel("z", "name: z\nwarmup: false\n");
  std::ofstream(root_ / "z" / "BROKEN") << "x";
  EXPECT_THROW(repo.Acquire("z"), Error);
  try {
    repo.Acquire("z");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kUnavailable);
  }
  EXPECT_EQ(metrics.model_loads.WithLabels({"z", "failed"}).value(), 1);
  EXPECT_EQ(metrics.model_state.WithLabels({"z", "failed"}).value(), 1);
}

TEST_F(RepositoryTest, MemoryBudgetEvictsLeastRecentlyUsedIdleModel) {
  for (std::string n : {"a", "b", "c"}) AddModel(n, "name: " + n + "\nwarmup: false\n");
  MetricsRegistry registry;
  ServingMetrics metrics(registry);
  ModelRepository repo(Opts(2500), Loader(), &metrics);  // room for two models of 1000
  repo.Load("a");
  repo.Load("b");
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  repo.Acquire("a");  // a is now more recently used than b
  repo.Load("c");
  std::map<std::string, ModelState> state;
  for (const auto& s : repo.List()) state[s.name] = s.state;
  EXPECT_EQ(state["a"], ModelState::kReady);
  EXPECT_EQ(state["b"], ModelState::kUnloaded);
  EXPECT_EQ(state["c"], ModelState::kReady);
  EXPECT_EQ(repo.memory_in_use(), 2000);
  EXPECT_EQ(metrics.model_evictions.WithLabels({"b"}).value(), 1);

  // Busy models are not evicted: with a and c both busy, b does not fit.
  auto a = repo.Acquire("a");
  auto c = repo.Acquire("c");
  Model("a@1")->Close();
  Model("c@1")->Close();
  auto fa = Submit(*a, "1");
  auto fc = Submit(*c, "2");
  Model("a@1")->WaitRunning(1);
  Model("c@1")->WaitRunning(1);
  try {
    repo.Load("b");
    FAIL() << "expected RESOURCE_EXHAUSTED";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kResourceExhausted);
  }
  Model("a@1")->Open();
  Model("c@1")->Open();
  EXPECT_TRUE(fa.get().status.ok());
  EXPECT_TRUE(fc.get().status.ok());
  EXPECT_EQ(repo.memory_in_use(), 2000);
}

}  // namespace
}  // namespace hotline::serving
