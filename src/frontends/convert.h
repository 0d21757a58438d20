// Edge conversions between the wire types (hotline.v1 protobuf, gRPC status) and the serving
// core's native types. Parsing happens here, once; nothing past this point sees a proto.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>
#include <string_view>

#include "base/error.h"
#include "frontends/dialog_service.h"
#include "frontends/hotline_grpc.h"
#include "serving/service.h"

namespace hotline::frontends {

grpc::Status ToGrpc(const Status& s);
void ToProto(const nlu::Understanding& u, hotline::v1::Understanding* out);
void ToProto(const serving::ModelStatus& m, hotline::v1::ModelInfo* out);
void ToProto(const serving::UnderstandReply& r, hotline::v1::ServingInfo* out);

// Fills the call's texts, routing fields and reference time (deadline and cancellation are the
// transport's business).
serving::UnderstandCall FromProto(const hotline::v1::UnderstandRequest& req);
serving::UnderstandCall FromProto(const hotline::v1::UnderstandBatchRequest& req);

// Dialog.
ConverseCall FromProto(const hotline::v1::ConverseRequest& req);
void ToProto(const ConverseResult& r, hotline::v1::ConverseResponse* out);
void ToProto(const dialog::CallSummary& s, hotline::v1::EndCallResponse* out);
void ToProto(const dialog::WorkOrder& w, hotline::v1::WorkOrder* out);
dialog::OrderQuery FromProto(const hotline::v1::ListWorkOrdersRequest& r);
// The trace-id of a W3C traceparent ("00-<32 hex>-<16 hex>-<2 hex>"); "" when the header is
// absent or malformed (the call goes on untraced, as the Trace Context spec asks).
std::string TraceIdOf(std::string_view traceparent);

// A wall-clock deadline (gRPC's) as a steady-clock one; system_clock::max() → TimePoint::max().
serving::TimePoint SteadyDeadline(std::chrono::system_clock::time_point deadline);

}  // namespace hotline::frontends
