// The serving core driven in-process, as the frontends drive it.
#include "serving/service.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "fake_model.h"

namespace hotline::serving {
namespace {

namespace fs = std::filesystem;
using testing::FakeIntent;
using testing::FakeModel;

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("hotline_service_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    for (auto [dir, yaml] : std::vector<std::pair<std::string, std::string>>{
             {"general", "name: general\nversion: 3\nwarmup: false\n"},
             {"medical", "name: medical\nbusiness_lines: [medical_insurance]\nwarmup: false\n"}}) {
      fs::create_directories(root_ / dir);
      std::ofstream(root_ / dir / "model.yaml") << yaml;
    }
    repo_ = std::make_unique<ModelRepository>(
        ModelRepository::Options{root_.string(), 0, true},
        [](const ModelSpec& s) { return std::make_unique<FakeModel>(1000, "@" + s.name); },
        &metrics_);
    ServiceOptions o;
    o.default_model = "general";
    o.admin_token = "s3cret";
    o.max_text_bytes = 100;
    o.max_texts_per_call = 4;
    service_ = std::make_unique<Service>(o, repo_.get(), &metrics_, &logger_);
  }
  void TearDown() override {
    service_.reset();
    repo_.reset();
    fs::remove_all(root_);
  }
  UnderstandReply Call(std::vector<std::string> texts, std::string model = "",
                       std::string business_line = "") {
    UnderstandCall c;
    c.texts = std::move(texts);
    c.model = std::move(model);
    c.business_line = std::move(business_line);
    c.request_id = "req-13812345678";
    return service_->UnderstandSync(std::move(c));
  }

  fs::path root_;
  MetricsRegistry registry_;
  ServingMetrics metrics_{registry_};
  std::mutex log_mu_;
  std::vector<std::string> log_lines_;
  Logger logger_{[this](const std::string& l) {
    std::lock_guard<std::mutex> lock(log_mu_);
    log_lines_.push_back(l);
  }};
  std::unique_ptr<ModelRepository> repo_;
  std::unique_ptr<Service> service_;
};

TEST_F(ServiceTest, AnswersEachTextInOrderWithModelAndVersion) {
  UnderstandReply r = Call({"你好", "a", "三个字"});
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.model_name, "general");
  EXPECT_EQ(r.model_version, "3");
  ASSERT_EQ(r.results.size(), 3u);
  EXPECT_EQ(r.results[0].intent, FakeIntent("你好") + "@general");
  EXPECT_EQ(r.results[1].intent, "len1@general");
  EXPECT_EQ(r.results[2].intent, "len3@general");
  EXPECT_EQ(metrics_.requests.WithLabels({"general", "len3@general", "OK"}).value(), 1);
}

TEST_F(ServiceTest, RoutesByModelNameAndBusinessLine) {
  EXPECT_EQ(Call({"x"}, "medical").results[0].intent, "len1@medical");
  EXPECT_EQ(Call({"x"}, "", "medical_insurance").results[0].intent, "len1@medical");
  EXPECT_EQ(Call({"x"}, "", "tax").status.code(), Code::kNotFound);
  UnderstandReply r = Call({"x"}, "nope");
  EXPECT_EQ(r.status.code(), Code::kNotFound);
  EXPECT_NE(r.status.message().find("nope"), std::string::npos);
}

TEST_F(ServiceTest, RejectsBadInputWithInvalidArgument) {
  EXPECT_EQ(Call({}).status.code(), Code::kInvalidArgument);
  EXPECT_EQ(Call({"a", "b", "c", "d", "e"}).status.code(), Code::kInvalidArgument);
  UnderstandReply big = Call({std::string(101, 'a')});
  EXPECT_EQ(big.status.code(), Code::kInvalidArgument);
  EXPECT_NE(big.status.message().find("101 bytes"), std::string::npos) << big.status.message();
  UnderstandReply bad = Call({"ok", "ab\xC3("});
  EXPECT_EQ(bad.status.code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status.message().find("text 1 is not valid UTF-8"), std::string::npos);
  EXPECT_NE(bad.status.message().find("offset 2"), std::string::npos);
  // Empty text is valid input: the model decides what it means.
  EXPECT_TRUE(Call({""}).status.ok());
  EXPECT_EQ(metrics_.requests.WithLabels({"general", "", "INVALID_ARGUMENT"}).value(),
            1 + 5 + 1 + 2);
}

TEST_F(ServiceTest, ExpiredDeadlineAnswersDeadlineExceeded) {
  UnderstandCall c;
  c.texts = {"late"};
  c.deadline = Clock::now() - std::chrono::milliseconds(1);
  EXPECT_EQ(service_->UnderstandSync(std::move(c)).status.code(), Code::kDeadlineExceeded);
}

TEST_F(ServiceTest, AdminCallsNeedTheToken) {
  EXPECT_EQ(service_->LoadModel("", "medical", "").code(), Code::kUnauthenticated);
  EXPECT_EQ(service_->LoadModel("wrong", "medical", "").code(), Code::kPermissionDenied);
  EXPECT_EQ(service_->UnloadModel("wrong", "medical").code(), Code::kPermissionDenied);
  EXPECT_TRUE(service_->LoadModel("s3cret", "medical", "").ok());
  EXPECT_EQ(service_->LoadModel("s3cret", "medical", "7").code(), Code::kNotFound);
  EXPECT_TRUE(service_->UnloadModel("s3cret", "medical").ok());
  EXPECT_EQ(service_->UnloadModel("s3cret", "medical").code(), Code::kNotFound);
  ServiceOptions no_admin;
  Service closed(no_admin, repo_.get(), nullptr, nullptr);
  EXPECT_EQ(closed.LoadModel("s3cret", "medical", "").code(), Code::kPermissionDenied);
}

TEST_F(ServiceTest, ReadyOnlyAfterStartAndNotWhileDraining) {
  EXPECT_FALSE(service_->ready());
  EXPECT_TRUE(service_->Start({"general"}).ok());
  EXPECT_TRUE(service_->ready());
  service_->BeginShutdown();
  EXPECT_FALSE(service_->ready());
  EXPECT_EQ(Call({"x"}).status.code(), Code::kUnavailable);
  Service other(ServiceOptions{}, repo_.get(), nullptr, nullptr);
  EXPECT_EQ(other.Start({"nope"}).code(), Code::kNotFound);
}

TEST_F(ServiceTest, LogsAreJsonAndMaskNumbers) {
  ASSERT_TRUE(Call({"x"}).status.ok());
  std::lock_guard<std::mutex> lock(log_mu_);
  ASSERT_FALSE(log_lines_.empty());
  const auto j = nlohmann::json::parse(log_lines_.back());
  EXPECT_EQ(j["event"], "understand");
  EXPECT_EQ(j["model"], "general");
  EXPECT_EQ(j["intent"], "len1@general");
  EXPECT_EQ(j["code"], "OK");
  EXPECT_TRUE(j["latency_ms"].is_number());
  const std::string id = j["request_id"];
  EXPECT_EQ(id.find("13812345678"), std::string::npos) << id;
  EXPECT_EQ(id.rfind("req-", 0), 0u) << id;
}

TEST_F(ServiceTest, ShedCallsAreCountedNotLoggedEach) {
  ASSERT_TRUE(Call({"x"}).status.ok());
  service_->BeginShutdown();
  for (int i = 0; i < 300; ++i) ASSERT_EQ(Call({"x"}).status.code(), Code::kUnavailable);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  ASSERT_EQ(Call({"x"}).status.code(), Code::kUnavailable);  // a second later: the rest logged
  std::lock_guard<std::mutex> lock(log_mu_);
  int shed_lines = 0, understand_lines = 0;
  int64_t calls = 0;
  for (const std::string& l : log_lines_) {
    const auto j = nlohmann::json::parse(l);
    if (j["event"] == "understand") ++understand_lines;
    if (j["event"] != "shed") continue;
    ++shed_lines;
    calls += j["calls"].get<int64_t>();
    EXPECT_EQ(j["code"], "UNAVAILABLE");
  }
  EXPECT_EQ(understand_lines, 1);  // the call before the shutdown only
  EXPECT_EQ(calls, 301);           // every shed call counted in some line
  EXPECT_GE(shed_lines, 2);
  EXPECT_LE(shed_lines, 5);  // one a second at most (the loop takes well under 3 s)
  EXPECT_EQ(metrics_.requests.WithLabels({"-", "", "UNAVAILABLE"}).value(), 301);
}

}  // namespace
}  // namespace hotline::serving
