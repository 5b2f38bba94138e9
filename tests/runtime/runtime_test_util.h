// Helpers for the runtime tests: bounded waits and a scoped environment variable.
#pragma once

#include <chrono>
#include <cstdlib>
#include <future>
#include <optional>
#include <string>

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

// Sets (or with nullopt unsets) an environment variable for one scope, then restores it.
// Use only from the test's main thread while no other thread reads the environment.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace tessel::testing
