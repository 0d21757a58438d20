// The frontends in-process: a real Server on free ports with a fake model, driven through a real
// gRPC channel and a real HTTP client. (tests/e2e drives the real binary with the real model.)
#include <google/protobuf/util/json_util.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>

#include "fake_model.h"
#include "frontends/grpc_service.h"
#include "frontends/hotline_grpc.h"
#include "frontends/server.h"

namespace hotline::frontends {
namespace {

namespace fs = std::filesystem;
using serving::testing::FakeIntent;
using serving::testing::FakeModel;

class FrontendsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new fs::path(fs::temp_directory_path() /
                         ("hotline_frontends_" + std::to_string(::getpid())));
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
    c.max_text_bytes = 1000;
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

  static fs::path* root_;
  static serving::Logger* logger_;
  static Server* server_;
  static std::shared_ptr<grpc::Channel>* channel_;
};
fs::path* FrontendsTest::root_;
serving::Logger* FrontendsTest::logger_;
Server* FrontendsTest::server_;
std::shared_ptr<grpc::Channel>* FrontendsTest::channel_;

TEST_F(FrontendsTest, GrpcUnderstandAndBatch) {
  auto stub = hotline::v1::Hotline::NewStub(*channel_);
  grpc::ClientContext ctx;
  hotline::v1::UnderstandRequest req;
  req.set_text("我家楼下装修太吵了");
  req.set_request_id("r1");
  hotline::v1::UnderstandResponse resp;
  grpc::Status s = stub->Understand(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.result().intent(), FakeIntent("我家楼下装修太吵了"));
  EXPECT_EQ(resp.result().category(), "c9");
  EXPECT_EQ(resp.result().category_name(), "类9");
  EXPECT_EQ(resp.request_id(), "r1");
  EXPECT_EQ(resp.serving().model_name(), "general");
  EXPECT_EQ(resp.serving().model_version(), "2");

  grpc::ClientContext ctx2;
  hotline::v1::UnderstandBatchRequest breq;
  for (std::string t : {"a", "bb", "ccc"}) breq.add_texts(t);
  breq.set_business_line("public_security");
  hotline::v1::UnderstandBatchResponse bresp;
  ASSERT_TRUE(stub->UnderstandBatch(&ctx2, breq, &bresp).ok());
  ASSERT_EQ(bresp.results_size(), 3);
  EXPECT_EQ(bresp.results(2).intent(), "len3");
}

TEST_F(FrontendsTest, GrpcErrorsMapToTheirCodes) {
  auto stub = hotline::v1::Hotline::NewStub(*channel_);
  auto call = [&](const std::string& text, const std::string& model) {
    grpc::ClientContext ctx;
    hotline::v1::UnderstandRequest req;
    req.set_text(text);
    req.set_model(model);
    hotline::v1::UnderstandResponse resp;
    return stub->Understand(&ctx, req, &resp);
  };
  EXPECT_EQ(call("x", "nope").error_code(), grpc::StatusCode::NOT_FOUND);
  grpc::Status big = call(std::string(1001, 'x'), "");
  EXPECT_EQ(big.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(big.error_message().find("1001 bytes"), std::string::npos);
  // Beyond the gRPC message limit (4 MiB): refused by gRPC itself.
  EXPECT_EQ(call(std::string(5 << 20, 'x'), "").error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  {
    grpc::ClientContext ctx;
    hotline::v1::LoadModelRequest req;
    req.set_name("general");
    hotline::v1::LoadModelResponse resp;
    EXPECT_EQ(stub->LoadModel(&ctx, req, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;
    hotline::v1::LoadModelRequest req;
    req.set_name("general");
    req.set_admin_token("tok");
    hotline::v1::LoadModelResponse resp;
    ASSERT_TRUE(stub->LoadModel(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.model().state(), "ready");
  }
  // Invalid UTF-8 in the text field, hand-encoded (a protobuf library would refuse to send it):
  // field 1, wire type 2, length 3, bytes "a\xff b".
  grpc::GenericStub generic(*channel_);
  grpc::ClientContext ctx;
  const char raw[] = {0x0A, 0x03, 'a', char(0xFF), 'b'};
  grpc::Slice slice(raw, sizeof raw);
  grpc::ByteBuffer request(&slice, 1), response;
  std::promise<grpc::Status> done;
  generic.UnaryCall(&ctx, "/hotline.v1.Hotline/Understand", grpc::StubOptions(), &request,
                    &response, [&](grpc::Status s) { done.set_value(s); });
  grpc::Status s = done.get_future().get();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
}

TEST_F(FrontendsTest, KServeInferWithRawBytes) {
  auto stub = inference::GRPCInferenceService::NewStub(*channel_);
  {
    grpc::ClientContext ctx;
    inference::ServerReadyResponse resp;
    ASSERT_TRUE(stub->ServerReady(&ctx, {}, &resp).ok());
    EXPECT_TRUE(resp.ready());
  }
  {
    grpc::ClientContext ctx;
    inference::ModelMetadataRequest req;
    req.set_name("general");
    inference::ModelMetadataResponse resp;
    ASSERT_TRUE(stub->ModelMetadata(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.inputs(0).name(), "text");
    ASSERT_EQ(resp.outputs_size(), 6);
    EXPECT_EQ(resp.outputs(4).name(), "category");
    EXPECT_EQ(resp.outputs(5).name(), "category_name");
  }
  grpc::ClientContext ctx;
  inference::ModelInferRequest req;
  req.set_model_name("general");
  auto* in = req.add_inputs();
  in->set_name("text");
  in->set_datatype("BYTES");
  in->add_shape(2);
  in->add_shape(1);
  req.add_raw_input_contents(EncodeBytesTensor({"市民热线", "xy"}));
  inference::ModelInferResponse resp;
  grpc::Status s = stub->ModelInfer(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.outputs_size(), 3);
  EXPECT_EQ(resp.outputs(0).name(), "intent");
  EXPECT_EQ(resp.outputs(0).shape_size(), 2);
  EXPECT_EQ(DecodeBytesTensor(resp.raw_output_contents(0)),
            (std::vector<std::string>{"len4", "len2"}));
  float conf[2];
  ASSERT_EQ(resp.raw_output_contents(1).size(), sizeof conf);
  std::memcpy(conf, resp.raw_output_contents(1).data(), sizeof conf);
  EXPECT_FLOAT_EQ(conf[0], 0.5f);
  EXPECT_EQ(DecodeBytesTensor(resp.raw_output_contents(2))[0], "[]");

  // Department and category on request, beside the default three.
  {
    grpc::ClientContext ctx3;
    inference::ModelInferRequest creq = req;
    for (const char* name : {"intent", "category", "category_name"}) creq.add_outputs()->set_name(name);
    inference::ModelInferResponse cresp;
    ASSERT_TRUE(stub->ModelInfer(&ctx3, creq, &cresp).ok());
    ASSERT_EQ(cresp.outputs_size(), 3);
    EXPECT_EQ(cresp.outputs(1).name(), "category");
    EXPECT_EQ(DecodeBytesTensor(cresp.raw_output_contents(1)),
              (std::vector<std::string>{"c4", "c2"}));
    EXPECT_EQ(DecodeBytesTensor(cresp.raw_output_contents(2)),
              (std::vector<std::string>{"类4", "类2"}));
    grpc::ClientContext ctx4;
    creq.add_outputs()->set_name("colour");
    EXPECT_EQ(stub->ModelInfer(&ctx4, creq, &cresp).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }

  grpc::ClientContext ctx2;
  req.mutable_raw_input_contents(0)->resize(5);  // truncated element
  EXPECT_EQ(stub->ModelInfer(&ctx2, req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THROW(DecodeBytesTensor(std::string("\x05\x00\x00\x00ab", 6)), Error);
}

TEST_F(FrontendsTest, HttpUnderstandErrorsHealthAndMetrics) {
  auto http = Http();
  auto r =
      http.Post("/v1/understand", R"({"text": "你好", "request_id": "h1"})", "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  auto j = nlohmann::json::parse(r->body);
  EXPECT_EQ(j["result"]["intent"], "len2");
  EXPECT_EQ(j["request_id"], "h1");
  EXPECT_EQ(j["serving"]["model_version"], "2");

  r = http.Post("/v1/understand", R"({"texts": ["a", "bb"]})", "application/json");
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(nlohmann::json::parse(r->body)["results"][1]["intent"], "len2");

  auto status_of = [&](const std::string& body) {
    auto res = http.Post("/v1/understand", body, "application/json");
    return res ? res->status : -1;
  };
  EXPECT_EQ(status_of("{\"text\": "), 400);            // malformed JSON
  EXPECT_EQ(status_of("[1, 2]"), 400);                 // not an object
  EXPECT_EQ(status_of(R"({"txet": "typo"})"), 400);    // unknown field
  EXPECT_EQ(status_of("{\"text\": \"a\xFF\"}"), 400);  // invalid UTF-8
  EXPECT_EQ(status_of(R"({"text": "x", "model": "nope"})"), 404);
  EXPECT_EQ(status_of(R"({"texts": []})"), 400);
  auto bad = http.Post("/v1/understand", R"({"text": "x", "model": "nope"})", "application/json");
  auto err = nlohmann::json::parse(bad->body);
  EXPECT_EQ(err["code"], "NOT_FOUND");
  EXPECT_NE(std::string(err["message"]).find("nope"), std::string::npos);
  httplib::Headers timeout = {{"X-Timeout-Ms", "0"}};
  r = http.Post("/v1/understand", timeout, R"({"text": "x"})", "application/json");
  EXPECT_EQ(r->status, 504);

  EXPECT_EQ(http.Get("/healthz")->status, 200);
  EXPECT_EQ(http.Get("/readyz")->status, 200);
  EXPECT_EQ(http.Get("/v2/health/live")->status, 200);
  EXPECT_EQ(http.Get("/v2/health/ready")->status, 200);
  EXPECT_EQ(http.Get("/nowhere")->status, 404);
  auto models = nlohmann::json::parse(http.Get("/v1/models")->body);
  EXPECT_EQ(models["models"][0]["name"], "general");
  const std::string metrics = http.Get("/metrics")->body;
  EXPECT_NE(metrics.find("hotline_requests_total{model=\"general\",intent=\"len2\",code=\"OK\"}"),
            std::string::npos);
  EXPECT_NE(metrics.find("hotline_model_state{model=\"general\",state=\"ready\"} 1"),
            std::string::npos);
  EXPECT_NE(metrics.find("hotline_execution_count_total{model=\"general\"}"), std::string::npos);
}

TEST_F(FrontendsTest, ServerConfigReadsYamlAndRejectsUnknownKeys) {
  const fs::path f = *root_ / "server.yaml";
  std::ofstream(f) << "grpc_port: 1234\nstartup_models: [a, b]\nmemory_budget_mb: 2\n"
                      "precision: int8\n";
  ServerConfig c = ServerConfig::Load(f.string());
  EXPECT_EQ(c.grpc_port, 1234);
  EXPECT_EQ(c.startup_models, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(c.memory_budget_bytes, 2 << 20);
  EXPECT_EQ(c.pipeline.precision, engine::Precision::kINT8);
  EXPECT_FALSE(c.pipeline.auto_precision);
  std::ofstream(f) << "precision: auto\n";
  EXPECT_TRUE(ServerConfig::Load(f.string()).pipeline.auto_precision);
  std::ofstream(f) << "precision: fp12\n";
  try {
    ServerConfig::Load(f.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("auto, fp32"), std::string::npos) << e.what();
  }
  std::ofstream(f) << "grpc_prot: 1\n";
  try {
    ServerConfig::Load(f.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("grpc_prot"), std::string::npos);
  }
}

TEST_F(FrontendsTest, ServerConfigReadsHttpLimits) {
  const fs::path f = *root_ / "server.yaml";
  std::ofstream(f) << "{}\n";
  const ServerConfig d = ServerConfig::Load(f.string());
  EXPECT_EQ(d.http_max_connections, 512);
  EXPECT_EQ(d.http_backlog, 1024);
  EXPECT_EQ(d.http_header_timeout_ms, 5000);
  std::ofstream(f) << "http_max_connections: 9\nhttp_backlog: 77\nhttp_header_timeout_ms: 250\n"
                      "http_body_timeout_ms: 1000\n";
  ServerConfig c = ServerConfig::Load(f.string());
  EXPECT_EQ(c.http_max_connections, 9);
  EXPECT_EQ(c.http_backlog, 77);
  EXPECT_EQ(c.http_header_timeout_ms, 250);
  EXPECT_EQ(c.http_body_timeout_ms, 1000);
  for (const char* bad : {"http_max_connections: 0\n", "http_backlog: -1\n",
                          "http_header_timeout_ms: 0\n", "http_body_timeout_ms: .nan\n"}) {
    std::ofstream(f) << bad;
    try {
      ServerConfig::Load(f.string());
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("http_header_timeout_ms"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace hotline::frontends
