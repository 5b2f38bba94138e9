// StuckWaitWatchdog (see stuck_wait_watchdog.h).
#include "comm/stuck_wait_watchdog.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

namespace tessel::detail {

StuckWaitWatchdog& StuckWaitWatchdog::global() {
  // Never destroyed: waits may still run while static destructors do.
  static StuckWaitWatchdog* const watchdog = new StuckWaitWatchdog(
      [](const std::string& message) {
        std::fprintf(stderr, "tessel: %s\n", message.c_str());
        std::fflush(stderr);
        std::_Exit(kStuckExitCode);
      },
      std::chrono::milliseconds(100));
  return *watchdog;
}

StuckWaitWatchdog::StuckWaitWatchdog(Action action, std::chrono::milliseconds period)
    : action_(std::move(action)), period_(period) {}

StuckWaitWatchdog::~StuckWaitWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

StuckWaitWatchdog::Watch::Watch(Watch&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)), id_(other.id_) {}

StuckWaitWatchdog::Watch& StuckWaitWatchdog::Watch::operator=(Watch&& other) noexcept {
  if (this != &other) {
    if (owner_) owner_->unwatch(id_);
    owner_ = std::exchange(other.owner_, nullptr);
    id_ = other.id_;
  }
  return *this;
}

StuckWaitWatchdog::Watch::~Watch() {
  if (owner_) owner_->unwatch(id_);
}

StuckWaitWatchdog::Watch StuckWaitWatchdog::watch(Clock::time_point fire_at, Describe describe) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  const uint64_t id = next_id_++;
  entries_.push_back(Entry{id, fire_at, std::move(describe), false});
  return Watch(this, id);
}

void StuckWaitWatchdog::unwatch(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(entries_.begin(), entries_.end(), [id](const Entry& e) { return e.id == id; });
  if (it != entries_.end()) entries_.erase(it);
}

void StuckWaitWatchdog::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    stop_cv_.wait_for(lock, period_);
    if (stopping_) break;
    const auto now = Clock::now();
    std::vector<std::string> stuck;
    for (Entry& e : entries_) {
      if (e.reported || now < e.fire_at) continue;
      e.reported = true;
      // Under mu_: the waiting thread cannot unregister, so what describe reads stays alive.
      stuck.push_back(e.describe(std::chrono::duration<double>(now - e.fire_at).count()));
    }
    lock.unlock();
    for (const std::string& message : stuck) action_(message);
    lock.lock();
  }
}

}  // namespace tessel::detail
