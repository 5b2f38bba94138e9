// poll_until (the GPU waits' polling loop) without a GPU: the condition is a counter or a clock.
#include "runtime/poll_until.h"

#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>

namespace tessel::detail {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Far enough away that no test below reaches it.
Clock::time_point far_deadline() { return Clock::now() + 60s; }

TEST(PollUntil, ReturnsAtOnceWhenDoneOnTheFirstPoll) {
  int polls = 0;
  const Clock::time_point start = Clock::now();
  EXPECT_TRUE(poll_until(far_deadline(), [&] { return ++polls == 1; }));
  EXPECT_EQ(polls, 1);
  EXPECT_LT(Clock::now() - start, 1s);
}

TEST(PollUntil, PollsUntilDoneWithinTheSpin) {
  int polls = 0;
  EXPECT_TRUE(poll_until(far_deadline(), [&] { return ++polls == 25; }));
  EXPECT_EQ(polls, 25);
}

TEST(PollUntil, KeepsPollingWhileSleepingAfterTheSpin) {
  // Done only 40 ms in, well past the 5 ms spin: the backoff's sleeps (at most 1 ms each) still
  // see it soon after.
  const Clock::time_point start = Clock::now();
  const Clock::time_point ready = start + 40ms;
  int polls = 0;
  EXPECT_TRUE(poll_until(far_deadline(), [&] {
    ++polls;
    return Clock::now() >= ready;
  }));
  const auto waited = Clock::now() - start;
  EXPECT_GE(waited, 40ms);
  EXPECT_LT(waited, 1s);
  EXPECT_GT(polls, 1);
}

TEST(PollUntil, ReturnsFalseAtTheDeadlineNotBeforeAndNotLongAfter) {
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + 30ms;
  int polls = 0;
  EXPECT_FALSE(poll_until(deadline, [&] {
    ++polls;
    return false;
  }));
  const Clock::time_point end = Clock::now();
  EXPECT_GE(end, deadline);
  // The sleeps never pass the deadline; the margin is for a loaded machine's scheduling.
  EXPECT_LT(end - deadline, 100ms);
  EXPECT_GT(polls, 1);
}

TEST(PollUntil, PollsOnceWhenTheDeadlineHasAlreadyPassed) {
  const Clock::time_point past = Clock::now() - 1s;
  int polls = 0;
  EXPECT_TRUE(poll_until(past, [&] { return ++polls == 1; }));
  EXPECT_EQ(polls, 1);
  polls = 0;
  EXPECT_FALSE(poll_until(past, [&] {
    ++polls;
    return false;
  }));
  EXPECT_EQ(polls, 1);
}

TEST(PollUntil, AFailureThrownByThePollEndsTheWait) {
  int polls = 0;
  EXPECT_THROW(poll_until(far_deadline(),
                          [&]() -> bool {
                            if (++polls == 3) throw std::runtime_error("aborted");
                            return false;
                          }),
               std::runtime_error);
  EXPECT_EQ(polls, 3);
}

}  // namespace
}  // namespace tessel::detail
