// Helpers for the runtime tests: bounded waits (a scoped environment variable:
// testing/scoped_env.h).
#pragma once

#include <chrono>
#include <future>

namespace tessel::testing {

// Every wait in these tests is bounded by this, so a bug fails a test instead of hanging it.
inline constexpr std::chrono::seconds kWaitLimit{10};

// A one-shot signal a task can wait on with a bound: open() releases every waiter.
class Gate {
 public:
  Gate() : future_(promise_.get_future().share()) {}
  void open() { promise_.set_value(); }
  // True when opened within `limit`.
  bool wait(std::chrono::milliseconds limit = kWaitLimit) const {
    return future_.wait_for(limit) == std::future_status::ready;
  }

 private:
  std::promise<void> promise_;
  std::shared_future<void> future_;
};

}  // namespace tessel::testing
