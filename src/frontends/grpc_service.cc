#include "frontends/grpc_service.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/echo.h"
#include "frontends/convert.h"

namespace hotline::frontends {
namespace {

// The trace-id of the call's traceparent metadata ("" without a valid one).
std::string TraceOf(grpc::CallbackServerContext* ctx) {
  const auto& md = ctx->client_metadata();
  auto it = md.find("traceparent");
  return it == md.end() ? "" : TraceIdOf(std::string_view(it->second.data(), it->second.size()));
}

// Cancellation and deadline come from the transport; the core checks them before execution.
void AttachContext(grpc::CallbackServerContext* ctx, serving::UnderstandCall* call) {
  call->deadline = SteadyDeadline(ctx->deadline());
  call->cancelled = [ctx] { return ctx->IsCancelled(); };
  call->trace_id = TraceOf(ctx);
}

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* ctx, const grpc::Status& s) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(s);
  return reactor;
}

// Parses a raw request; false when the bytes are not a valid message of that type.
bool ParseRaw(const grpc::ByteBuffer* raw, google::protobuf::Message* msg) {
  std::vector<grpc::Slice> slices;
  if (!raw->Dump(&slices).ok()) return false;
  std::string bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return msg->ParseFromString(bytes);
}

void SerializeRaw(const google::protobuf::Message& msg, grpc::ByteBuffer* out) {
  const std::string bytes = msg.SerializeAsString();
  grpc::Slice slice(bytes);
  grpc::ByteBuffer buffer(&slice, 1);
  out->Swap(&buffer);
}

template <typename Request, typename Response, typename Fill>
grpc::ServerUnaryReactor* UnderstandRaw(serving::Service* service, grpc::CallbackServerContext* ctx,
                                        const grpc::ByteBuffer* raw_req, grpc::ByteBuffer* raw_resp,
                                        Fill fill) {
  Request req;
  if (!ParseRaw(raw_req, &req)) {
    return FinishNow(
        ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "the request is not a valid " + Request::descriptor()->full_name() +
                              " (text fields must be UTF-8)"));
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  serving::UnderstandCall call = FromProto(req);
  AttachContext(ctx, &call);
  service->Understand(std::move(call),
                      [reactor, raw_resp, fill, id = req.request_id()](serving::UnderstandReply r) {
                        if (r.status.ok()) {
                          Response resp;
                          resp.set_request_id(id);
                          fill(r, &resp);
                          ToProto(r, resp.mutable_serving());
                          SerializeRaw(resp, raw_resp);
                        }
                        reactor->Finish(ToGrpc(r.status));
                      });
  return reactor;
}

template <typename Request>
bool ParseOrRefuse(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw, Request* req,
                   grpc::ServerUnaryReactor** refused) {
  if (ParseRaw(raw, req)) return true;
  *refused = FinishNow(
      ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the request is not a valid " +
                                                                Request::descriptor()->full_name() +
                                                                " (text fields must be UTF-8)"));
  return false;
}

grpc::Status NoDialog() {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                      "this server runs without dialog (no dialog: section in its config)");
}

}  // namespace

AuthDecision Authorize(Security* security, const grpc::ServerContextBase* ctx, Role need) {
  if (!security || !security->auth_enabled()) return {Status(), "anonymous"};
  const auto& md = ctx->client_metadata();
  std::string_view credential;
  auto it = md.find("authorization");
  if (it == md.end()) it = md.find("x-api-key");
  if (it != md.end()) credential = std::string_view(it->second.data(), it->second.size());
  return security->Check(credential, need);
}

// Null when the client holds `need` (its name goes to *client); else the refused call's reactor.
static grpc::ServerUnaryReactor* Refused(Security* security, grpc::CallbackServerContext* ctx,
                                         Role need, std::string* client) {
  AuthDecision auth = Authorize(security, ctx, need);
  if (!auth.status.ok()) return FinishNow(ctx, ToGrpc(auth.status));
  *client = std::move(auth.client);
  return nullptr;
}

// Unary calls whose request is parsed here, so that bytes that are not a valid message get
// INVALID_ARGUMENT with a reason (gRPC's callback API answers UNIMPLEMENTED without one). `body`
// fills the response and calls `finish` exactly once, now or later; the request and response
// live until then.
using Finish = std::function<void(const grpc::Status&)>;
template <typename Req, typename Resp, typename Body>
static grpc::ServerUnaryReactor* RawUnary(Security* security, Role need,
                                          grpc::CallbackServerContext* ctx,
                                          const grpc::ByteBuffer* raw_req,
                                          grpc::ByteBuffer* raw_resp, Body body) {
  const AuthDecision auth = Authorize(security, ctx, need);
  if (!auth.status.ok()) return FinishNow(ctx, ToGrpc(auth.status));
  auto req = std::make_shared<Req>();
  if (!ParseRaw(raw_req, req.get())) {
    return FinishNow(
        ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the request is not a valid " +
                                                                  Req::descriptor()->full_name() +
                                                                  " (text fields must be UTF-8)"));
  }
  auto resp = std::make_shared<Resp>();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const Finish finish = [reactor, raw_resp, req, resp](const grpc::Status& s) {
    if (s.ok()) SerializeRaw(*resp, raw_resp);
    reactor->Finish(s);
  };
  body(req.get(), resp.get(), finish);
  return reactor;
}

grpc::ServerUnaryReactor* HotlineGrpcService::Understand(grpc::CallbackServerContext* ctx,
                                                         const grpc::ByteBuffer* req,
                                                         grpc::ByteBuffer* resp) {
  std::string client;
  if (auto* denied = Refused(security_, ctx, Role::kUnderstand, &client)) return denied;
  return UnderstandRaw<hotline::v1::UnderstandRequest, hotline::v1::UnderstandResponse>(
      service_, ctx, req, resp,
      [](const serving::UnderstandReply& r, hotline::v1::UnderstandResponse* out) {
        ToProto(r.results.at(0), out->mutable_result());
      });
}

grpc::ServerUnaryReactor* HotlineGrpcService::UnderstandBatch(grpc::CallbackServerContext* ctx,
                                                              const grpc::ByteBuffer* req,
                                                              grpc::ByteBuffer* resp) {
  std::string client;
  if (auto* denied = Refused(security_, ctx, Role::kUnderstand, &client)) return denied;
  return UnderstandRaw<hotline::v1::UnderstandBatchRequest, hotline::v1::UnderstandBatchResponse>(
      service_, ctx, req, resp,
      [](const serving::UnderstandReply& r, hotline::v1::UnderstandBatchResponse* out) {
        for (const auto& u : r.results) ToProto(u, out->add_results());
      });
}

grpc::ServerUnaryReactor* HotlineGrpcService::ListModels(grpc::CallbackServerContext* ctx,
                                                         const hotline::v1::ListModelsRequest*,
                                                         hotline::v1::ListModelsResponse* resp) {
  std::string client;
  if (auto* denied = Refused(security_, ctx, Role::kUnderstand, &client)) return denied;
  try {
    for (const auto& m : service_->ListModels()) ToProto(m, resp->add_models());
    return FinishNow(ctx, grpc::Status::OK);
  } catch (const Error& e) {
    return FinishNow(ctx, ToGrpc(Status::FromError(e)));
  }
}

grpc::ServerUnaryReactor* HotlineGrpcService::LoadModel(grpc::CallbackServerContext* ctx,
                                                        const grpc::ByteBuffer* raw_req,
                                                        grpc::ByteBuffer* raw_resp) {
  return RawUnary<hotline::v1::LoadModelRequest, hotline::v1::LoadModelResponse>(
      security_, Role::kAdmin, ctx, raw_req, raw_resp,
      [&, ctx](const hotline::v1::LoadModelRequest* req, hotline::v1::LoadModelResponse* resp,
               const Finish& finish) {
        Status s = service_->LoadModel(req->admin_token(), req->name(), req->version());
        if (s.ok()) {
          for (const auto& m : service_->ListModels()) {
            if (m.name == req->name()) ToProto(m, resp->mutable_model());
          }
        }
        return finish(ToGrpc(s));
      });
}

grpc::ServerUnaryReactor* HotlineGrpcService::UnloadModel(grpc::CallbackServerContext* ctx,
                                                          const grpc::ByteBuffer* raw_req,
                                                          grpc::ByteBuffer* raw_resp) {
  return RawUnary<hotline::v1::UnloadModelRequest, hotline::v1::UnloadModelResponse>(
      security_, Role::kAdmin, ctx, raw_req, raw_resp,
      [&, ctx](const hotline::v1::UnloadModelRequest* req, hotline::v1::UnloadModelResponse* resp,
               const Finish& finish) {
        return finish(ToGrpc(service_->UnloadModel(req->admin_token(), req->name())));
      });
}

grpc::ServerUnaryReactor* HotlineGrpcService::Converse(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* raw_req,
                                                       grpc::ByteBuffer* raw_resp) {
  std::string client;
  if (auto* denied = Refused(security_, ctx, Role::kConverse, &client)) return denied;
  if (!dialog_) return FinishNow(ctx, NoDialog());
  hotline::v1::ConverseRequest req;
  grpc::ServerUnaryReactor* refused = nullptr;
  if (!ParseOrRefuse(ctx, raw_req, &req, &refused)) return refused;
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ConverseCall call = FromProto(req);
  call.trace_id = TraceOf(ctx);
  call.deadline = SteadyDeadline(ctx->deadline());
  call.cancelled = [ctx] { return ctx->IsCancelled(); };
  dialog_->Converse(std::move(call), [this, reactor, raw_resp, client](ConverseResult r) {
    AuditConverse(security_, client, "grpc", r);
    if (r.status.ok()) {
      hotline::v1::ConverseResponse resp;
      ToProto(r, &resp);
      SerializeRaw(resp, raw_resp);
    }
    reactor->Finish(ToGrpc(r.status));
  });
  return reactor;
}

grpc::ServerUnaryReactor* HotlineGrpcService::EndCall(grpc::CallbackServerContext* ctx,
                                                      const grpc::ByteBuffer* raw_req,
                                                      grpc::ByteBuffer* raw_resp) {
  std::string client;
  if (auto* denied = Refused(security_, ctx, Role::kConverse, &client)) return denied;
  if (!dialog_) return FinishNow(ctx, NoDialog());
  hotline::v1::EndCallRequest req;
  grpc::ServerUnaryReactor* refused = nullptr;
  if (!ParseOrRefuse(ctx, raw_req, &req, &refused)) return refused;
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  dialog_->EndCall(req.call_id(), [reactor, raw_resp](Status s, dialog::CallSummary summary) {
    if (s.ok()) {
      hotline::v1::EndCallResponse resp;
      ToProto(summary, &resp);
      SerializeRaw(resp, raw_resp);
    }
    reactor->Finish(ToGrpc(s));
  });
  return reactor;
}

grpc::ServerUnaryReactor* HotlineGrpcService::GetWorkOrder(grpc::CallbackServerContext* ctx,
                                                           const grpc::ByteBuffer* raw_req,
                                                           grpc::ByteBuffer* raw_resp) {
  std::string client;
  if (auto* denied = Refused(security_, ctx, Role::kReadOrders, &client)) return denied;
  if (!dialog_) return FinishNow(ctx, NoDialog());
  hotline::v1::GetWorkOrderRequest req;
  grpc::ServerUnaryReactor* refused = nullptr;
  if (!ParseOrRefuse(ctx, raw_req, &req, &refused)) return refused;
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  dialog_->GetWorkOrder(req.id(), [this, reactor, raw_resp, client, id = req.id()](
                                      Status s, dialog::WorkOrder order) {
    if (security_) security_->Audit(client, "grpc", "read", s.ok() ? order.id : id, s.code());
    if (s.ok()) {
      hotline::v1::WorkOrder resp;
      ToProto(order, &resp);
      SerializeRaw(resp, raw_resp);
    }
    reactor->Finish(ToGrpc(s));
  });
  return reactor;
}

grpc::ServerUnaryReactor* HotlineGrpcService::ListWorkOrders(
    grpc::CallbackServerContext* ctx, const hotline::v1::ListWorkOrdersRequest* req,
    hotline::v1::ListWorkOrdersResponse* resp) {
  std::string client;
  if (auto* denied = Refused(security_, ctx, Role::kSupervise, &client)) return denied;
  if (!dialog_) return FinishNow(ctx, NoDialog());
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  dialog_->ListWorkOrders(
      FromProto(*req), [this, reactor, resp, client](Status s, std::vector<dialog::WorkOrder> v) {
        if (security_) {
          security_->Audit(client, "grpc", "list", "", s.code(),
                           std::to_string(v.size()) + " orders");
        }
        for (const auto& o : v) ToProto(o, resp->add_orders());
        reactor->Finish(ToGrpc(s));
      });
  return reactor;
}

grpc::ServerUnaryReactor* HotlineGrpcService::UpdateWorkOrder(
    grpc::CallbackServerContext* ctx, const hotline::v1::UpdateWorkOrderRequest* req,
    hotline::v1::WorkOrder* resp) {
  std::string client;
  if (auto* denied = Refused(security_, ctx, Role::kSupervise, &client)) return denied;
  if (!dialog_) return FinishNow(ctx, NoDialog());
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  dialog_->UpdateWorkOrder(
      req->id(), dialog::OrderUpdate{req->status(), req->note(), client},
      [this, reactor, resp, client, id = req->id()](Status s, dialog::WorkOrder order) {
        if (security_) {
          security_->Audit(client, "grpc", "update", s.ok() ? order.id : id, s.code(),
                           s.ok() ? "status " + order.status : "");
        }
        if (s.ok()) ToProto(order, resp);
        reactor->Finish(ToGrpc(s));
      });
  return reactor;
}

// ---- KServe v2 ----------------------------------------------------------------------------

std::vector<std::string> DecodeBytesTensor(const std::string& raw) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < raw.size()) {
    if (raw.size() - i < 4) {
      throw Error("BYTES tensor is truncated: " + std::to_string(raw.size() - i) +
                  " bytes left where a 4-byte length was expected");
    }
    const auto* p = reinterpret_cast<const unsigned char*>(raw.data() + i);
    const uint32_t len =
        uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
    i += 4;
    if (raw.size() - i < len) {
      throw Error("BYTES tensor element " + std::to_string(out.size()) + " claims " +
                  std::to_string(len) + " bytes; only " + std::to_string(raw.size() - i) +
                  " remain");
    }
    out.emplace_back(raw.substr(i, len));
    i += len;
  }
  return out;
}

std::string EncodeBytesTensor(const std::vector<std::string>& elements) {
  std::string out;
  for (const std::string& e : elements) {
    const uint32_t n = uint32_t(e.size());
    const char len[4] = {char(n & 0xFF), char((n >> 8) & 0xFF), char((n >> 16) & 0xFF),
                         char((n >> 24) & 0xFF)};
    out.append(len, 4);
    out += e;
  }
  return out;
}

std::string SlotsJson(const nlu::Understanding& u) {
  nlohmann::json slots = nlohmann::json::array();
  for (const auto& s : u.slots) {
    slots.push_back({{"type", s.type},
                     {"start", s.start},
                     {"end", s.end},
                     {"value", s.value},
                     {"normalized", s.normalized},
                     {"valid", s.valid}});
  }
  return slots.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

// A joint model's outputs: intent, confidence, slots by default; department, category and
// category_name (taxonomy ids and the category's name) when requested.
bool IsJointOutput(const std::string& name) {
  return name == "intent" || name == "confidence" || name == "slots" || name == "department" ||
         name == "category" || name == "category_name";
}

// A joint model's BYTES output for one text.
std::string JointBytes(const std::string& name, const nlu::Understanding& u) {
  if (name == "intent") return u.intent;
  if (name == "department") return u.department;
  if (name == "category") return u.category;
  if (name == "category_name") return u.category_name;
  return SlotsJson(u);
}

}  // namespace

namespace {

// A classifier model's KServe outputs: per head, <head> (BYTES, the label) and <head>_score
// (FP32); all of them when the request names none.
grpc::Status ClassifierOutputs(const serving::UnderstandReply& r, const std::vector<int64_t>& shape,
                               std::vector<std::string> wanted,
                               inference::ModelInferResponse* resp) {
  const auto& heads = r.results[0].heads;
  std::vector<std::string> known;
  for (const auto& h : heads) {
    known.push_back(h.head);
    known.push_back(h.head + "_score");
  }
  if (wanted.empty()) wanted = known;
  for (const std::string& name : wanted) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "unknown output \"" + EchoInput(name) + "\"; this classifier's outputs are " + list);
    }
  }
  resp->set_model_name(r.model_name);
  resp->set_model_version(r.model_version);
  for (const std::string& name : wanted) {
    const bool score = name.size() > 6 && name.compare(name.size() - 6, 6, "_score") == 0 &&
                       std::find_if(heads.begin(), heads.end(), [&](const nlu::HeadResult& h) {
                         return h.head == name;
                       }) == heads.end();
    const std::string head = score ? name.substr(0, name.size() - 6) : name;
    size_t h = 0;
    while (h < heads.size() && heads[h].head != head) ++h;
    auto* out = resp->add_outputs();
    out->set_name(name);
    for (int64_t d : shape) out->add_shape(d);
    if (score) {
      out->set_datatype("FP32");
      std::string raw(r.results.size() * sizeof(float), '\0');
      for (size_t i = 0; i < r.results.size(); ++i) {
        const float c = r.results[i].heads.at(h).score;  // little-endian hosts (x86, arm64)
        std::memcpy(raw.data() + i * sizeof(float), &c, sizeof(float));
      }
      resp->add_raw_output_contents(std::move(raw));
    } else {
      out->set_datatype("BYTES");
      std::vector<std::string> el;
      for (const auto& u : r.results) el.push_back(u.heads.at(h).label);
      resp->add_raw_output_contents(EncodeBytesTensor(el));
    }
  }
  return grpc::Status::OK;
}

}  // namespace

grpc::ServerUnaryReactor* KServeGrpcService::ServerLive(grpc::CallbackServerContext* ctx,
                                                        const grpc::ByteBuffer* raw_req,
                                                        grpc::ByteBuffer* raw_resp) {
  return RawUnary<inference::ServerLiveRequest, inference::ServerLiveResponse>(
      security_, Role::kUnderstand, ctx, raw_req, raw_resp,
      [&, ctx](const inference::ServerLiveRequest* req, inference::ServerLiveResponse* resp,
               const Finish& finish) {
        resp->set_live(service_->live());
        return finish(grpc::Status::OK);
      });
}

grpc::ServerUnaryReactor* KServeGrpcService::ServerReady(grpc::CallbackServerContext* ctx,
                                                         const grpc::ByteBuffer* raw_req,
                                                         grpc::ByteBuffer* raw_resp) {
  return RawUnary<inference::ServerReadyRequest, inference::ServerReadyResponse>(
      security_, Role::kUnderstand, ctx, raw_req, raw_resp,
      [&, ctx](const inference::ServerReadyRequest* req, inference::ServerReadyResponse* resp,
               const Finish& finish) {
        resp->set_ready(service_->ready());
        return finish(grpc::Status::OK);
      });
}

grpc::ServerUnaryReactor* KServeGrpcService::ModelReady(grpc::CallbackServerContext* ctx,
                                                        const grpc::ByteBuffer* raw_req,
                                                        grpc::ByteBuffer* raw_resp) {
  return RawUnary<inference::ModelReadyRequest, inference::ModelReadyResponse>(
      security_, Role::kUnderstand, ctx, raw_req, raw_resp,
      [&, ctx](const inference::ModelReadyRequest* req, inference::ModelReadyResponse* resp,
               const Finish& finish) {
        try {
          for (const auto& m : service_->ListModels()) {
            if (m.name != req->name()) continue;
            resp->set_ready(m.state == serving::ModelState::kReady &&
                            (req->version().empty() || req->version() == m.version));
            return finish(grpc::Status::OK);
          }
          return finish(grpc::Status(grpc::StatusCode::NOT_FOUND,
                                     "no model named '" + EchoInput(req->name()) + "'"));
        } catch (const Error& e) {
          return finish(ToGrpc(Status::FromError(e)));
        }
      });
}

grpc::ServerUnaryReactor* KServeGrpcService::ServerMetadata(grpc::CallbackServerContext* ctx,
                                                            const grpc::ByteBuffer* raw_req,
                                                            grpc::ByteBuffer* raw_resp) {
  return RawUnary<inference::ServerMetadataRequest, inference::ServerMetadataResponse>(
      security_, Role::kUnderstand, ctx, raw_req, raw_resp,
      [&, ctx](const inference::ServerMetadataRequest* req, inference::ServerMetadataResponse* resp,
               const Finish& finish) {
        resp->set_name("hotline");
        resp->set_version(version_);
        return finish(grpc::Status::OK);
      });
}

grpc::ServerUnaryReactor* KServeGrpcService::ModelMetadata(grpc::CallbackServerContext* ctx,
                                                           const grpc::ByteBuffer* raw_req,
                                                           grpc::ByteBuffer* raw_resp) {
  return RawUnary<inference::ModelMetadataRequest, inference::ModelMetadataResponse>(
      security_, Role::kUnderstand, ctx, raw_req, raw_resp,
      [&, ctx](const inference::ModelMetadataRequest* req, inference::ModelMetadataResponse* resp,
               const Finish& finish) {
        try {
          for (const auto& m : service_->ListModels()) {
            if (m.name != req->name()) continue;
            resp->set_name(m.name);
            if (!m.version.empty()) {
              resp->add_versions(m.version);
            } else {
              for (const auto& v : m.versions) resp->add_versions(v);
            }
            resp->set_platform("hotline_nlu");
            auto add = [](auto* list, const char* name, const char* type) {
              auto* t = list->Add();
              t->set_name(name);
              t->set_datatype(type);
              t->add_shape(-1);
            };
            add(resp->mutable_inputs(), "text", "BYTES");
            if (m.kind == "classifier") {  // per head: its label and its score
              for (const std::string& h : m.heads) {
                add(resp->mutable_outputs(), h.c_str(), "BYTES");
                add(resp->mutable_outputs(), (h + "_score").c_str(), "FP32");
              }
              return finish(grpc::Status::OK);
            }
            add(resp->mutable_outputs(), "intent", "BYTES");
            add(resp->mutable_outputs(), "confidence", "FP32");
            add(resp->mutable_outputs(), "slots", "BYTES");
            add(resp->mutable_outputs(), "department", "BYTES");
            add(resp->mutable_outputs(), "category", "BYTES");
            add(resp->mutable_outputs(), "category_name", "BYTES");
            return finish(grpc::Status::OK);
          }
          return finish(grpc::Status(grpc::StatusCode::NOT_FOUND,
                                     "no model named '" + EchoInput(req->name()) + "'"));
        } catch (const Error& e) {
          return finish(ToGrpc(Status::FromError(e)));
        }
      });
}

grpc::ServerUnaryReactor* KServeGrpcService::ModelInfer(grpc::CallbackServerContext* ctx,
                                                        const grpc::ByteBuffer* raw_req,
                                                        grpc::ByteBuffer* raw_resp) {
  return RawUnary<inference::ModelInferRequest, inference::ModelInferResponse>(
      security_, Role::kUnderstand, ctx, raw_req, raw_resp,
      [&, ctx](const inference::ModelInferRequest* req, inference::ModelInferResponse* resp,
               const Finish& finish) {
        auto invalid = [&](const std::string& msg) {
          return finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, msg));
        };
        if (req->inputs_size() != 1) {
          return invalid("model takes exactly one input, \"text\" (BYTES); the request has " +
                         std::to_string(req->inputs_size()));
        }
        const auto& input = req->inputs(0);
        if (input.name() != "text" || input.datatype() != "BYTES") {
          return invalid("model takes the input \"text\" of datatype BYTES; got \"" +
                         EchoInput(input.name()) + "\" of " + input.datatype());
        }
        std::vector<std::string> texts;
        try {
          if (req->raw_input_contents_size() > 0) {
            texts = DecodeBytesTensor(req->raw_input_contents(0));
          } else {
            texts.assign(input.contents().bytes_contents().begin(),
                         input.contents().bytes_contents().end());
          }
        } catch (const Error& e) {
          return invalid(e.what());
        }
        // Each dimension is checked before it is multiplied in: a negative one, or a product past
        // what the request carries, is refused rather than wrapped around.
        int64_t elements = 1;
        for (int k = 0; k < input.shape_size(); ++k) {
          const int64_t d = input.shape(k);
          if (d < 0) {
            return invalid("input \"text\" has a negative dimension " + std::to_string(d) +
                           " at index " + std::to_string(k));
          }
          if (d > 0 && elements > int64_t(texts.size()) / d) {
            return invalid("input \"text\" has a shape whose element count exceeds the " +
                           std::to_string(texts.size()) + " elements it carries");
          }
          elements *= d;
        }
        if (input.shape_size() == 0 || elements != int64_t(texts.size())) {
          return invalid("input \"text\" has shape of " + std::to_string(elements) +
                         " elements but carries " + std::to_string(texts.size()));
        }
        // Output names are checked against the model's kind once its answer is here: a joint
        // model's are intent, confidence, slots; a classifier's are <head> and <head>_score per
        // head.
        std::vector<std::string> wanted;
        for (const auto& o : req->outputs()) wanted.push_back(o.name());

        serving::UnderstandCall call;
        call.texts = std::move(texts);
        call.model = req->model_name();
        call.request_id = req->id();
        AttachContext(ctx, &call);
        std::vector<int64_t> shape(input.shape().begin(), input.shape().end());
        resp->set_id(req->id());
        service_->Understand(std::move(call), [finish, resp, shape,
                                               wanted](serving::UnderstandReply r) mutable {
          if (r.status.ok() && !r.results.empty() && !r.results[0].heads.empty()) {
            finish(ClassifierOutputs(r, shape, wanted, resp));
            return;
          }
          for (const std::string& name : wanted) {
            if (r.status.ok() && !IsJointOutput(name)) {
              finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                  "unknown output \"" + EchoInput(name) +
                                      "\"; outputs are intent, confidence, slots, department, "
                                      "category, category_name"));
              return;
            }
          }
          if (wanted.empty()) wanted = {"intent", "confidence", "slots"};
          if (r.status.ok()) {
            resp->set_model_name(r.model_name);
            resp->set_model_version(r.model_version);
            for (const std::string& name : wanted) {
              auto* out = resp->add_outputs();
              out->set_name(name);
              for (int64_t d : shape) out->add_shape(d);
              if (name == "confidence") {
                out->set_datatype("FP32");
                std::string raw(r.results.size() * sizeof(float), '\0');
                for (size_t i = 0; i < r.results.size(); ++i) {
                  const float c = r.results[i].confidence;  // little-endian hosts only (x86, arm64)
                  std::memcpy(raw.data() + i * sizeof(float), &c, sizeof(float));
                }
                resp->add_raw_output_contents(std::move(raw));
              } else {
                out->set_datatype("BYTES");
                std::vector<std::string> el;
                for (const auto& u : r.results) el.push_back(JointBytes(name, u));
                resp->add_raw_output_contents(EncodeBytesTensor(el));
              }
            }
          }
          finish(ToGrpc(r.status));
        });
      });
}

}  // namespace hotline::frontends
