// Issue 23's small defects at the serving edge, through a real Server with a fake model: huge
// X-Timeout-Ms values, negative or overflowing KServe shapes, and error messages that quote
// caller input of any size.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "fake_model.h"
#include "frontends/grpc_service.h"
#include "frontends/hotline_grpc.h"
#include "frontends/server.h"

namespace hotline::frontends {
namespace {

namespace fs = std::filesystem;
using serving::testing::FakeModel;

class EdgeInputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new fs::path(fs::temp_directory_path() /
                         ("hotline_edge_input_" + std::to_string(::getpid())));
    fs::remove_all(*root_);
    fs::create_directories(*root_ / "general");
    std::ofstream(*root_ / "general" / "model.yaml")
        << "name: general\nversion: 2\nbusiness_lines: [public_security]\n";
    ServerConfig c;
    c.grpc_port = 0;
    c.http_port = 0;
    c.model_repository = root_->string();
    c.startup_models = {"general"};
    c.admin_token = "tok";
    c.log_requests = false;
    logger_ = new serving::Logger(nullptr, false);
    server_ = new Server(
        c, [](const serving::ModelSpec&) { return std::make_unique<FakeModel>(); }, "9.9", logger_);
    ASSERT_TRUE(server_->Start().ok());
    channel_ = new std::shared_ptr<grpc::Channel>(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(server_->grpc_port()), grpc::InsecureChannelCredentials()));
  }
  static void TearDownTestSuite() {
    delete channel_;
    delete server_;
    delete logger_;
    fs::remove_all(*root_);
    delete root_;
  }
  static httplib::Client Http() {
    httplib::Client c("127.0.0.1", server_->http_port());
    c.set_read_timeout(10, 0);
    return c;
  }
  // A KServe call with `shape` and two texts; the status it gets.
  static grpc::Status Infer(const std::vector<int64_t>& shape, const std::string& model = "general") {
    auto stub = inference::GRPCInferenceService::NewStub(*channel_);
    grpc::ClientContext ctx;
    inference::ModelInferRequest req;
    req.set_model_name(model);
    auto* in = req.add_inputs();
    in->set_name("text");
    in->set_datatype("BYTES");
    for (int64_t d : shape) in->add_shape(d);
    req.add_raw_input_contents(EncodeBytesTensor({"市民热线", "xy"}));
    inference::ModelInferResponse resp;
    return stub->ModelInfer(&ctx, req, &resp);
  }

  static fs::path* root_;
  static serving::Logger* logger_;
  static Server* server_;
  static std::shared_ptr<grpc::Channel>* channel_;
};
fs::path* EdgeInputTest::root_;
serving::Logger* EdgeInputTest::logger_;
Server* EdgeInputTest::server_;
std::shared_ptr<grpc::Channel>* EdgeInputTest::channel_;

TEST_F(EdgeInputTest, HugeTimeoutIsRefusedNotAnInstant504) {
  auto http = Http();
  auto post = [&](const std::string& ms) {
    httplib::Headers h = {{"X-Timeout-Ms", ms}};
    return http.Post("/v1/understand", h, R"({"text": "x"})", "application/json");
  };
  auto ok = post("86400000");  // 24 h: the largest accepted, and it must not expire at once
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  for (const char* ms : {"9e15", "9223372036854775807", "1e300", "inf", "86400001"}) {
    auto r = post(ms);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << ms << ": " << r->body;
    const auto err = nlohmann::json::parse(r->body);
    EXPECT_EQ(err["code"], "INVALID_ARGUMENT");
    EXPECT_NE(std::string(err["message"]).find("X-Timeout-Ms"), std::string::npos);
  }
}

TEST_F(EdgeInputTest, KServeRefusesNegativeAndOverflowingShapes) {
  ASSERT_TRUE(Infer({2, 1}).ok());  // the same request with a good shape is served
  // -1 x -2 = 2 elements, and 3 x 6148914691236517206 wraps around to 2 in int64: both used to
  // pass the element count check.
  grpc::Status neg = Infer({-1, -2});
  EXPECT_EQ(neg.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(neg.error_message().find("negative dimension -1"), std::string::npos)
      << neg.error_message();
  grpc::Status wrap = Infer({3, 6148914691236517206});
  EXPECT_EQ(wrap.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(wrap.error_message().find("exceeds the 2 elements"), std::string::npos)
      << wrap.error_message();
  grpc::Status big = Infer({int64_t(1) << 62, 4});  // 2^64 wraps to 0
  EXPECT_EQ(big.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << big.error_message();
}

TEST_F(EdgeInputTest, ErrorsQuoteCallerInputBounded) {
  const std::string huge = "m" + std::string(100000, 'x') + "13812345678";
  grpc::Status s = Infer({2, 1}, huge);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_LT(s.error_message().size(), 400u) << s.error_message().substr(0, 400);
  EXPECT_NE(s.error_message().find("(100012 bytes)"), std::string::npos);

  auto http = Http();
  nlohmann::json body = {{"text", "x"}, {"model", huge}};
  auto r = http.Post("/v1/understand", body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_LT(r->body.size(), 600u) << r->body.substr(0, 600);
  body = {{"text", "x"}, {"business_line", huge}};
  r = http.Post("/v1/understand", body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_LT(r->body.size(), 600u) << r->body.substr(0, 600);
  // A phone number inside a short quoted value is masked.
  httplib::Headers h = {{"X-Timeout-Ms", "call 13812345678"}};
  r = http.Post("/v1/understand", h, R"({"text": "x"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(r->body.find("13812345678"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("138****5678"), std::string::npos) << r->body;
}

}  // namespace
}  // namespace hotline::frontends
