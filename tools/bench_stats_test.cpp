// The benchmarks' timer (bench_stats.h); their median is tessel::median
// (tests/core/median_test.cpp).
#include "bench_stats.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace tessel::cli::bench {
namespace {

TEST(BenchStats, StopwatchMeasuresTheTimeSinceItStarted) {
  const Stopwatch watch;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const double seconds = watch.seconds();
  EXPECT_GE(seconds, 0.02);
  EXPECT_LT(seconds, 5.0);
  EXPECT_GE(watch.microseconds(), seconds * 1e6);  // read later, so at least as long
}

TEST(BenchStats, SecondsOfOneCall) {
  int calls = 0;
  const double seconds = seconds_of([&] {
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  });
  EXPECT_EQ(calls, 1);
  EXPECT_GE(seconds, 0.01);
}

}  // namespace
}  // namespace tessel::cli::bench
