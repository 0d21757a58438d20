#include "frontends/http_frontend.h"

#include <google/protobuf/util/json_util.h>
#include <httplib.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "base/echo.h"
#include "frontends/convert.h"
#include "frontends/dialog_service.h"
#include "frontends/security.h"
#include "serving/metrics.h"
#include "serving/service.h"

namespace hotline::frontends {
namespace {

void SendError(httplib::Response& res, const Status& s) {
  res.status = HttpStatus(s.code());
  // Shed load (429) and shutdown (503): the caller may come back, and is told when.
  if (res.status == 429 || res.status == 503) res.set_header("Retry-After", "1");
  nlohmann::json body = {{"code", CodeName(s.code())}, {"message", s.message()}};
  res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                  "application/json");
}

void SendProto(httplib::Response& res, const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  opts.always_print_primitive_fields = true;
  std::string out;
  auto st = google::protobuf::util::MessageToJsonString(m, &out, opts);
  if (!st.ok()) return SendError(res, Status(Code::kInternal, "cannot encode the response"));
  res.status = 200;
  res.set_content(out, "application/json");
}

// Parses the body into `msg`; false (with the error sent) when it is not the expected JSON.
bool ParseBody(const httplib::Request& req, httplib::Response& res,
               google::protobuf::Message* msg) {
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = false;
  auto st = google::protobuf::util::JsonStringToMessage(req.body, msg, opts);
  if (!st.ok()) {
    SendError(res, Status(Code::kInvalidArgument, "the body is not a valid " +
                                                      msg->GetDescriptor()->full_name() +
                                                      " in JSON: " + EchoInput(std::string(st.message()), 200)));
    return false;
  }
  return true;
}

// The largest X-Timeout-Ms accepted: 24 h.
constexpr double kMaxTimeoutMs = 86400000;

serving::TimePoint DeadlineFromHeader(const httplib::Request& req, Status* error) {
  if (!req.has_header("X-Timeout-Ms")) return serving::TimePoint::max();
  const std::string v = req.get_header_value("X-Timeout-Ms");
  try {
    size_t used = 0;
    const double ms = std::stod(v, &used);
    // Bounded: past ~9e15 ms, now + timeout overflows the clock and the call expired at once.
    if (used != v.size() || !(ms >= 0) || !(ms <= kMaxTimeoutMs)) throw std::invalid_argument(v);
    return serving::Clock::now() + std::chrono::duration_cast<serving::Duration>(
                                       std::chrono::duration<double, std::milli>(ms));
  } catch (const std::exception&) {
    *error = Status(Code::kInvalidArgument,
                    "X-Timeout-Ms must be a number of milliseconds in [0, " +
                        std::to_string(kMaxTimeoutMs) + "] (24 h); got '" + EchoInput(v) + "'");
    return serving::TimePoint::max();
  }
}

void HandleUnderstand(serving::Service& service, const httplib::Request& req,
                      httplib::Response& res) {
  // Validate the JSON itself first (also rejects invalid UTF-8) so the error names the cause.
  nlohmann::json peek;
  try {
    peek = nlohmann::json::parse(req.body);
  } catch (const nlohmann::json::exception& e) {
    return SendError(res, Status(Code::kInvalidArgument,
                                 "the body is not valid JSON: " + EchoInput(e.what(), 200)));
  }
  if (!peek.is_object()) {
    return SendError(res, Status(Code::kInvalidArgument, "the body must be a JSON object"));
  }
  Status header_error;
  const serving::TimePoint deadline = DeadlineFromHeader(req, &header_error);
  if (!header_error.ok()) return SendError(res, header_error);

  const bool batch = peek.contains("texts");
  hotline::v1::UnderstandRequest single;
  hotline::v1::UnderstandBatchRequest many;
  if (!ParseBody(req, res, batch ? static_cast<google::protobuf::Message*>(&many) : &single)) {
    return;
  }
  serving::UnderstandCall call = batch ? FromProto(many) : FromProto(single);
  call.deadline = deadline;
  call.trace_id = TraceIdOf(req.get_header_value("traceparent"));
  serving::UnderstandReply r = service.UnderstandSync(std::move(call));
  if (!r.status.ok()) return SendError(res, r.status);
  if (batch) {
    hotline::v1::UnderstandBatchResponse out;
    for (const auto& u : r.results) ToProto(u, out.add_results());
    out.set_request_id(many.request_id());
    ToProto(r, out.mutable_serving());
    return SendProto(res, out);
  }
  hotline::v1::UnderstandResponse out;
  ToProto(r.results.at(0), out.mutable_result());
  out.set_request_id(single.request_id());
  ToProto(r, out.mutable_serving());
  SendProto(res, out);
}

// Checks that the body is a JSON object (valid UTF-8 included) before the proto parser sees it,
// so the error names the cause. An empty body counts as {} when `empty_ok`.
bool CheckJsonObject(const httplib::Request& req, httplib::Response& res, bool empty_ok) {
  if (empty_ok && req.body.find_first_not_of(" \t\r\n") == std::string::npos) return true;
  nlohmann::json peek;
  try {
    peek = nlohmann::json::parse(req.body);
  } catch (const nlohmann::json::exception& e) {
    SendError(res, Status(Code::kInvalidArgument,
                          "the body is not valid JSON: " + EchoInput(e.what(), 200)));
    return false;
  }
  if (!peek.is_object()) {
    SendError(res, Status(Code::kInvalidArgument, "the body must be a JSON object"));
    return false;
  }
  return true;
}

std::string Credential(const httplib::Request& req) {
  if (req.has_header("Authorization")) return req.get_header_value("Authorization");
  return req.get_header_value("X-API-Key");
}

bool IsHealthPath(const std::string& path) {
  return path == "/healthz" || path == "/readyz" || path == "/v2/health/live" ||
         path == "/v2/health/ready";
}

// The role a request needs (health checks are answered before this is asked).
Role RoleFor(const httplib::Request& req) {
  const std::string& p = req.path;
  auto starts = [&p](const char* prefix) { return p.rfind(prefix, 0) == 0; };
  if (starts("/v1/understand") || starts("/v1/models") || starts("/v2/")) return Role::kUnderstand;
  if (starts("/v1/converse") || starts("/v1/calls/")) return Role::kConverse;
  if (p == "/v1/work-orders" || p == "/v1/work-orders/") return Role::kSupervise;  // list, search
  if (starts("/v1/work-orders/")) return req.method == "GET" ? Role::kReadOrders : Role::kSupervise;
  if (p == "/metrics") return Role::kSupervise;
  return Role::kNone;  // any client: the OpenAPI document, unknown routes (404 once known)
}

void SendNoDialog(httplib::Response& res) {
  SendError(res, Status(Code::kUnimplemented,
                        "this server runs without dialog (no dialog: section in its config)"));
}

void HandleConverse(DialogService& dialog, Security* security, const httplib::Request& req,
                    httplib::Response& res) {
  if (!CheckJsonObject(req, res, false)) return;
  Status header_error;
  const serving::TimePoint deadline = DeadlineFromHeader(req, &header_error);
  if (!header_error.ok()) return SendError(res, header_error);
  hotline::v1::ConverseRequest in;
  if (!ParseBody(req, res, &in)) return;
  ConverseCall call = FromProto(in);
  call.deadline = deadline;
  call.trace_id = TraceIdOf(req.get_header_value("traceparent"));
  ConverseResult r = dialog.ConverseSync(std::move(call));
  if (security) AuditConverse(security, security->ClientName(Credential(req)), "http", r);
  if (!r.status.ok()) return SendError(res, r.status);
  hotline::v1::ConverseResponse out;
  ToProto(r, &out);
  SendProto(res, out);
}

void HandleEndCall(DialogService& dialog, const httplib::Request& req, httplib::Response& res) {
  if (!CheckJsonObject(req, res, true)) return;
  dialog::CallSummary summary;
  Status s = dialog.EndCallSync(req.matches[1].str(), &summary);
  if (!s.ok()) return SendError(res, s);
  hotline::v1::EndCallResponse out;
  ToProto(summary, &out);
  SendProto(res, out);
}

void HandleGetWorkOrder(DialogService& dialog, Security* security, const httplib::Request& req,
                        httplib::Response& res) {
  dialog::WorkOrder order;
  Status s = dialog.GetWorkOrderSync(req.matches[1].str(), &order);
  if (security) {
    security->Audit(security->ClientName(Credential(req)), "http", "read",
                    s.ok() ? order.id : req.matches[1].str(), s.code());
  }
  if (!s.ok()) return SendError(res, s);
  hotline::v1::WorkOrder out;
  ToProto(order, &out);
  SendProto(res, out);
}

// GET /v1/work-orders?status=&department=&intent=&text=&created_from=&created_to=&limit=&offset=
void HandleListWorkOrders(DialogService& dialog, Security* security, const httplib::Request& req,
                          httplib::Response& res) {
  static const char* const kParams[] = {"status",       "department", "intent", "text",
                                        "created_from", "created_to", "limit",  "offset"};
  for (const auto& [name, value] : req.params) {
    if (std::find(std::begin(kParams), std::end(kParams), name) == std::end(kParams)) {
      return SendError(res, Status(Code::kInvalidArgument,
                                   "unknown query parameter '" + EchoInput(name) +
                                       "' (expected status, department, intent, text, "
                                       "created_from, created_to, limit, offset)"));
    }
  }
  dialog::OrderQuery query;  // limit and offset as given: 0 is refused, not the default
  query.status = req.get_param_value("status");
  query.department = req.get_param_value("department");
  query.intent = req.get_param_value("intent");
  query.text = req.get_param_value("text");
  query.created_from = req.get_param_value("created_from");
  query.created_to = req.get_param_value("created_to");
  for (const char* name : {"limit", "offset"}) {
    if (!req.has_param(name)) continue;
    const std::string v = req.get_param_value(name);
    int n = 0;
    size_t used = 0;
    try {
      n = std::stoi(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != v.size()) {
      return SendError(res, Status(Code::kInvalidArgument,
                                   std::string(name) + " must be a whole number; got '" +
                                       EchoInput(v) + "'"));
    }
    (std::string(name) == "limit" ? query.limit : query.offset) = n;
  }
  std::vector<dialog::WorkOrder> orders;
  Status s = dialog.ListWorkOrdersSync(std::move(query), &orders);
  if (security) {
    security->Audit(security->ClientName(Credential(req)), "http", "list", "", s.code(),
                    std::to_string(orders.size()) + " orders");
  }
  if (!s.ok()) return SendError(res, s);
  hotline::v1::ListWorkOrdersResponse out;
  for (const auto& o : orders) ToProto(o, out.add_orders());
  SendProto(res, out);
}

// PATCH /v1/work-orders/{id} {"status": "...", "note": "..."}
void HandleUpdateWorkOrder(DialogService& dialog, Security* security, const httplib::Request& req,
                           httplib::Response& res) {
  if (!CheckJsonObject(req, res, false)) return;
  hotline::v1::UpdateWorkOrderRequest in;
  if (!ParseBody(req, res, &in)) return;
  const std::string id = req.matches[1].str();
  const std::string client = security ? security->ClientName(Credential(req)) : "anonymous";
  dialog::WorkOrder order;
  Status s = dialog.UpdateWorkOrderSync(id, dialog::OrderUpdate{in.status(), in.note(), client},
                                        &order);
  if (security) {
    security->Audit(client, "http", "update", s.ok() ? order.id : id, s.code(),
                    s.ok() ? "status " + order.status : "");
  }
  if (!s.ok()) return SendError(res, s);
  hotline::v1::WorkOrder out;
  ToProto(order, &out);
  SendProto(res, out);
}

}  // namespace

void InstallHttpRoutes(httplib::Server& server, serving::Service& service,
                       serving::MetricsRegistry& metrics, DialogService* dialog,
                       Security* security) {
  // While the server drains (SIGTERM), requests other than health checks get 503 with
  // Retry-After and a closed connection: the ones already running finish.
  server.set_pre_routing_handler([security, &service](const httplib::Request& req,
                                                      httplib::Response& res) {
    if (IsHealthPath(req.path)) return httplib::Server::HandlerResponse::Unhandled;
    if (service.draining()) {
      SendError(res, Status(Code::kUnavailable, "the server is shutting down; retry elsewhere"));
      res.set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (security && security->auth_enabled()) {
      const AuthDecision auth = security->Check(Credential(req), RoleFor(req));
      if (auth.status.ok()) return httplib::Server::HandlerResponse::Unhandled;
      if (auth.status.code() == Code::kUnauthenticated) {
        res.set_header("WWW-Authenticate", "Bearer");
      }
      SendError(res, auth.status);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Every route's method and pattern, so that a known path with the wrong method is a 405.
  auto routes = std::make_shared<std::vector<std::pair<std::string, std::regex>>>();
  for (const auto& [method, pattern] : std::initializer_list<std::pair<const char*, const char*>>{
           {"POST", "/v1/converse"},
           {"POST", R"(/v1/calls/([^/]+)/end)"},
           {"GET", R"(/v1/work-orders/([^/]+))"},
           {"GET", "/v1/work-orders"},
           {"PATCH", R"(/v1/work-orders/([^/]+))"},
           {"POST", "/v1/understand"},
           {"GET", "/v1/models"},
           {"GET", "/metrics"},
           {"GET", "/healthz"},
           {"GET", "/v2/health/live"},
           {"GET", "/readyz"},
           {"GET", "/v2/health/ready"}}) {
    routes->emplace_back(method, std::regex(pattern));
  }
  server.Post("/v1/converse",
              [dialog, security](const httplib::Request& req, httplib::Response& res) {
                if (!dialog) return SendNoDialog(res);
                HandleConverse(*dialog, security, req, res);
              });
  server.Post(R"(/v1/calls/([^/]+)/end)",
              [dialog](const httplib::Request& req, httplib::Response& res) {
                if (!dialog) return SendNoDialog(res);
                HandleEndCall(*dialog, req, res);
              });
  server.Get(R"(/v1/work-orders/([^/]+))",
             [dialog, security](const httplib::Request& req, httplib::Response& res) {
               if (!dialog) return SendNoDialog(res);
               HandleGetWorkOrder(*dialog, security, req, res);
             });
  server.Get("/v1/work-orders",
             [dialog, security](const httplib::Request& req, httplib::Response& res) {
               if (!dialog) return SendNoDialog(res);
               HandleListWorkOrders(*dialog, security, req, res);
             });
  server.Patch(R"(/v1/work-orders/([^/]+))",
               [dialog, security](const httplib::Request& req, httplib::Response& res) {
                 if (!dialog) return SendNoDialog(res);
                 HandleUpdateWorkOrder(*dialog, security, req, res);
               });
  server.Post("/v1/understand", [&service](const httplib::Request& req, httplib::Response& res) {
    HandleUnderstand(service, req, res);
  });
  server.Get("/v1/models", [&service](const httplib::Request&, httplib::Response& res) {
    try {
      hotline::v1::ListModelsResponse out;
      for (const auto& m : service.ListModels()) ToProto(m, out.add_models());
      SendProto(res, out);
    } catch (const Error& e) {
      SendError(res, Status::FromError(e));
    }
  });
  server.Get("/metrics", [&metrics](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  auto live = [&service](const httplib::Request&, httplib::Response& res) {
    res.status = service.live() ? 200 : 503;
    res.set_content(service.live() ? "ok\n" : "not live\n", "text/plain");
  };
  auto ready = [&service](const httplib::Request&, httplib::Response& res) {
    const bool r = service.ready();
    res.status = r ? 200 : 503;
    res.set_content(r ? "ready\n" : "not ready\n", "text/plain");
  };
  server.Get("/healthz", live);
  server.Get("/v2/health/live", live);
  server.Get("/readyz", ready);
  server.Get("/v2/health/ready", ready);
  // httplib's own refusals come with an empty body: a request it cannot read (a POST without
  // Content-Length, e.g. `curl -X POST` with no -d), an unknown route, a wrong method. Give them
  // the same JSON error shape as ours, keeping the status; our handlers' errors already have one.
  const httplib::Server::HandlerWithResponse fill_empty_error = [routes](
                                                                   const httplib::Request& req,
                                                                   httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    if (res.status == 404) {
      // httplib answers 404 for a known path with another method: that is a 405 with Allow.
      std::string allow;
      for (const auto& [method, pattern] : *routes) {
        if (method != req.method && std::regex_match(req.path, pattern) &&
            allow.find(method) == std::string::npos) {
          allow += (allow.empty() ? "" : ", ") + method;
        }
      }
      if (!allow.empty()) {
        res.status = 405;
        res.set_header("Allow", allow);
      }
    }
    std::string message = "HTTP error " + std::to_string(res.status);
    Code code = Code::kUnknown;
    if (res.status == 400) {
      code = Code::kInvalidArgument;
      message = "the request could not be read: a POST needs a body with Content-Length "
                "(send {} when there are no fields)";
    } else if (res.status == 404) {
      code = Code::kNotFound;
      message = "no route for " + req.method + " " + req.path;
    } else if (res.status == 405) {
      code = Code::kUnimplemented;
      message = "method " + req.method + " is not allowed here";
    }
    nlohmann::json body = {{"code", CodeName(code)}, {"message", message}};
    res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                    "application/json");
    return httplib::Server::HandlerResponse::Handled;
  };
  server.set_error_handler(fill_empty_error);
  // Anything a handler throws becomes a 500 with a JSON body, never a dropped connection.
  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        SendError(res, Status(Code::kInternal, what));
      });
}

}  // namespace hotline::frontends
