// StuckWaitWatchdog: a wait still registered at its fire time is reported once, with its own
// description; a wait that ends first is never reported.
#include "comm/stuck_wait_watchdog.h"

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tessel::detail {
namespace {

using namespace std::chrono_literals;
using Clock = StuckWaitWatchdog::Clock;

// Collects the watchdog's reports instead of ending the process.
struct Reports {
  std::mutex mu;
  std::vector<std::string> messages;

  StuckWaitWatchdog::Action action() {
    return [this](const std::string& m) {
      std::lock_guard<std::mutex> lock(mu);
      messages.push_back(m);
    };
  }
  std::vector<std::string> get() {
    std::lock_guard<std::mutex> lock(mu);
    return messages;
  }
};

TEST(StuckWaitWatchdog, AWaitStillRegisteredAfterItsFireTimeIsReportedOnce) {
  Reports reports;
  StuckWaitWatchdog watchdog(reports.action(), 5ms);
  const auto start = Clock::now();
  auto watch = watchdog.watch(start + 30ms, [](double late) {
    return late >= 0 ? std::string("rank 0 waits for rank 1") : std::string("early");
  });
  while (reports.get().empty() && Clock::now() - start < 5s) std::this_thread::sleep_for(1ms);
  EXPECT_GE(Clock::now() - start, 30ms);
  std::this_thread::sleep_for(50ms);  // more periods: still one report
  EXPECT_EQ(reports.get(), std::vector<std::string>{"rank 0 waits for rank 1"});
}

TEST(StuckWaitWatchdog, AWaitThatEndsBeforeItsFireTimeIsNeverReported) {
  Reports reports;
  StuckWaitWatchdog watchdog(reports.action(), 5ms);
  {
    auto watch = watchdog.watch(Clock::now() + 40ms, [](double) { return std::string("late"); });
    std::this_thread::sleep_for(10ms);
  }
  auto moved = watchdog.watch(Clock::now() + 40ms, [](double) { return std::string("moved"); });
  StuckWaitWatchdog::Watch target = std::move(moved);
  target = StuckWaitWatchdog::Watch();  // unregisters
  std::this_thread::sleep_for(80ms);
  EXPECT_TRUE(reports.get().empty());
}

TEST(StuckWaitWatchdog, OnlyTheStuckOneOfManyWaitsIsReported) {
  Reports reports;
  StuckWaitWatchdog watchdog(reports.action(), 5ms);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&watchdog, t] {
      for (int i = 0; i < 200; ++i) {
        auto w = watchdog.watch(Clock::now() + 1s, [t](double) { return "thread " + std::to_string(t); });
      }
    });
  }
  auto stuck = watchdog.watch(Clock::now() + 20ms, [](double) { return std::string("stuck"); });
  for (std::thread& th : threads) th.join();
  const auto start = Clock::now();
  while (reports.get().empty() && Clock::now() - start < 5s) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(reports.get(), std::vector<std::string>{"stuck"});
}

}  // namespace
}  // namespace tessel::detail
