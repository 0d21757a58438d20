// Errors. Inside the engine and libraries: hotline::Error exceptions with specific messages.
// At service boundaries: hotline::Status, mapped one to one to gRPC and HTTP codes.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace hotline {

// Canonical codes; numeric values equal grpc::StatusCode so frontends map them directly.
enum class Code {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

std::string_view CodeName(Code code);
// The HTTP status a code maps to (400, 404, 429, 504, 503, ...).
int HttpStatus(Code code);

// Thrown by library code; carries a code so boundaries can map it without parsing text.
class Error : public std::runtime_error {
 public:
  explicit Error(std::string message, Code code = Code::kInvalidArgument)
      : std::runtime_error(std::move(message)), code_(code) {}
  Code code() const { return code_; }

 private:
  Code code_;
};

// Value type for service boundaries.
class Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return {}; }
  static Status FromError(const Error& e) { return {e.code(), e.what()}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

#define HOTLINE_RETURN_IF_ERROR(expr)      \
  do {                                     \
    ::hotline::Status _st = (expr);        \
    if (!_st.ok()) return _st;             \
  } while (0)

// Throws Error(msg) when cond is false. For validating input, not for internal invariants.
#define HOTLINE_CHECK_ARG(cond, msg)                                   \
  do {                                                                 \
    if (!(cond)) throw ::hotline::Error((msg), ::hotline::Code::kInvalidArgument); \
  } while (0)

}  // namespace hotline
