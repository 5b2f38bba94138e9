// tessel::Error: the one exception type tessel throws, carrying an ErrorCode.
//
// Every message names the component that failed and the offending values, e.g.
//   Error(ErrorCode::kInvalidArgument, "Mesh", "global_device_ids must sequentially increase: [0,2]")
//   what() == "Mesh: global_device_ids must sequentially increase: [0,2]"
// Python maps the codes to exception classes (docs/architecture.md): kInvalidArgument -> ValueError,
// kDeadlineExceeded -> TimeoutError, kUnimplemented -> NotImplementedError,
// kOutOfRange -> IndexError, kResourceExhausted -> MemoryError, the rest (DataLoss included) ->
// RuntimeError.
//
// Thread safety: immutable after construction.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace tessel {

enum class ErrorCode {
  kInvalidArgument,     // the caller passed a bad value
  kFailedPrecondition,  // the system is not in a state where the call is valid
  kOutOfRange,          // an index or offset past the end
  kNotFound,            // a named thing does not exist
  kAlreadyExists,       // a named thing exists and may not be created again
  kUnimplemented,       // valid request that tessel does not support (yet)
  kUnavailable,         // a backend or peer cannot be reached or is not built in
  kDeadlineExceeded,    // a wait ran past its deadline
  kAborted,             // the operation was cancelled because a peer failed
  kResourceExhausted,   // a memory limit (of a device or of the process) would be exceeded
  kInternal,            // an invariant broke: a tessel bug or memory corruption
  kDataLoss,            // stored data is corrupt, truncated or missing (e.g. a checkpoint file)
};
// How many codes there are (kDataLoss is the last): for tables indexed by code.
inline constexpr int kNumErrorCodes = static_cast<int>(ErrorCode::kDataLoss) + 1;

// "InvalidArgument", "DeadlineExceeded", ... (the names without the k).
std::string_view error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  // what() is "<component>: <message>".
  Error(ErrorCode code, std::string_view component, std::string_view message);

  ErrorCode code() const noexcept { return code_; }
  const std::string& component() const noexcept { return component_; }
  // The message without the component prefix.
  const std::string& message() const noexcept { return message_; }

 private:
  ErrorCode code_;         // what kind of failure
  std::string component_;  // e.g. "Mesh", "Layout", "Tensor"
  std::string message_;    // the text after "<component>: "
};

}  // namespace tessel
