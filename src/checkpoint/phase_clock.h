// Timing of a save's or a restore's phases (SaveStats, RestoreStats): lap() for phases that
// follow one another, AddElapsed for a phase that runs in pieces between others.
#pragma once

#include <chrono>

namespace tessel::checkpoint::detail {

// Seconds since `start`, and `start` moved to now.
inline double lap(std::chrono::steady_clock::time_point& start) {
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - start).count();
  start = now;
  return seconds;
}

// Adds the seconds of its lifetime to `seconds` (a phase's total, summed over its pieces).
class AddElapsed {
 public:
  explicit AddElapsed(double& seconds)
      : seconds_(seconds), start_(std::chrono::steady_clock::now()) {}
  ~AddElapsed() { seconds_ += lap(start_); }
  AddElapsed(const AddElapsed&) = delete;
  AddElapsed& operator=(const AddElapsed&) = delete;

 private:
  double& seconds_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tessel::checkpoint::detail
