// Internal to `tessel bench`: the one home of a benchmark's timing.
//
//   bench::Stopwatch watch;                       // starts now, on the steady clock
//   call();
//   samples.push_back(watch.microseconds());
//   const double seconds = bench::seconds_of([&] { call(); });
//   const double typical = median(samples);
//
// The medians are tessel::median's (tessel/core/median.h), the one median of tessel: the middle
// value of an odd count, the mean of the two middle values of an even one (nccl-tests' and
// numpy's).
#pragma once

#include <chrono>
#include <utility>

namespace tessel::cli::bench {

// Time since it was made (or restarted), on the steady clock.
class Stopwatch {
 public:
  Stopwatch() : start_(Clock::now()) {}

  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  double microseconds() const {
    return std::chrono::duration<double, std::micro>(Clock::now() - start_).count();
  }
  void restart() { start_ = Clock::now(); }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_;
};

// Seconds one call of fn() takes.
template <typename Fn>
double seconds_of(Fn&& fn) {
  const Stopwatch watch;
  std::forward<Fn>(fn)();
  return watch.seconds();
}

}  // namespace tessel::cli::bench
