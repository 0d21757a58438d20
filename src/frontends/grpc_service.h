// gRPC frontends over the serving core: hotline.v1.Hotline and the KServe v2 / Open Inference
// Protocol inference.GRPCInferenceService. Both use gRPC's callback API: a handler admits the
// call to the core and returns; the batcher thread that answers it finishes the RPC, so no
// thread waits per request.
#pragma once

#include <string>

#include "frontends/dialog_service.h"
#include "frontends/hotline_grpc.h"
#include "frontends/security.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "serving/service.h"

namespace hotline::frontends {

// Understand and UnderstandBatch take raw bytes and parse them here: gRPC's callback API answers
// a request it cannot parse with UNIMPLEMENTED, while an unparsable request (in practice a text
// that is not UTF-8, which proto3 strings forbid) is the caller's INVALID_ARGUMENT. The dialog
// calls (Converse, EndCall, GetWorkOrder) are raw for the same reason.
using HotlineServiceBase = hotline::v1::Hotline::WithRawCallbackMethod_Understand<
    hotline::v1::Hotline::WithRawCallbackMethod_UnderstandBatch<
        hotline::v1::Hotline::WithCallbackMethod_ListModels<
            hotline::v1::Hotline::WithRawCallbackMethod_LoadModel<
                hotline::v1::Hotline::WithRawCallbackMethod_UnloadModel<
                    hotline::v1::Hotline::WithRawCallbackMethod_Converse<
                        hotline::v1::Hotline::WithRawCallbackMethod_EndCall<
                            hotline::v1::Hotline::WithRawCallbackMethod_GetWorkOrder<
                                hotline::v1::Hotline::WithCallbackMethod_ListWorkOrders<
                                    hotline::v1::Hotline::WithCallbackMethod_UpdateWorkOrder<
                                        hotline::v1::Hotline::Service>>>>>>>>>>;

class HotlineGrpcService final : public HotlineServiceBase {
 public:
  // `dialog` may be null: the dialog calls then answer UNIMPLEMENTED. `security` may be null
  // (no authentication, no audit).
  explicit HotlineGrpcService(serving::Service* service, DialogService* dialog = nullptr,
                              Security* security = nullptr)
      : service_(service), dialog_(dialog), security_(security) {}

  grpc::ServerUnaryReactor* Understand(grpc::CallbackServerContext* ctx,
                                       const grpc::ByteBuffer* req,
                                       grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* UnderstandBatch(grpc::CallbackServerContext* ctx,
                                            const grpc::ByteBuffer* req,
                                            grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* ctx,
                                       const hotline::v1::ListModelsRequest* req,
                                       hotline::v1::ListModelsResponse* resp) override;
  grpc::ServerUnaryReactor* LoadModel(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                      grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* UnloadModel(grpc::CallbackServerContext* ctx,
                                        const grpc::ByteBuffer* req,
                                        grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Converse(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                     grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* EndCall(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                    grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* GetWorkOrder(grpc::CallbackServerContext* ctx,
                                         const grpc::ByteBuffer* req,
                                         grpc::ByteBuffer* resp) override;
  // Operators (role supervise): list and search; status changes and notes.
  grpc::ServerUnaryReactor* ListWorkOrders(grpc::CallbackServerContext* ctx,
                                           const hotline::v1::ListWorkOrdersRequest* req,
                                           hotline::v1::ListWorkOrdersResponse* resp) override;
  grpc::ServerUnaryReactor* UpdateWorkOrder(grpc::CallbackServerContext* ctx,
                                            const hotline::v1::UpdateWorkOrderRequest* req,
                                            hotline::v1::WorkOrder* resp) override;

 private:
  serving::Service* const service_;
  DialogService* const dialog_;
  Security* const security_;
};

// Model I/O over KServe v2: input "text" (BYTES, any shape; one element per utterance), outputs
// "intent" (BYTES), "confidence" (FP32) and "slots" (BYTES, JSON list per utterance), each in the
// input's shape, written to raw_output_contents.
// Every method parses its own request (INVALID_ARGUMENT with a reason for bytes that are not a
// valid message; gRPC's callback API would answer UNIMPLEMENTED without one).
using KServeServiceBase = inference::GRPCInferenceService::WithRawCallbackMethod_ServerLive<
    inference::GRPCInferenceService::WithRawCallbackMethod_ServerReady<
        inference::GRPCInferenceService::WithRawCallbackMethod_ModelReady<
            inference::GRPCInferenceService::WithRawCallbackMethod_ServerMetadata<
                inference::GRPCInferenceService::WithRawCallbackMethod_ModelMetadata<
                    inference::GRPCInferenceService::WithRawCallbackMethod_ModelInfer<
                        inference::GRPCInferenceService::Service>>>>>>;

class KServeGrpcService final : public KServeServiceBase {
 public:
  KServeGrpcService(serving::Service* service, std::string server_version,
                    Security* security = nullptr)
      : service_(service), version_(std::move(server_version)), security_(security) {}

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* ctx,
                                       const grpc::ByteBuffer* req,
                                       grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* ctx,
                                        const grpc::ByteBuffer* req,
                                        grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* ctx,
                                       const grpc::ByteBuffer* req,
                                       grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* ctx,
                                           const grpc::ByteBuffer* req,
                                           grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* ctx,
                                          const grpc::ByteBuffer* req,
                                          grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* ctx,
                                       const grpc::ByteBuffer* req,
                                       grpc::ByteBuffer* resp) override;

 private:
  serving::Service* const service_;
  const std::string version_;
  Security* const security_;
};

// Checks the call's key (metadata authorization: Bearer KEY, or x-api-key) for `need`; OK with
// client "anonymous" when `security` is null or has no clients.
AuthDecision Authorize(Security* security, const grpc::ServerContextBase* ctx, Role need);

// KServe BYTES tensors on the wire: each element a 4-byte little-endian length, then the bytes.
// Throws hotline::Error(kInvalidArgument) on a truncated buffer.
std::vector<std::string> DecodeBytesTensor(const std::string& raw);
std::string EncodeBytesTensor(const std::vector<std::string>& elements);
// The slots of one understanding as the JSON text the "slots" output carries.
std::string SlotsJson(const nlu::Understanding& u);

}  // namespace hotline::frontends
