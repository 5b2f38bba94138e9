// Internal: what every Communicator method shares — deadlines, tensor checks, signatures and the
// failure guard — for the files that define Communicator members (communicator.cpp,
// box_collectives.cpp).
#pragma once

#include <exception>
#include <string>
#include <string_view>

#include "comm/transport.h"
#include "core/errors.h"
#include "tessel/comm/collective_options.h"
#include "tessel/core/tensor.h"

namespace tessel::detail {

inline constexpr std::string_view kComm = "Communicator";

inline Deadline deadline_of(const CollectiveOptions& options) {
  if (options.deadline != Deadline{}) return options.deadline;
  const auto timeout = options.timeout.count() > 0 ? options.timeout : default_collective_timeout();
  return Clock::now() + timeout;
}

// kInvalidArgument unless `t` is a defined, contiguous tensor.
inline void require_tensor(const Tensor& t, std::string_view op, std::string_view what) {
  if (!t.defined()) throw_invalid(kComm, "{}: {} is a null tensor", op, what);
  if (!t.is_contiguous()) {
    throw_invalid(kComm, "{}: {} of shape {} is a strided view; pass a contiguous tensor", op,
                  what, t.shape().to_string());
  }
}

inline Signature make_signature(uint64_t sequence, std::string agreed, const std::string& mine) {
  Signature s;
  s.sequence = sequence;
  s.text = mine;
  s.agreed = std::move(agreed);
  return s;
}

// Runs one collective body. On any failure this rank leaves through Transport::fail: the group
// is aborted (naming this rank, unless the group already failed for another reason) so that the
// others stop waiting, and the call returns only once no peer can still touch this rank's
// buffers, so the caller may free them.
template <typename F>
auto guarded(Transport& t, const Signature& sig, F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const Error& e) {
    t.fail(fmt::format("rank {} ({}) failed in {} (sequence {}): {}", t.rank(),
                       t.members()[t.rank()], sig.describe(t.members()), sig.sequence, e.what()));
    throw;
  } catch (const std::exception& e) {
    const std::string message = fmt::format("rank {} ({}) failed in {} (sequence {}): {}", t.rank(),
                                            t.members()[t.rank()], sig.describe(t.members()),
                                            sig.sequence, e.what());
    t.fail(message);
    throw Error(ErrorCode::kInternal, kComm, message);
  }
}

}  // namespace tessel::detail
