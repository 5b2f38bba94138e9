#include "tessel/runtime/stream.h"

#include <gtest/gtest.h>
#include <chrono>
#include <mutex>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/tensor_test_util.h"
#include "runtime/runtime_test_util.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

using namespace std::chrono_literals;
using testing::expect_error;
using testing::Gate;
using testing::kWaitLimit;

constexpr const char* kLabel = "/job:localhost/replica:0/task:0/device:CPU:1";

// Synchronizes with a bound; fails the test instead of hanging.
void sync(Stream& s) { ASSERT_TRUE(s.synchronize(kWaitLimit)) << "stream did not finish"; }

TEST(Stream, RunsTasksInEnqueueOrder) {
  Stream s(kLabel);
  EXPECT_EQ(s.label(), kLabel);
  std::vector<int> order;  // touched only by the worker until synchronize returns
  for (int i = 0; i < 1000; ++i) s.enqueue("push", [&order, i] { order.push_back(i); });
  sync(s);
  ASSERT_EQ(order.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  EXPECT_EQ(s.pending(), 0u);
  EXPECT_EQ(s.current_op(), "");
}

TEST(Stream, EnqueueReturnsWithoutWaitingForTheWork) {
  Stream s(kLabel);
  Gate release;
  Gate started;
  std::atomic<bool> finished{false};
  s.enqueue("blocked", [&] {
    started.open();
    release.wait();
    finished = true;
  });
  s.enqueue("after", [] {});
  // Both calls returned while the first task cannot finish until `release` opens.
  EXPECT_FALSE(finished.load());
  ASSERT_TRUE(started.wait());
  EXPECT_EQ(s.current_op(), "blocked");
  EXPECT_EQ(s.next_op(), "after");
  EXPECT_EQ(s.pending(), 2u);
  EXPECT_FALSE(s.synchronize(20ms));
  release.open();
  sync(s);
  EXPECT_TRUE(finished.load());
  EXPECT_EQ(s.pending(), 0u);
  EXPECT_EQ(s.next_op(), "");
}

TEST(Stream, WaitUntilPendingBelowWaitsForRoomOrItsDeadline) {
  Stream s(kLabel);
  Gate release;
  for (int i = 0; i < 3; ++i) s.enqueue("blocked", [&] { release.wait(); });
  EXPECT_TRUE(s.wait_until_pending_below(4, std::chrono::steady_clock::now()));
  EXPECT_FALSE(s.wait_until_pending_below(3, std::chrono::steady_clock::now() + 20ms));
  std::atomic<bool> room{false};
  std::thread waiter(
      [&] { room = s.wait_until_pending_below(1, std::chrono::steady_clock::now() + kWaitLimit); });
  release.open();
  waiter.join();
  EXPECT_TRUE(room.load());
  EXPECT_EQ(s.pending(), 0u);
  // From a task of the stream itself: at once (it would wait for itself).
  std::atomic<bool> inside{false};
  s.enqueue("self", [&] {
    inside = s.wait_until_pending_below(1, std::chrono::steady_clock::now() + kWaitLimit);
  });
  sync(s);
  EXPECT_TRUE(inside.load());
}

TEST(Stream, ErrorSurfacesAtSynchronizeNamingOpAndDevice) {
  Stream s(kLabel);
  std::atomic<int> ran{0};
  s.enqueue("ok", [&] { ++ran; });
  s.enqueue("all_reduce",
            [] { throw Error(ErrorCode::kInvalidArgument, "Communicator", "count 3 != 4"); });
  s.enqueue("skipped_1", [&] { ++ran; });
  s.enqueue("skipped_2", [&] { ++ran; });
  try {
    s.synchronize();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(e.component(), "Stream");
    EXPECT_EQ(std::string(e.what()),
              "Stream: op 'all_reduce' on /job:localhost/replica:0/task:0/device:CPU:1 failed: "
              "Communicator: count 3 != 4; 2 later ops skipped");
  }
  EXPECT_EQ(ran.load(), 1);  // the ops after the failure were skipped
  // Reported once; the stream then runs new work.
  EXPECT_TRUE(s.synchronize(kWaitLimit));
  s.enqueue("again", [&] { ++ran; });
  sync(s);
  EXPECT_EQ(ran.load(), 2);
}

TEST(Stream, WorkEnqueuedWhileAnErrorIsPendingIsSkipped) {
  Stream s(kLabel);
  s.enqueue("fails", [] { throw std::runtime_error("boom"); });
  s.enqueue("marker", [] {});
  // Wait (bounded) until the failure is captured and the marker skipped.
  const auto deadline = std::chrono::steady_clock::now() + kWaitLimit;
  while (s.pending() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  std::atomic<bool> ran{false};
  s.enqueue("late", [&] { ran = true; });
  expect_error([&] { s.synchronize(); }, ErrorCode::kInternal, "Stream",
               "op 'fails' on " + std::string(kLabel) + " failed: boom; 2 later ops skipped");
  EXPECT_FALSE(ran.load());
}

TEST(Stream, KernelErrorCodesArePreserved) {
  Stream s(kLabel);
  for (ErrorCode code : {ErrorCode::kOutOfRange, ErrorCode::kDeadlineExceeded, ErrorCode::kAborted,
                         ErrorCode::kUnavailable}) {
    s.enqueue("kernel", [code] { throw Error(code, "Kernel", "bad"); });
    expect_error([&] { s.synchronize(); }, code, "Stream", "op 'kernel' on");
  }
}

TEST(Stream, ForeignExceptionsBecomeInternal) {
  Stream s(kLabel);
  s.enqueue("std", [] { throw std::out_of_range("vector index 9"); });
  expect_error([&] { s.synchronize(); }, ErrorCode::kInternal, "Stream",
               "op 'std' on " + std::string(kLabel) + " failed: vector index 9");
  s.enqueue("int", [] { throw 42; });
  expect_error(
      [&] { s.synchronize(); }, ErrorCode::kInternal, "Stream",
      "op 'int' on " + std::string(kLabel) + " failed: an exception that is not a std::exception");
}

TEST(Stream, TimedOutSynchronizeLeavesTheErrorForLater) {
  Stream s(kLabel);
  Gate release;
  s.enqueue("blocked", [&] { release.wait(); });
  s.enqueue("fails", [] { throw Error(ErrorCode::kAborted, "Kernel", "peer failed"); });
  EXPECT_FALSE(s.synchronize(10ms));
  EXPECT_FALSE(s.synchronize(std::chrono::steady_clock::now()));
  release.open();
  expect_error([&] { s.synchronize(kWaitLimit); }, ErrorCode::kAborted, "Stream",
               "op 'fails' on " + std::string(kLabel) + " failed: Kernel: peer failed");
  EXPECT_TRUE(s.synchronize(kWaitLimit));
}

TEST(Stream, ThrowsOnNegativeTimeout) {
  Stream s(kLabel);
  expect_error([&] { s.synchronize(-1ms); }, ErrorCode::kInvalidArgument, "Stream",
               "negative timeout of -1 ms");
}

TEST(Stream, ThrowsOnEmptyFunction) {
  Stream s(kLabel);
  expect_error([&] { s.enqueue("nothing", nullptr); }, ErrorCode::kInvalidArgument, "Stream",
               "enqueue of op 'nothing' on " + std::string(kLabel) + " with an empty function");
}

TEST(Stream, SynchronizeFromItsOwnTaskFailsInsteadOfDeadlocking) {
  Stream s(kLabel);
  s.enqueue("inner_sync", [&] { s.synchronize(); });
  expect_error([&] { s.synchronize(kWaitLimit); }, ErrorCode::kFailedPrecondition, "Stream",
               "op 'inner_sync' on " + std::string(kLabel) +
                   " failed: Stream: synchronize() called from op 'inner_sync' running on");
}

TEST(Stream, TasksMayEnqueueMoreWork) {
  Stream s(kLabel);
  std::vector<int> order;
  s.enqueue("outer", [&] {
    order.push_back(1);
    s.enqueue("inner", [&] { order.push_back(3); });
    order.push_back(2);
  });
  sync(s);
  sync(s);  // the inner task was enqueued after the first synchronize began
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

TEST(Stream, EnqueueFromManyThreadsKeepsEachThreadsOrder) {
  Stream s(kLabel);
  constexpr int kThreads = 4;
  constexpr int kPerThread = 500;
  std::vector<std::vector<int>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        s.enqueue("push", [&seen, t, i] { seen[static_cast<size_t>(t)].push_back(i); });
      }
    });
  }
  for (auto& t : threads) t.join();
  sync(s);
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(seen[static_cast<size_t>(t)].size(), static_cast<size_t>(kPerThread));
    for (int i = 0; i < kPerThread; ++i)
      EXPECT_EQ(seen[static_cast<size_t>(t)][static_cast<size_t>(i)], i);
  }
}

TEST(Stream, CapturesAreReleasedBeforeSynchronizeReturns) {
  Stream s(kLabel);
  auto token = std::make_shared<int>(5);
  std::weak_ptr<int> watch = token;
  s.enqueue("holds", [token] { EXPECT_EQ(*token, 5); });
  token.reset();
  sync(s);
  EXPECT_TRUE(watch.expired());
}

TEST(Stream, DestructionDrainsQueuedWork) {
  std::atomic<int> ran{0};
  Gate release;
  {
    Stream s(kLabel);
    s.enqueue("first", [&] {
      release.wait(1s);
      ++ran;
    });
    for (int i = 0; i < 50; ++i) s.enqueue("count", [&] { ++ran; });
    release.open();
  }  // the destructor runs all 51 tasks, then joins
  EXPECT_EQ(ran.load(), 51);
}

TEST(Stream, EnqueueAfterShutdownFails) {
  Stream s(kLabel);
  s.enqueue("before", [] {});
  s.shutdown();
  EXPECT_EQ(s.pending(), 0u);
  expect_error([&] { s.enqueue("late", [] {}); }, ErrorCode::kFailedPrecondition, "Stream",
               "enqueue of op 'late' on " + std::string(kLabel) + " after shutdown");
  s.shutdown();  // idempotent
  EXPECT_TRUE(s.synchronize(kWaitLimit));
}

TEST(Stream, OnWorkerThreadIsTrueOnlyInsideTasks) {
  Stream s(kLabel);
  EXPECT_FALSE(s.on_worker_thread());
  std::atomic<bool> inside{false};
  s.enqueue("probe", [&] { inside = s.on_worker_thread(); });
  sync(s);
  EXPECT_TRUE(inside.load());
}

TEST(Stream, RunInlineIfIdleRunsOnTheCallerOnlyWhenNothingIsPending) {
  Stream s("test");
  std::thread::id ran_on;
  EXPECT_TRUE(s.run_inline_if_idle("inline", [&] { ran_on = std::this_thread::get_id(); }));
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  std::atomic<bool> release{false};
  s.enqueue("blocker", [&] {
    while (!release) std::this_thread::yield();
  });
  bool ran = false;
  EXPECT_FALSE(s.run_inline_if_idle("inline", [&] { ran = true; }));  // busy: not run
  EXPECT_FALSE(ran);
  release = true;
  s.synchronize();
  EXPECT_EQ(s.pending(), 0u);
}

TEST(Stream, TasksEnqueuedDuringAnInlineTaskRunAfterIt) {
  Stream s("test");
  std::vector<int> order;
  std::mutex mu;
  EXPECT_TRUE(s.run_inline_if_idle("inline", [&] {
    s.enqueue("later", [&] {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(2);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the worker must not start it
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(1);
  }));
  s.synchronize();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST(Stream, AnInlineFailureIsTheStreamsStickyError) {
  Stream s("dev");
  EXPECT_TRUE(s.run_inline_if_idle("bad_op", [] {
    throw Error(ErrorCode::kInvalidArgument, "kernel", "boom");
  }));
  EXPECT_FALSE(s.run_inline_if_idle("next", [] {}));  // an error is pending
  EXPECT_TESSEL_ERROR(s.synchronize(), ErrorCode::kInvalidArgument, "op 'bad_op' on dev failed");
  EXPECT_TRUE(s.run_inline_if_idle("next", [] {}));
}

}  // namespace
}  // namespace tessel
