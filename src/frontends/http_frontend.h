// HTTP routes over the serving core. JSON bodies mirror hotline.v1 (proto3 JSON mapping, field
// names as in the .proto); errors are {"code": "NOT_FOUND", "message": "..."} with the HTTP status
// of the code (base/error.h HttpStatus).
//
//   POST /v1/understand   UnderstandRequest → UnderstandResponse, or with "texts":
//                         UnderstandBatchRequest → UnderstandBatchResponse.
//                         Header X-Timeout-Ms: the call's deadline.
//   GET  /v1/models       ListModelsResponse
//   POST /v1/converse     ConverseRequest → ConverseResponse (one caller turn). X-Timeout-Ms too.
//   POST /v1/calls/{call_id}/end    (body empty or {}) → EndCallResponse; 404 for an unknown call
//   GET  /v1/work-orders/{id}       WorkOrder; 404 when unknown (role read_orders)
//   GET  /v1/work-orders?status=&department=&intent=&text=&created_from=&created_to=&limit=&offset=
//                         ListWorkOrdersResponse, newest first (role supervise)
//   PATCH /v1/work-orders/{id}      {"status", "note"} → WorkOrder (role supervise)
//                         The dialog routes answer 501 UNIMPLEMENTED when the server has no
//                         dialog configured.
//   GET  /metrics         Prometheus text format (role supervise)
//   GET  /healthz, /v2/health/live    200 while the process serves
//   GET  /readyz, /v2/health/ready    200 once the startup models are warm, else 503
// A known path with another method is 405 with Allow. 429 (shed load) and 503 (shutting down)
// carry Retry-After; while the server drains, every route but the health checks answers 503.
#pragma once

namespace httplib {
class Server;
}

namespace hotline::serving {
class Service;
class MetricsRegistry;
}  // namespace hotline::serving

namespace hotline::frontends {

class DialogService;
class Security;

// `dialog` may be null (no dialog routes then, beyond the 501 answer). `security` may be null (no
// authentication, no audit); with clients configured every route but the health checks needs a
// key (Authorization: Bearer KEY or X-API-Key: KEY): 401 without a valid one, 403 for a role the
// client lacks, 429 over its rate limit.
void InstallHttpRoutes(httplib::Server& server, serving::Service& service,
                       serving::MetricsRegistry& metrics, DialogService* dialog = nullptr,
                       Security* security = nullptr);

}  // namespace hotline::frontends
