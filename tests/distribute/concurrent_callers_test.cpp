// Cross-device ops called from several threads at once over the same devices (several objects,
// one per thread, sharing the runtime's group over the device set): every call succeeds with
// the right values within its own timeout (+10 %).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "distribute/distribute_test_util.h"
#include "testing/concurrent_calls.h"

namespace tessel {
namespace {

using testing::bound_seconds;
using testing::cpu;
using testing::filled;
using testing::longest_of_concurrent_calls;

TEST(CrossDeviceConcurrency, CallersOnSharedDevicesAllFinishWithinTheirTimeout) {
  Runtime rt({.num_cpu_devices = 4});
  const CommunicationOptions two_seconds(0, 2.0);
  const std::vector<std::string> devices = {cpu(0), cpu(1), cpu(2), cpu(3)};
  const double longest = longest_of_concurrent_calls(4, 5, [&](int t, int i) {
    // Each thread its own kind of ops, all over the same four devices.
    std::unique_ptr<CrossDeviceOps> ops;
    if (t % 2 == 0) {
      ops = std::make_unique<NcclAllReduce>(1, rt);
    } else {
      ops = std::make_unique<HierarchicalCopyAllReduce>(1, rt);
    }
    const float scale = static_cast<float>(t * 10 + i + 1);
    const PerReplica v = filled(4, Shape{256}, scale);
    testing::expect_mirrored(ops->reduce(ReduceOp::kSum, v, v, two_seconds), devices,
                             std::vector<float>(256, 10 * scale));
  });
  EXPECT_LT(longest, bound_seconds(std::chrono::milliseconds(2000)));
}

}  // namespace
}  // namespace tessel
