// `hotline serve [--config FILE] [--model-repo DIR] [--grpc-port P] [--http-port Q]
// [--precision auto|fp32|bf16|int8|fp16|fp8]`: runs the
// gRPC and HTTP service until SIGTERM or SIGINT, then shuts down gracefully (stops accepting,
// answers what is in flight, exits 0).
#include <pthread.h>
#include <signal.h>

#include <filesystem>

#include "cli/command.h"
#include "engine/engine.h"
#include "frontends/server.h"

namespace {

struct ServeOptions {
  std::string config;
  std::string model_repo;
  int grpc_port = -1;
  int http_port = -1;
  std::string precision;  // overrides the config's; "auto" picks per model folder and machine
};

hotline::cli::Registrar reg(
    "serve", "Serve understanding over gRPC (hotline.v1, KServe v2) and HTTP", [](CLI::App& app) {
      auto o = std::make_shared<ServeOptions>();
      app.add_option("--config", o->config,
                     "Server config (YAML); default config/server.yaml when it exists");
      app.add_option("--model-repo", o->model_repo, "Folder of model folders (overrides config)");
      app.add_option("--grpc-port", o->grpc_port, "gRPC port (overrides config; 0: any free)");
      app.add_option("--http-port", o->http_port, "HTTP port (overrides config; 0: any free)");
      app.add_option("--precision", o->precision,
                     "auto|fp32|bf16|int8|fp16|fp8 (overrides config; int8 reads each model "
                     "folder's int8_calibration.json, made by `hotline calibrate`)");
      return [o]() -> int {
        using hotline::frontends::ServerConfig;
        ServerConfig c;
        if (!o->config.empty()) {
          c = ServerConfig::Load(o->config);
        } else if (std::filesystem::exists("config/server.yaml")) {
          c = ServerConfig::Load("config/server.yaml");
        }
        if (!o->model_repo.empty()) c.model_repository = o->model_repo;
        if (o->grpc_port >= 0) c.grpc_port = o->grpc_port;
        if (o->http_port >= 0) c.http_port = o->http_port;
        if (!o->precision.empty()) {
          c.pipeline.auto_precision = o->precision == "auto";
          if (!c.pipeline.auto_precision)
            c.pipeline.precision = hotline::engine::ParsePrecision(o->precision);
        }

        // Block the stop signals in every thread (threads inherit the mask); this thread waits
        // for them with sigwait, so no handler runs inside gRPC or the batchers.
        sigset_t stop;
        sigemptyset(&stop);
        sigaddset(&stop, SIGTERM);
        sigaddset(&stop, SIGINT);
        pthread_sigmask(SIG_BLOCK, &stop, nullptr);

        hotline::serving::Logger logger;
        hotline::frontends::Server server(c, hotline::serving::PipelineModelLoader(c.pipeline),
                                          HOTLINE_VERSION, &logger);
        hotline::Status st = server.Start();
        if (!st.ok()) logger.Error("startup_incomplete", {{"error", st.ToString()}});
        int sig = 0;
        sigwait(&stop, &sig);
        logger.Info("signal", {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}});
        server.Shutdown();
        return 0;
      };
    });

}  // namespace
