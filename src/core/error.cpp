#include "tessel/core/error.h"

#include <fmt/format.h>

namespace tessel {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "InvalidArgument";
    case ErrorCode::kFailedPrecondition: return "FailedPrecondition";
    case ErrorCode::kOutOfRange: return "OutOfRange";
    case ErrorCode::kNotFound: return "NotFound";
    case ErrorCode::kAlreadyExists: return "AlreadyExists";
    case ErrorCode::kUnimplemented: return "Unimplemented";
    case ErrorCode::kUnavailable: return "Unavailable";
    case ErrorCode::kDeadlineExceeded: return "DeadlineExceeded";
    case ErrorCode::kAborted: return "Aborted";
    case ErrorCode::kResourceExhausted: return "ResourceExhausted";
    case ErrorCode::kInternal: return "Internal";
    case ErrorCode::kDataLoss: return "DataLoss";
  }
  return "Unknown";
}

Error::Error(ErrorCode code, std::string_view component, std::string_view message)
    : std::runtime_error(fmt::format("{}: {}", component, message)),
      code_(code),
      component_(component),
      message_(message) {}

}  // namespace tessel
