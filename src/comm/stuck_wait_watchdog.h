// StuckWaitWatchdog: ends the process when a thread stays in a bounded wait long after its
// deadline, because the library it polls no longer returns control.
//
// Every tessel wait checks its own deadline between calls, so it can only miss it while a
// call inside it does not return. Open MPI 4.1's TCP BTL does that after a peer is lost: the
// failed send closes the endpoint and re-enters its own endpoint lock inside opal_progress
// (a self-deadlock, seen in the veth kill runs). The caller would hang forever; instead a
// watchdog thread notices the wait still registered `grace` after its deadline, prints what it
// waited for, and ends the process, as PyTorch's NCCL watchdog does. The waits register with
// watch(); the returned Watch unregisters when the wait ends (normally or by an exception).
//
//   StuckWaitWatchdog::Watch w = StuckWaitWatchdog::global().watch(deadline + grace, describe);
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tessel::detail {

class StuckWaitWatchdog {
 public:
  using Clock = std::chrono::steady_clock;
  // What the stuck wait was waiting for; called on the watchdog thread with the seconds past
  // fire_at, while the waiting thread is (still) registered. It may read only what does not
  // change during the wait.
  using Describe = std::function<std::string(double late_seconds)>;
  // What happens to a stuck wait: global()'s prints "tessel: <message>" to stderr and ends the
  // process with kStuckExitCode.
  using Action = std::function<void(const std::string& message)>;

  static constexpr int kStuckExitCode = 70;  // EX_SOFTWARE

  // The process's watchdog (its thread starts with the first watch; never destroyed).
  static StuckWaitWatchdog& global();

  // A watchdog that checks every `period` and calls `action` once per stuck wait (tests).
  StuckWaitWatchdog(Action action, std::chrono::milliseconds period);
  ~StuckWaitWatchdog();
  StuckWaitWatchdog(const StuckWaitWatchdog&) = delete;
  StuckWaitWatchdog& operator=(const StuckWaitWatchdog&) = delete;

  // Registration of one wait; unregisters on destruction. Default-constructed: watches nothing.
  class Watch {
   public:
    Watch() = default;
    Watch(Watch&& other) noexcept;
    Watch& operator=(Watch&& other) noexcept;
    ~Watch();

   private:
    friend class StuckWaitWatchdog;
    Watch(StuckWaitWatchdog* owner, uint64_t id) : owner_(owner), id_(id) {}
    StuckWaitWatchdog* owner_ = nullptr;
    uint64_t id_ = 0;
  };

  // Watches the calling wait: still registered at `fire_at`, it is reported.
  [[nodiscard]] Watch watch(Clock::time_point fire_at, Describe describe);

 private:
  struct Entry {
    uint64_t id;
    Clock::time_point fire_at;
    Describe describe;
    bool reported;
  };
  void unwatch(uint64_t id);
  void run();

  const Action action_;
  const std::chrono::milliseconds period_;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  std::vector<Entry> entries_;  // guarded by mu_
  uint64_t next_id_ = 1;        // guarded by mu_
  bool stopping_ = false;       // guarded by mu_
  std::thread thread_;          // started by the first watch
};

}  // namespace tessel::detail
