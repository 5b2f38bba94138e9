// Stream launches (src/runtime/launch.h, white-box): launches enqueued together reach every
// stream next to each other and in one order; the controller's wait ends by the launch's
// deadline also when a task is still running; a stream that refuses a task fails the launch.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/launch.h"
#include "runtime/runtime_test_util.h"
#include "tessel/runtime/runtime.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

using detail::StreamLaunch;
using detail::StreamTask;
using testing::Gate;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The order in which each device ran the tasks of the test, as "<launch>" names.
struct RunOrder {
  std::mutex mu;
  std::vector<std::vector<std::string>> by_device;
  explicit RunOrder(int devices) : by_device(static_cast<size_t>(devices)) {}
  std::function<void()> task(int device, std::string name) {
    return [this, device, name] {
      std::lock_guard<std::mutex> lock(mu);
      by_device[static_cast<size_t>(device)].push_back(name);
    };
  }
};

TEST(StreamLaunch, LaunchesEnqueuedTogetherReachEveryStreamInOneOrder) {
  Runtime rt({.num_cpu_devices = 2});
  Gate hold;  // keeps device 0 busy while the launches are enqueued
  rt.device(0).stream().enqueue("hold", [&hold] { hold.wait(); });
  RunOrder order(2);
  // Listed B before A: the list's order is the streams' order.
  std::vector<std::unique_ptr<StreamLaunch>> launches;
  for (const std::string name : {"B", "A"}) {
    std::vector<StreamTask> tasks = {{&rt.device(0), order.task(0, name)},
                                     {&rt.device(1), order.task(1, name)}};
    launches.push_back(std::make_unique<StreamLaunch>("test", "step " + name, std::move(tasks),
                                                      Clock::now() + std::chrono::seconds(10),
                                                      "within 10 s"));
  }
  StreamLaunch::enqueue_together({launches[0].get(), launches[1].get()});
  StreamLaunch::enqueue_together({launches[0].get()});  // once only: no second copy
  hold.open();
  for (auto& l : launches) l->wait();
  rt.synchronize(testing::kWaitLimit);
  EXPECT_EQ(order.by_device[0], (std::vector<std::string>{"B", "A"}));
  EXPECT_EQ(order.by_device[1], (std::vector<std::string>{"B", "A"}));
}

TEST(StreamLaunch, ATaskStillRunningAtTheDeadlineIsNamedAndTheGroupAborted) {
  Runtime rt({.num_cpu_devices = 2});
  auto release = std::make_shared<Gate>();  // the task outlives the wait: it owns its gate
  std::atomic<int> aborts{0};
  const auto start = Clock::now();
  EXPECT_TESSEL_ERROR(detail::run_on_streams(
                          "test", "stuck_step",
                          {{&rt.device(0), [] {}}, {&rt.device(1), [release] { release->wait(); }}},
                          milliseconds(100), [&aborts](const std::string&) { ++aborts; }),
                      ErrorCode::kDeadlineExceeded,
                      "test: stuck_step did not finish within 100 ms on " + rt.device(1).name() +
                          " (still running it)");
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_GE(took, 0.1);
  EXPECT_LT(took, 0.1 * 1.1 + 0.05 + 0.1);  // the launch's deadline, not the stuck task
  EXPECT_GE(aborts.load(), 1);
  release->open();
  rt.synchronize(testing::kWaitLimit);
}

TEST(StreamLaunch, AStreamThatRefusesATaskFailsTheLaunchAndAbortsTheGroup) {
  Runtime rt({.num_cpu_devices = 2});
  rt.device(1).stream().shutdown();
  std::atomic<int> aborts{0};
  EXPECT_TESSEL_ERROR(
      detail::run_on_streams("test", "step", {{&rt.device(0), [] {}}, {&rt.device(1), [] {}}},
                             milliseconds(5000), [&aborts](const std::string&) { ++aborts; }),
      ErrorCode::kFailedPrecondition,
      "test: step on " + rt.device(1).name() + " failed: Stream: enqueue of op 'step' on " +
          rt.device(1).name() + " after shutdown");
  EXPECT_GE(aborts.load(), 1);
}

}  // namespace
}  // namespace tessel
