// default_relayout_timeout and RelayoutTimeoutScope (tessel/dtensor/relayout.h): a per-thread
// value, so that a scope on one thread (a pipeline stage's) leaves the others' relayouts alone.
#include "core/errors.h"
#include "tessel/dtensor/relayout.h"

namespace tessel {
namespace {

constexpr std::chrono::milliseconds kDefaultTimeout{60000};

std::chrono::milliseconds& thread_timeout() {
  thread_local std::chrono::milliseconds timeout = kDefaultTimeout;
  return timeout;
}

int& open_scopes() {
  thread_local int scopes = 0;
  return scopes;
}

}  // namespace

std::chrono::milliseconds default_relayout_timeout() { return thread_timeout(); }

std::optional<std::chrono::milliseconds> scoped_relayout_timeout() {
  if (open_scopes() <= 0) return std::nullopt;
  return thread_timeout();
}

RelayoutTimeoutScope::RelayoutTimeoutScope(std::chrono::milliseconds timeout)
    : previous_(thread_timeout()) {
  if (timeout.count() <= 0) {
    detail::throw_invalid("relayout", "a relayout timeout must be positive, got {} ms",
                          timeout.count());
  }
  thread_timeout() = timeout;
  ++open_scopes();
}

RelayoutTimeoutScope::~RelayoutTimeoutScope() {
  thread_timeout() = previous_;
  --open_scopes();
}

}  // namespace tessel
