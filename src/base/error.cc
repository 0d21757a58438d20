#include "base/error.h"

namespace hotline {

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kCancelled: return "CANCELLED";
    case Code::kUnknown: return "UNKNOWN";
    case Code::kInvalidArgument: return "INVALID_ARGUMENT";
    case Code::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case Code::kNotFound: return "NOT_FOUND";
    case Code::kAlreadyExists: return "ALREADY_EXISTS";
    case Code::kPermissionDenied: return "PERMISSION_DENIED";
    case Code::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case Code::kFailedPrecondition: return "FAILED_PRECONDITION";
    case Code::kAborted: return "ABORTED";
    case Code::kOutOfRange: return "OUT_OF_RANGE";
    case Code::kUnimplemented: return "UNIMPLEMENTED";
    case Code::kInternal: return "INTERNAL";
    case Code::kUnavailable: return "UNAVAILABLE";
    case Code::kDataLoss: return "DATA_LOSS";
    case Code::kUnauthenticated: return "UNAUTHENTICATED";
  }
  return "UNKNOWN";
}

int HttpStatus(Code code) {
  switch (code) {
    case Code::kOk: return 200;
    case Code::kCancelled: return 499;
    case Code::kInvalidArgument: return 400;
    case Code::kOutOfRange: return 400;
    case Code::kFailedPrecondition: return 400;
    case Code::kDeadlineExceeded: return 504;
    case Code::kNotFound: return 404;
    case Code::kAlreadyExists: return 409;
    case Code::kAborted: return 409;
    case Code::kPermissionDenied: return 403;
    case Code::kUnauthenticated: return 401;
    case Code::kResourceExhausted: return 429;
    case Code::kUnimplemented: return 501;
    case Code::kUnavailable: return 503;
    case Code::kUnknown:
    case Code::kInternal:
    case Code::kDataLoss: return 500;
  }
  return 500;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code_)) + ": " + message_;
}

}  // namespace hotline
