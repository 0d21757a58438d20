// `hotline serve`: the serving core behind gRPC (hotline.v1.Hotline, the KServe v2
// GRPCInferenceService, grpc.health.v1.Health, server reflection when security.reflection is
// on) and HTTP (/v1/understand, /metrics, /healthz, /readyz, /v2/health/*), plus the dialog
// (Converse, EndCall, work orders; /v1/converse, /v1/calls/{id}/end, /v1/work-orders) when the
// config has a dialog: section. TLS, API keys and roles: security: (frontends/security.h).
//
// Lifecycle: Start() binds both ports and serves liveness at once, loads and warms up the
// startup models, then reports ready (health SERVING, /readyz 200). Shutdown() (SIGTERM) drains:
// readiness goes false and new calls get UNAVAILABLE (HTTP 503 with Retry-After) while the
// listeners stay open, every call already accepted is answered (within shutdown_grace_s), then
// the listeners close and the models unload.
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "serving/log.h"
#include "serving/metrics.h"
#include "serving/model.h"
#include "serving/model_repository.h"
#include "serving/service.h"
#include "serving/serving_metrics.h"
#include "frontends/console.h"
#include "frontends/security.h"
#include "frontends/webhook.h"

namespace grpc {
class Server;
}
namespace httplib {
class Server;
}

namespace hotline::frontends {

class DialogService;
class GuardedHttpServer;
struct DialogMetrics;

// server.yaml's dialog: section. Present (even empty) turns the dialog on.
struct DialogServerConfig {
  bool enabled = false;
  std::string config = "config/dialog.yaml";  // dialog::DialogConfig (prompts, policy, stores)
  std::string session_store;  // overrides the dialog config's: "memory" or "redis://host:port[/db]"
  std::string work_order_db;  // overrides the dialog config's SQLite path
  // The taxonomy the dialog reads intents' kinds and required slots from; default: the default
  // model's own (its model.yaml files.taxonomy), so the dialog and the model always agree.
  std::string taxonomy;
  int workers = 8;  // threads running dialog steps (session store and work-order I/O)
  WebhookConfig webhook;  // new orders pushed to the city's system (frontends/webhook.h)
  // work_order_ids: random: order numbers drawn at random, not counted (WorkOrderStore).
  bool random_order_ids = false;
};

// config/server.yaml. Every key is optional; the defaults are what `make run` uses.
struct ServerConfig {
  std::string host = "127.0.0.1";
  int grpc_port = 50051;  // 0: any free port (tests)
  int http_port = 8080;
  std::string model_repository = "models";
  // Loaded (and warmed up) before ready; "*": every model in the repository.
  std::vector<std::string> startup_models = {"*"};
  std::string default_model;  // default: the first startup model
  int64_t memory_budget_bytes = 0;
  bool load_on_demand = true;
  std::string admin_token;
  int max_text_bytes = 16384;
  int max_texts_per_call = 256;
  int max_message_bytes = 4 << 20;  // gRPC receive limit and HTTP body limit
  double default_timeout_ms = 0;
  int http_threads = 16;               // HTTP threads started at once (more as connections come)
  int http_max_connections = 512;      // beyond: 503 with Retry-After at once
  int http_backlog = 1024;             // the HTTP listen backlog
  double http_header_timeout_ms = 5000;  // a request's head must arrive whole within this
  double http_body_timeout_ms = 30000;   // and its body within this after the head
  double shutdown_grace_s = 10;
  bool log_requests = true;
  serving::PipelineModelOptions pipeline;
  DialogServerConfig dialog;
  ConsoleConfig console;  // the operators' web console (frontends/console.h); needs dialog
  SecurityConfig security;  // TLS, clients and roles, audit (frontends/security.h)
  // Throws hotline::Error naming the file and key.
  static ServerConfig Load(const std::string& path);
};

class Server {
 public:
  // `loader` builds models (PipelineModelLoader for the real thing). `version`: ServerMetadata's.
  Server(ServerConfig config, serving::ModelLoader loader, std::string version,
         serving::Logger* logger);
  ~Server();

  // Throws hotline::Error(kUnavailable) when a port cannot be bound (naming it; ports are never
  // shared: no SO_REUSEPORT) or the dialog's session store or work-order database cannot be
  // opened (and naming the file for a bad dialog config); kFailedPrecondition when the host is
  // not loopback and the config lacks TLS or clients without security.insecure: true.
  // Startup models that fail to load are logged and returned as the status; the server keeps
  // running without them.
  Status Start();
  void Shutdown();

  int grpc_port() const { return grpc_port_; }
  int http_port() const { return http_port_; }
  serving::Service& service() { return *service_; }
  serving::MetricsRegistry& metrics() { return registry_; }

 private:
  void StartHttp();
  void StartDialog();
  void SetHealth(bool serving);

  ServerConfig config_;
  std::string version_;
  serving::Logger* logger_;
  serving::MetricsRegistry registry_;
  serving::ServingMetrics metrics_{registry_};
  std::unique_ptr<serving::ModelRepository> repository_;
  std::unique_ptr<serving::Service> service_;
  std::unique_ptr<Security> security_;
  std::unique_ptr<DialogMetrics> dialog_metrics_;
  std::unique_ptr<DialogService> dialog_;
  std::unique_ptr<Console> console_;  // stopped before dialog_ goes
  struct GrpcParts;
  std::unique_ptr<GrpcParts> grpc_;
  std::unique_ptr<httplib::Server> http_;
  GuardedHttpServer* guarded_http_ = nullptr;  // http_ without TLS (null with TLS)
  std::thread http_thread_;
  int grpc_port_ = 0, http_port_ = 0;
  bool shut_down_ = false;
};

}  // namespace hotline::frontends
