#include "frontends/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/impl/server_builder_plugin.h>
#include <httplib.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "frontends/dialog_service.h"
#include "frontends/grpc_service.h"
#include "frontends/http_frontend.h"
#include "frontends/http_server.h"

namespace hotline::frontends {

namespace {

template <typename T>
void Read(const YAML::Node& node, const char* key, T* out, const std::string& file) {
  const YAML::Node v = node[key];
  if (!v) return;
  try {
    *out = v.as<T>();
  } catch (const YAML::Exception&) {
    throw Error(file + ": key '" + key + "' has value '" + YAML::Dump(v) +
                "', which is not the expected type");
  }
}

void ReadDialog(const YAML::Node& node, const std::string& file, DialogServerConfig* out) {
  out->enabled = true;
  if (node.IsNull()) return;
  if (!node.IsMap()) throw Error(file + ": key 'dialog' must be a mapping");
  static const char* const kKeys[] = {"config",  "session_store", "work_order_db",  "taxonomy",
                                      "workers", "webhook",       "work_order_ids"};
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys)) {
      throw Error(file + ": unknown key 'dialog." + key +
                  "' (expected config, session_store, work_order_db, taxonomy, workers, webhook, "
                  "work_order_ids)");
    }
  }
  const std::string where = file + " (dialog)";
  Read(node, "config", &out->config, where);
  Read(node, "session_store", &out->session_store, where);
  Read(node, "work_order_db", &out->work_order_db, where);
  Read(node, "taxonomy", &out->taxonomy, where);
  Read(node, "workers", &out->workers, where);
  if (out->workers < 1 || out->workers > 256) {
    throw Error(file + ": dialog.workers must be 1..256; got " + std::to_string(out->workers));
  }
  std::string ids = "sequential";
  Read(node, "work_order_ids", &ids, where);
  if (ids != "sequential" && ids != "random") {
    throw Error(file + ": dialog.work_order_ids must be sequential or random; got '" + ids + "'");
  }
  out->random_order_ids = ids == "random";
  if (const YAML::Node w = node["webhook"]) {
    if (!w.IsMap()) throw Error(file + ": dialog.webhook must be a mapping");
    static const char* const kWebhook[] = {"url",     "timeout_s", "retry_min_s", "retry_max_s",
                                           "poll_s",  "ca",        "token_env"};
    for (const auto& kv : w) {
      const std::string key = kv.first.as<std::string>();
      if (std::find(std::begin(kWebhook), std::end(kWebhook), key) == std::end(kWebhook)) {
        throw Error(file + ": unknown key 'dialog.webhook." + key +
                    "' (expected url, timeout_s, retry_min_s, retry_max_s, poll_s, ca, token_env)");
      }
    }
    const std::string at = file + " (dialog.webhook)";
    WebhookConfig& h = out->webhook;
    Read(w, "url", &h.url, at);
    Read(w, "timeout_s", &h.timeout_s, at);
    Read(w, "retry_min_s", &h.retry_min_s, at);
    Read(w, "retry_max_s", &h.retry_max_s, at);
    Read(w, "poll_s", &h.poll_s, at);
    Read(w, "ca", &h.ca, at);
    Read(w, "token_env", &h.token_env, at);
    if (h.url.empty()) throw Error(file + ": dialog.webhook needs a url");
    if (!(h.timeout_s > 0) || !(h.retry_min_s > 0) || !(h.retry_max_s >= h.retry_min_s) ||
        !(h.poll_s > 0)) {
      throw Error(file + ": dialog.webhook needs timeout_s, retry_min_s, poll_s > 0 and "
                         "retry_max_s >= retry_min_s");
    }
  }
}

void ReadConsole(const YAML::Node& node, const std::string& file, ConsoleConfig* out) {
  out->enabled = true;
  if (node.IsNull()) return;
  if (!node.IsMap()) throw Error(file + ": key 'console' must be a mapping");
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    if (key != "dir" && key != "operations" && key != "max_streams") {
      throw Error(file + ": unknown key 'console." + key +
                  "' (expected dir, operations, max_streams)");
    }
  }
  const std::string where = file + " (console)";
  Read(node, "dir", &out->dir, where);
  Read(node, "operations", &out->operations, where);
  Read(node, "max_streams", &out->max_streams, where);
}

}  // namespace

ServerConfig ServerConfig::Load(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw Error("cannot read server config " + path, Code::kNotFound);
  } catch (const YAML::Exception& e) {
    throw Error(path + ": not valid YAML: " + e.what());
  }
  ServerConfig c;
  if (root.IsNull()) return c;
  if (!root.IsMap()) throw Error(path + ": expected a mapping at the top level");
  static const char* const kKeys[] = {"host",
                                      "grpc_port",
                                      "http_port",
                                      "model_repository",
                                      "startup_models",
                                      "default_model",
                                      "memory_budget_mb",
                                      "load_on_demand",
                                      "admin_token",
                                      "max_text_bytes",
                                      "max_texts_per_call",
                                      "max_message_bytes",
                                      "default_timeout_ms",
                                      "http_threads",
                                      "http_max_connections",
                                      "http_backlog",
                                      "http_header_timeout_ms",
                                      "http_body_timeout_ms",
                                      "shutdown_grace_s",
                                      "log_requests",
                                      "precision",
                                      "backend",
                                      "top_k",
                                      "dialog",
                                      "console",
                                      "security"};
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys)) {
      throw Error(path + ": unknown key '" + key + "'");
    }
  }
  Read(root, "host", &c.host, path);
  Read(root, "grpc_port", &c.grpc_port, path);
  Read(root, "http_port", &c.http_port, path);
  Read(root, "model_repository", &c.model_repository, path);
  Read(root, "startup_models", &c.startup_models, path);
  Read(root, "default_model", &c.default_model, path);
  double budget_mb = 0;
  Read(root, "memory_budget_mb", &budget_mb, path);
  c.memory_budget_bytes = int64_t(budget_mb * 1024 * 1024);
  Read(root, "load_on_demand", &c.load_on_demand, path);
  Read(root, "admin_token", &c.admin_token, path);
  Read(root, "max_text_bytes", &c.max_text_bytes, path);
  Read(root, "max_texts_per_call", &c.max_texts_per_call, path);
  Read(root, "max_message_bytes", &c.max_message_bytes, path);
  Read(root, "default_timeout_ms", &c.default_timeout_ms, path);
  Read(root, "http_threads", &c.http_threads, path);
  Read(root, "http_max_connections", &c.http_max_connections, path);
  Read(root, "http_backlog", &c.http_backlog, path);
  Read(root, "http_header_timeout_ms", &c.http_header_timeout_ms, path);
  Read(root, "http_body_timeout_ms", &c.http_body_timeout_ms, path);
  if (c.http_threads < 1 || c.http_max_connections < 1 || c.http_max_connections > 100000 ||
      c.http_backlog < 1 || !(c.http_header_timeout_ms > 0) || !(c.http_body_timeout_ms > 0) ||
      c.http_header_timeout_ms > 3600e3 || c.http_body_timeout_ms > 3600e3) {
    throw Error(path + ": http_threads, http_max_connections (at most 100000) and http_backlog "
                       "must be >= 1, http_header_timeout_ms and http_body_timeout_ms in "
                       "(0, 3600000]");
  }
  Read(root, "shutdown_grace_s", &c.shutdown_grace_s, path);
  Read(root, "log_requests", &c.log_requests, path);
  std::string precision = "fp32", backend = "cpu";
  Read(root, "precision", &precision, path);
  Read(root, "backend", &backend, path);
  Read(root, "top_k", &c.pipeline.top_k, path);
  if (root["dialog"]) ReadDialog(root["dialog"], path, &c.dialog);
  if (root["console"]) ReadConsole(root["console"], path, &c.console);
  if (c.console.enabled && !c.dialog.enabled) {
    throw Error(path + ": console: needs the dialog: section (it shows calls and work orders)");
  }
  c.security = SecurityConfig::Parse(root["security"], path);
  // Parsed here rather than with engine::ParsePrecision so the frontends do not need the engine
  // library to read a config file.
  static const std::pair<const char*, engine::Precision> kPrecisions[] = {
      {"fp32", engine::Precision::kFP32},
      {"fp16", engine::Precision::kFP16},
      {"bf16", engine::Precision::kBF16},
      {"int8", engine::Precision::kINT8},
      {"fp8", engine::Precision::kFP8}};
  bool found = false;
  c.pipeline.auto_precision = precision == "auto";  // chosen per machine at load (AutoPrecision)
  found = c.pipeline.auto_precision;
  for (const auto& [name, p] : kPrecisions) {
    if (precision == name) c.pipeline.precision = p, found = true;
  }
  if (!found) {
    throw Error(path + ": precision must be auto, fp32, fp16, bf16, int8 or fp8; got '" +
                precision + "'");
  }
  if (backend == "cpu") {
    c.pipeline.backend = engine::BackendKind::kCPU;
  } else if (backend == "cuda") {
    c.pipeline.backend = engine::BackendKind::kCUDA;
  } else {
    throw Error(path + ": backend must be cpu or cuda; got '" + backend + "'");
  }
  return c;
}

struct Server::GrpcParts {
  std::unique_ptr<HotlineGrpcService> hotline;
  std::unique_ptr<KServeGrpcService> kserve;
  std::unique_ptr<grpc::Server> server;
};

Server::Server(ServerConfig config, serving::ModelLoader loader, std::string version,
               serving::Logger* logger)
    : config_(std::move(config)), version_(std::move(version)), logger_(logger) {
  repository_ = std::make_unique<serving::ModelRepository>(
      serving::ModelRepository::Options{config_.model_repository, config_.memory_budget_bytes,
                                        config_.load_on_demand},
      std::move(loader), &metrics_);
  // "*" in startup_models: every model in the repository.
  std::vector<std::string> startup;
  for (const std::string& name : config_.startup_models) {
    if (name != "*") {
      startup.push_back(name);
      continue;
    }
    for (const serving::ModelSpec& spec : repository_->Scan()) {
      if (std::find(startup.begin(), startup.end(), spec.name) == startup.end()) {
        startup.push_back(spec.name);
      }
    }
  }
  if (config_.default_model.empty() && !startup.empty()) config_.default_model = startup.front();
  config_.startup_models = startup;
  serving::ServiceOptions so;
  so.default_model = config_.default_model;
  so.admin_token = config_.admin_token;
  so.max_text_bytes = config_.max_text_bytes;
  so.max_texts_per_call = config_.max_texts_per_call;
  so.default_timeout = std::chrono::duration_cast<serving::Duration>(
      std::chrono::duration<double, std::milli>(config_.default_timeout_ms));
  so.log_requests = config_.log_requests;
  service_ = std::make_unique<serving::Service>(so, repository_.get(), &metrics_, logger_);
}

Server::~Server() { Shutdown(); }

void Server::StartDialog() {
  if (!config_.dialog.enabled) return;
#if HOTLINE_HAVE_DIALOG
  const DialogServerConfig& dc = config_.dialog;
  dialog::DialogConfig config = dialog::DialogConfig::Load(dc.config);
  if (!dc.session_store.empty()) config.session_store = dc.session_store;
  if (!dc.work_order_db.empty()) config.work_order_db = dc.work_order_db;
  std::string taxonomy_file = dc.taxonomy;
  std::optional<float> model_threshold;
  for (const serving::ModelSpec& spec : repository_->Scan()) {
    if (spec.name != config_.default_model) continue;
    const nlu::ModelConfig mc = nlu::ModelConfig::Load(spec.dir);
    if (mc.kind != "joint") {
      if (!taxonomy_file.empty()) continue;  // the dialog's taxonomy is given in the config
      throw Error("dialog: the default model '" + spec.name + "' is a " + mc.kind +
                  " model; the dialog needs a joint (intent + slots) model as default_model");
    }
    if (taxonomy_file.empty()) taxonomy_file = mc.taxonomy_file;
    model_threshold = mc.handoff_threshold;
  }
  const std::string threshold_line = config.ApplyModelThreshold(model_threshold);
  if (logger_) logger_->Info("dialog_min_confidence", {{"detail", threshold_line}});
  if (taxonomy_file.empty()) {
    throw Error("dialog: no taxonomy given (dialog.taxonomy) and the default model '" +
                    config_.default_model + "' is not in the repository " +
                    config_.model_repository,
                Code::kNotFound);
  }
  const nlu::Taxonomy taxonomy = nlu::Taxonomy::Load(taxonomy_file);
  // SQLite creates the file, not its folder (var/ in a fresh checkout). A PostgreSQL URL is no
  // path: its "folder" would be a directory named after the scheme and host.
  const bool is_url = config.work_order_db.find("://") != std::string::npos;
  const std::filesystem::path db_dir = std::filesystem::path(config.work_order_db).parent_path();
  if (!is_url && !db_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(db_dir, ec);  // a failure surfaces when SQLite opens it
  }
  std::unique_ptr<dialog::DialogManager> manager = dialog::DialogManager::Create(config, taxonomy);
  if (dc.random_order_ids) manager->work_orders().UseRandomIds();
  dialog_metrics_ = std::make_unique<DialogMetrics>(registry_);
  dialog_ = CreateDialogService(service_.get(), std::move(manager), dialog_metrics_.get(), logger_,
                                dc.workers, dc.webhook);
  if (config_.console.enabled) {
    // Each model's precision as its load chooses it, for the console's health view.
    std::map<std::string, std::string> precisions;
    for (const serving::ModelSpec& spec : repository_->Scan()) {
      std::string why;
      try {
        precisions[spec.name] = std::string(engine::PrecisionName(
            config_.pipeline.auto_precision
                ? serving::AutoPrecision(config_.pipeline.backend, spec.dir, &why)
                : config_.pipeline.precision));
      } catch (const std::exception&) {
        precisions[spec.name] = "";  // its load reports the problem
      }
    }
    console_ = Console::Create(config_.console, taxonomy, service_.get(), registry_,
                               security_.get(), logger_, std::move(precisions));
    dialog_ = console_->Attach(std::move(dialog_));
  }
  if (logger_) {
    // The store URL may carry a password (redis://:pw@host): log its scheme only.
    logger_->Info("dialog_ready", {{"session_store",
                                    config.session_store.substr(0, config.session_store.find(':'))},
                                   {"work_order_db", config.work_order_db},
                                   {"taxonomy", taxonomy_file}});
  }
#else
  throw Error("the config has a dialog: section but this build has no dialog layer",
              Code::kUnimplemented);
#endif
}

void Server::SetHealth(bool serving) {
  if (!grpc_ || !grpc_->server) return;
  if (auto* health = grpc_->server->GetHealthCheckService()) {
    // The default service knows only the names it has been told about.
    for (const char* name : {"", "hotline.v1.Hotline", "inference.GRPCInferenceService"}) {
      health->SetServingStatus(name, serving);
    }
  }
}

namespace {

std::string ReadPem(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read TLS file " + path, Code::kNotFound);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Linking grpc++_reflection registers its plugin with every ServerBuilder (a static initialiser);
// this option takes it out again when the config leaves reflection off.
class WithoutReflection final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->erase(std::remove_if(plugins->begin(), plugins->end(),
                                  [](const std::unique_ptr<grpc::ServerBuilderPlugin>& p) {
                                    return p->name() == "proto_server_reflection";
                                  }),
                   plugins->end());
  }
};

std::shared_ptr<grpc::ServerCredentials> GrpcCredentials(const TlsConfig& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions opts(
      tls.require_client_cert ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                              : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  if (!tls.ca.empty()) opts.pem_root_certs = ReadPem(tls.ca);
  opts.pem_key_cert_pairs.push_back({ReadPem(tls.key), ReadPem(tls.cert)});
  return grpc::SslServerCredentials(opts);
}

// The host without IPv6 brackets ("[::1]" → "::1"), as getaddrinfo (httplib) takes it.
std::string BareHost(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

// host:port, with an IPv6 host in brackets ("[::1]:50051"), as gRPC and logs take it.
std::string HostPort(const std::string& host, int port) {
  const std::string bare = BareHost(host);
  const bool v6 = bare.find(':') != std::string::npos;
  return (v6 ? "[" + bare + "]" : bare) + ":" + std::to_string(port);
}

}  // namespace

Status Server::Start() {
  // Refuses to expose work orders to the network in clear before anything is opened.
  CheckExposure(config_.host, config_.security);
  security_ = std::make_unique<Security>(config_.security, logger_);
  // gRPC: health and reflection are process-wide switches that must precede the builder.
  grpc::EnableDefaultHealthCheckService(true);
  if (config_.security.reflection) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  StartDialog();  // before the listeners: a call must never see a half-built dialog
  grpc_ = std::make_unique<GrpcParts>();
  grpc_->hotline =
      std::make_unique<HotlineGrpcService>(service_.get(), dialog_.get(), security_.get());
  grpc_->kserve = std::make_unique<KServeGrpcService>(service_.get(), version_, security_.get());
  grpc::ServerBuilder builder;
  const std::string address = HostPort(config_.host, config_.grpc_port);
  builder.AddListeningPort(address, GrpcCredentials(config_.security.tls), &grpc_port_);
  // A port held by another process is an error, never a silently shared listener.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  if (!config_.security.reflection) builder.SetOption(std::make_unique<WithoutReflection>());
  builder.SetMaxReceiveMessageSize(config_.max_message_bytes);
  builder.RegisterService(grpc_->hotline.get());
  builder.RegisterService(grpc_->kserve.get());
  grpc_->server = builder.BuildAndStart();
  if (!grpc_->server || grpc_port_ == 0) {
    throw Error("cannot listen for gRPC on " + address + ": port " +
                    std::to_string(config_.grpc_port) + " is in use, or host " +
                    BareHost(config_.host) + " is not an address of this machine",
                Code::kUnavailable);
  }
  SetHealth(false);  // not serving until the startup models are warm
  StartHttp();
  if (logger_) {
    logger_->Info("listening", {{"grpc", HostPort(config_.host, grpc_port_)},
                                {"http", HostPort(config_.host, http_port_)},
                                {"tls", config_.security.tls.enabled()},
                                {"mtls", config_.security.tls.require_client_cert},
                                {"auth", config_.security.auth_enabled()},
                                {"clients", config_.security.clients.size()},
                                {"reflection", config_.security.reflection}});
  }
  Status st = service_->Start(config_.startup_models);
  SetHealth(true);
  if (logger_) logger_->Info("ready", {{"ready", service_->ready()}});
  return st;
}

void Server::StartHttp() {
  const TlsConfig& tls = config_.security.tls;
  if (tls.enabled()) {
    auto https = std::make_unique<TlsHttpServer>(
        tls.cert.c_str(), tls.key.c_str(), tls.require_client_cert ? tls.ca.c_str() : nullptr);
    if (!https->is_valid()) {
      throw Error("TLS for HTTP: cannot use the certificate " + tls.cert + " and key " + tls.key +
                      (tls.require_client_cert ? " with client CA " + tls.ca : std::string()),
                  Code::kInvalidArgument);
    }
    // Each connection its own thread, as for plain HTTP (frontends/http_server.h).
    const size_t min = size_t(std::max(1, config_.http_threads));
    const size_t max = size_t(config_.http_max_connections);
    https->new_task_queue = [min, max] { return new ConnectionPool(min, max); };
    https->set_read_timeout(std::chrono::milliseconds(int64_t(config_.http_header_timeout_ms)));
    http_ = std::move(https);
  } else {
    HttpLimits limits;
    limits.min_threads = config_.http_threads;
    limits.max_connections = config_.http_max_connections;
    limits.backlog = config_.http_backlog;
    limits.header_timeout = std::chrono::milliseconds(int64_t(config_.http_header_timeout_ms));
    limits.body_timeout = std::chrono::milliseconds(int64_t(config_.http_body_timeout_ms));
    auto plain = std::make_unique<GuardedHttpServer>(limits);
    guarded_http_ = plain.get();
    http_ = std::move(plain);
  }
  // httplib's default also sets SO_REUSEPORT, which lets a second server bind the same port.
  http_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<void*>(&yes), sizeof(yes));
  });
  http_->set_payload_max_length(size_t(config_.max_message_bytes));
  http_->set_keep_alive_max_count(1000);
  InstallHttpRoutes(*http_, *service_, registry_, dialog_.get(), security_.get());
  if (console_) console_->Install(*http_);
  if (config_.http_port == 0) {
    http_port_ = http_->bind_to_any_port(BareHost(config_.host));
  } else if (http_->bind_to_port(BareHost(config_.host), config_.http_port)) {
    http_port_ = config_.http_port;
  }
  if (http_port_ > 0) {
    if (guarded_http_) {
      guarded_http_->ApplyBacklog();
    } else {
      static_cast<TlsHttpServer*>(http_.get())->ApplyBacklog(config_.http_backlog);
    }
  }
  if (http_port_ <= 0) {
    throw Error("cannot listen for HTTP on " + HostPort(config_.host, config_.http_port) +
                    ": port " + std::to_string(config_.http_port) + " is in use, or host " +
                    BareHost(config_.host) + " is not an address of this machine",
                Code::kUnavailable);
  }
  http_thread_ = std::thread([this] { http_->listen_after_bind(); });
}

void Server::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (logger_) logger_->Info("shutting_down", {});
  service_->BeginShutdown();  // readiness false; new calls UNAVAILABLE (HTTP 503)
  SetHealth(false);
  if (console_) console_->Stop();  // its event streams end: they hold no request open
  const auto grace_end = std::chrono::steady_clock::now() +
                         std::chrono::milliseconds(int64_t(config_.shutdown_grace_s * 1000));
  if (grpc_ && grpc_->server) {
    // Waits for calls in flight (the batchers keep answering them) up to the grace period, then
    // cancels what is left.
    grpc_->server->Shutdown(std::chrono::system_clock::now() +
                            std::chrono::milliseconds(int64_t(config_.shutdown_grace_s * 1000)));
    grpc_->server->Wait();
  }
  if (http_) {
    // The listener stays open (new requests: 503) until the requests already read are
    // answered; stopping then answers every connection accepted so far before joining.
    if (guarded_http_ && !guarded_http_->WaitIdle(grace_end) && logger_) {
      logger_->Warn("shutdown_grace_passed", {{"http_requests", guarded_http_->active_requests()}});
    }
    http_->stop();
    if (http_thread_.joinable()) http_thread_.join();
  }
  service_->FinishShutdown();        // answers anything still queued, unloads
  if (dialog_) dialog_->Shutdown();  // finishes dialog steps already accepted
  if (logger_) logger_->Info("stopped", {});
}

}  // namespace hotline::frontends
