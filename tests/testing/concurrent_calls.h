// Helpers of the concurrency tests: run a call from several threads at once and measure the
// longest call against the bound every call must keep (its timeout + 10 %, plus scheduling
// slack on a loaded machine).
#pragma once

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace tessel::testing {

inline double bound_seconds(std::chrono::milliseconds timeout) {
  return std::chrono::duration<double>(timeout).count() * 1.1 + 0.1;
}

// `threads` callers at once, each making `calls` calls of call(thread, index); returns how long
// the longest call took, in seconds.
template <typename Call>
double longest_of_concurrent_calls(int threads, int calls, Call call) {
  using Clock = std::chrono::steady_clock;
  std::mutex mu;
  double longest = 0;
  std::vector<std::thread> callers;
  for (int t = 0; t < threads; ++t) {
    callers.emplace_back([&, t] {
      for (int i = 0; i < calls; ++i) {
        const auto start = Clock::now();
        call(t, i);
        const double took = std::chrono::duration<double>(Clock::now() - start).count();
        std::lock_guard<std::mutex> lock(mu);
        longest = std::max(longest, took);
      }
    });
  }
  for (std::thread& c : callers) c.join();
  return longest;
}

}  // namespace tessel::testing
