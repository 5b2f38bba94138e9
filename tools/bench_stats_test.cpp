// The benchmarks' statistics and timer (bench_stats.h).
#include "bench_stats.h"

#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <thread>

namespace tessel::cli::bench {
namespace {

TEST(BenchStats, MedianIsTheMiddleValueOrTheMeanOfTheMiddleTwo) {
  EXPECT_EQ(median({7.0}), 7.0);
  EXPECT_EQ(median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(median({4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_EQ(median({5.0, 5.0, 1.0, 9.0}), 5.0);
  EXPECT_THROW(median({}), std::logic_error);
}

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
