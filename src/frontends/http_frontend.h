// HTTP routes over the serving core. JSON bodies mirror hotline.v1 (proto3 JSON mapping, field
// names as in the .proto); errors are {"code": "NOT_FOUND", "message": "..."} with the HTTP status
// of the code (base/error.h HttpStatus).
//
//   POST /v1/understand   UnderstandRequest → UnderstandResponse, or with "texts":
//                         UnderstandBatchRequest → UnderstandBatchResponse.
//                         Header X-Timeout-Ms: the call's deadline.
//   GET  /v1/models       ListModelsResponse
//   GET  /metrics         Prometheus text format
//   GET  /healthz, /v2/health/live    200 while the process serves
//   GET  /readyz, /v2/health/ready    200 once the startup models are warm, else 503
#pragma once

namespace httplib {
class Server;
}

namespace hotline::serving {
class Service;
class MetricsRegistry;
}  // namespace hotline::serving

namespace hotline::frontends {

void InstallHttpRoutes(httplib::Server& server, serving::Service& service,
                       serving::MetricsRegistry& metrics);

}  // namespace hotline::frontends
