// The in-process SystemChannel: order, deadlines, wake-ups, task checks.
#include <gtest/gtest.h>

#include <thread>

#include "system/system_test_util.h"
#include "tessel/comm/mpi.h"
#include "tessel/system/mpi_system_channel.h"
#include "tessel/system/system_channel.h"

namespace tessel {
namespace {

using testing::elapsed_ms;
using testing::kShort;
using testing::kShortBound;
using Clock = SystemChannel::Clock;

TEST(SystemChannel, MessagesArriveInOrderWithTheirSender) {
  auto channel = make_in_process_system_channel(3);
  EXPECT_EQ(channel->num_hosts(), 3);
  channel->send_to_coordinator(2, "a");
  channel->send_to_coordinator(1, "b");
  channel->send_to_coordinator(2, "c");
  std::vector<std::pair<int, std::string>> got;
  while (auto m = channel->receive_at_coordinator(Clock::now())) got.emplace_back(m->task, m->message);
  EXPECT_EQ(got, (std::vector<std::pair<int, std::string>>{{2, "a"}, {1, "b"}, {2, "c"}}));

  channel->send_to_host(1, "x");
  channel->send_to_host(1, "y");
  channel->send_to_host(0, "z");
  EXPECT_EQ(channel->receive_at_host(1, Clock::now()), "x");
  EXPECT_EQ(channel->receive_at_host(1, Clock::now()), "y");
  EXPECT_EQ(channel->receive_at_host(1, Clock::now()), std::nullopt);
  EXPECT_EQ(channel->receive_at_host(0, Clock::now()), "z");
}

TEST(SystemChannel, ReceiveReturnsNulloptAtTheDeadline) {
  auto channel = make_in_process_system_channel(2);
  auto start = Clock::now();
  EXPECT_EQ(channel->receive_at_coordinator(start + kShort), std::nullopt);
  EXPECT_GE(elapsed_ms(start), kShort.count() - 1);
  EXPECT_LT(elapsed_ms(start), kShortBound.count());
  start = Clock::now();
  EXPECT_EQ(channel->receive_at_host(1, start + kShort), std::nullopt);
  EXPECT_LT(elapsed_ms(start), kShortBound.count());
}

TEST(SystemChannel, ReceiveWakesWhenAMessageArrives) {
  auto channel = make_in_process_system_channel(2);
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    channel->send_to_coordinator(1, "late");
    channel->send_to_host(1, "reply");
  });
  const auto start = Clock::now();
  const auto m = channel->receive_at_coordinator(start + testing::kGenerous);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->task, 1);
  EXPECT_EQ(m->message, "late");
  EXPECT_EQ(channel->receive_at_host(1, Clock::now() + testing::kGenerous), "reply");
  EXPECT_LT(elapsed_ms(start), kShortBound.count());
  sender.join();
}

TEST(SystemChannel, TasksOutsideTheSystemAreRejected) {
  auto channel = make_in_process_system_channel(2);
  EXPECT_TESSEL_ERROR(channel->send_to_coordinator(2, "x"), ErrorCode::kInvalidArgument,
                      "task 2 is not a host of this channel (0..1)");
  EXPECT_TESSEL_ERROR(channel->send_to_host(-1, "x"), ErrorCode::kInvalidArgument, "task -1");
  EXPECT_TESSEL_ERROR(channel->receive_at_host(5, Clock::now()), ErrorCode::kInvalidArgument,
                      "task 5");
  EXPECT_TESSEL_ERROR(make_in_process_system_channel(0), ErrorCode::kInvalidArgument,
                      "num_hosts must be >= 1; got 0");
}

// The MPI channel's contract is tested under mpirun (tests/mpi/mpi_system_test.cpp); this binary
// never initialises MPI.
TEST(SystemChannel, MpiChannelNeedsAnMpiBuildAndInitialisedMpi) {
  if (!mpi_available()) {
    EXPECT_TESSEL_ERROR(make_mpi_system_channel(), ErrorCode::kUnavailable,
                        "make_mpi_system_channel: tessel was built without MPI");
    return;
  }
  EXPECT_TESSEL_ERROR(make_mpi_system_channel(), ErrorCode::kFailedPrecondition,
                      "make_mpi_system_channel: MPI is not initialised (create a "
                      "tessel::MpiEnvironment first)");
  EXPECT_TESSEL_ERROR(make_mpi_system_channel({.close_timeout = std::chrono::milliseconds(-1)}),
                      ErrorCode::kInvalidArgument,
                      "timeout must be > 0 and close_timeout >= 0; got 20000 ms and -1 ms");
}

}  // namespace
}  // namespace tessel
