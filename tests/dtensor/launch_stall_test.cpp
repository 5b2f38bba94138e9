// How far dispatch runs ahead of a stalled device (launch_plan.cpp): outside any scope a launch
// waits for room on the stream and the ops complete once the stall ends; inside a
// RelayoutTimeoutScope the launch gives up after the scope's timeout with kDeadlineExceeded
// naming the device and the kernel it is stuck in (a pipeline stage's stalled device).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/relayout.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

using namespace std::chrono_literals;

// Ops on 65536 elements (past the inline size), each a kernel on the stream.
DTensor big(Runtime& rt) {
  const Mesh mesh = Mesh::create_on_devices({{"x", 1}}, {rt.device(0).name()});
  return ones(Shape{256, 256}, Layout::replicated(mesh, 2), DType::kF32, &rt);
}

TEST(LaunchStall, OutsideAScopeTheOpsWaitForTheStallToEnd) {
  Runtime rt({.num_cpu_devices = 1});
  DTensor x = big(rt);
  rt.device(0).stream().enqueue("stall", [] { std::this_thread::sleep_for(300ms); });
  for (int i = 0; i < 8; ++i) x = add(x, x);
  EXPECT_EQ(to_host(x).to_vector<float>().front(), 256.0f);
}

TEST(LaunchStall, InsideAScopeAStalledDeviceIsNamedByTheDeadline) {
  Runtime rt({.num_cpu_devices = 1});
  DTensor x = big(rt);
  const auto stalled = std::chrono::steady_clock::now();
  rt.device(0).stream().enqueue("stall", [] { std::this_thread::sleep_for(2s); });
  {
    const RelayoutTimeoutScope scope(200ms);
    EXPECT_EQ(scoped_relayout_timeout(), std::optional<std::chrono::milliseconds>(200ms));
    EXPECT_TESSEL_ERROR(
        {
          for (int i = 0; i < 8; ++i) x = add(x, x);
        },
        ErrorCode::kDeadlineExceeded,
        "add on " + rt.device(0).name() +
            ": the device's stream made no room within 200 ms (the relayout timeout of this "
            "thread's scope): 'stall' has been running since");
  }
  const auto took = std::chrono::steady_clock::now() - stalled;
  EXPECT_GE(took, 190ms);
  EXPECT_LT(took, 1.1 * 200ms + 50ms + 150ms);
  EXPECT_EQ(scoped_relayout_timeout(), std::nullopt);
  rt.synchronize(std::chrono::seconds(10));
}

}  // namespace
}  // namespace tessel
