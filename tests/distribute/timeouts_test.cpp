// Deadlines and failures of cross-device ops: timeout_seconds reaches the collectives, a device
// whose stream is busy or failed is named, nobody hangs, and the next call works.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "distribute/distribute_test_util.h"
#include "runtime/runtime_test_util.h"

namespace tessel {
namespace {

using namespace std::chrono_literals;
using testing::cpu;
using testing::filled;
using testing::Gate;
using testing::kBounded;

using Clock = std::chrono::steady_clock;

TEST(CrossDeviceTimeouts, TimeoutSecondsBecomesTheCollectiveDeadline) {
  EXPECT_EQ(CommunicationOptions(0, 2.5).collective_options().timeout, 2500ms);
  EXPECT_EQ(CommunicationOptions(0, 0.0001).collective_options().timeout, 1ms);        // rounded up
  EXPECT_EQ(CommunicationOptions(0, std::nullopt).collective_options().timeout, 0ms);  // default
  EXPECT_EQ(CommunicationOptions(0, 0.0).collective_options().timeout, 0ms);  // TF: 0 disables
}

TEST(CrossDeviceTimeouts, AStalledDeviceIsADeadlineNamingIt) {
  Runtime rt({.num_cpu_devices = 3});
  for (auto ops : std::vector<std::shared_ptr<CrossDeviceOps>>{
           std::make_shared<NcclAllReduce>(1, rt),
           std::make_shared<CollectiveAllReduce>(std::vector<std::string>{cpu(0), cpu(1), cpu(2)},
                                                 3, CommunicationOptions{}, rt)}) {
    Gate release;
    rt.device(1).stream().enqueue("stall", [&release] { release.wait(); });
    const PerReplica v = filled(3, Shape{16});
    const auto start = Clock::now();
    EXPECT_TESSEL_ERROR(ops->reduce(ReduceOp::kSum, v, v, CommunicationOptions(0, 0.2)),
                        ErrorCode::kDeadlineExceeded, cpu(1));
    EXPECT_LT(Clock::now() - start, 2s);  // the deadline (0.2 s), not the stall
    release.open();
    rt.synchronize(testing::kWaitLimit);  // the late participant failed quietly, off the stream
    // The aborted group was replaced: the next call works.
    testing::expect_mirrored(ops->reduce(ReduceOp::kSum, v, v, kBounded), {cpu(0), cpu(1), cpu(2)},
                             std::vector<float>(16, 6));
  }
}

TEST(CrossDeviceTimeouts, AStreamThatNeverReachesTheStepIsNamed) {
  // ReductionToOneDevice runs on one device only: no collective notices a stall, the launch does.
  Runtime rt({.num_cpu_devices = 2});
  ReductionToOneDevice ops("", nullptr, rt);
  Gate release;
  rt.device(0).stream().enqueue("long_kernel", [&release] { release.wait(); });
  const auto start = Clock::now();
  EXPECT_TESSEL_ERROR(
      ops.reduce(ReduceOp::kSum, filled(2, Shape{1}), cpu(0), CommunicationOptions(0, 0.1)),
      ErrorCode::kDeadlineExceeded,
      "reduce_to_one did not start within 100 ms on " + cpu(0) +
          " (its stream is running 'long_kernel'");
  EXPECT_LT(Clock::now() - start, 2s);
  release.open();
  rt.synchronize(testing::kWaitLimit);
}

TEST(CrossDeviceTimeouts, AFailedStreamSkipsTheStepAndReleasesThePeers) {
  Runtime rt({.num_cpu_devices = 2});
  NcclAllReduce ops(1, rt);
  rt.device(1).stream().enqueue("bad_kernel", [] { throw std::runtime_error("boom"); });
  const PerReplica v = filled(2, Shape{4});
  const auto start = Clock::now();
  EXPECT_TESSEL_ERROR(
      ops.reduce(ReduceOp::kSum, v, v, CommunicationOptions(0, 30.0)),
      ErrorCode::kFailedPrecondition,
      "all_reduce was skipped on " + cpu(1) + ": an earlier op on its stream failed");
  EXPECT_LT(Clock::now() - start, 5s);  // the peer was aborted, not left to its 30 s deadline
  // The user's own error still surfaces at their sync point.
  EXPECT_TESSEL_ERROR(rt.synchronize(testing::kWaitLimit), ErrorCode::kInternal, "boom");
  testing::expect_mirrored(ops.reduce(ReduceOp::kSum, v, v, kBounded), {cpu(0), cpu(1)},
                           {3, 3, 3, 3});
}

TEST(CrossDeviceTimeouts, ErrorsInsideAStepNameTheStepAndDevice) {
  Runtime rt({.num_cpu_devices = 2});
  ReductionToOneDevice ops(
      "",
      [](const std::vector<Tensor>&) -> Tensor {
        throw std::runtime_error("accumulation exploded");
      },
      rt);
  EXPECT_TESSEL_ERROR(ops.reduce(ReduceOp::kSum, filled(2, Shape{1}), cpu(1), kBounded),
                      ErrorCode::kInternal,
                      "reduce_to_one on " + cpu(1) + " failed: accumulation exploded");
}

TEST(CrossDeviceConcurrency, ObjectsSharingDevicesFromTwoThreadsDoNotDeadlock) {
  // Two objects over the same devices, driven from two threads, enqueue in opposite device
  // orders; the launch lock keeps every stream's order consistent (TF's collective launch lock).
  Runtime rt({.num_cpu_devices = 3});
  NcclAllReduce a(1, rt);
  CollectiveAllReduce b({cpu(2), cpu(1), cpu(0)}, 3, CommunicationOptions{}, rt);
  const PerReplica forward = filled(3, Shape{64});
  const PerReplica backward({cpu(2), cpu(1), cpu(0)}, forward.values());
  auto run = [](CrossDeviceOps& ops, const PerReplica& v) {
    for (int i = 0; i < 50; ++i) {
      testing::expect_mirrored(ops.reduce(ReduceOp::kSum, v, v, kBounded), v.devices(),
                               std::vector<float>(64, 6));
    }
  };
  auto first = std::async(std::launch::async, [&] { run(a, forward); });
  auto second = std::async(std::launch::async, [&] { run(b, backward); });
  first.get();  // a deadlock would surface here as DeadlineExceeded (kBounded), not a hang
  second.get();
  EXPECT_EQ(a.num_collectives(), 50);
  EXPECT_EQ(b.num_collectives(), 50);
}

// timeout_seconds bounds the whole call, not each of its steps: a ReductionToOneDevice
// batch_reduce whose pairs have different destinations reduces pair by pair, on CPU:0 and then on
// CPU:1. CPU:0 starts its reduce late (0.6 s of a 1 s budget), CPU:1 reaches its own at 1.5 s.
// With a fresh budget per step the second reduce would have had until 0.6 + 1.15 s and
// succeeded; with one budget for the call it fails at about 1.15 s, naming CPU:1.
TEST(CrossDeviceTimeouts, TheTimeoutBoundsTheWholeCallNotEachStep) {
  Runtime rt({.num_cpu_devices = 2});
  ReductionToOneDevice ops("", nullptr, rt);
  const PerReplica v = filled(2, Shape{4});
  const std::vector<ValueDestinationPair> pairs = {{v, cpu(0)}, {v, cpu(1)}};
  rt.device(0).stream().enqueue("slow_kernel", [] { std::this_thread::sleep_for(600ms); });
  rt.device(1).stream().enqueue("slower_kernel", [] { std::this_thread::sleep_for(1500ms); });
  const auto start = Clock::now();
  EXPECT_TESSEL_ERROR(ops.batch_reduce(ReduceOp::kSum, pairs, CommunicationOptions(0, 1.0)),
                      ErrorCode::kDeadlineExceeded,
                      "reduce_to_one did not start within 1000 ms on " + cpu(1));
  EXPECT_LT(Clock::now() - start, 1450ms);  // 1 s + 10% + 50 ms, and some slack
  rt.synchronize(testing::kWaitLimit);
  // The same call with a budget that covers both stalls succeeds.
  rt.device(0).stream().enqueue("slow_kernel", [] { std::this_thread::sleep_for(100ms); });
  const std::vector<Mirrored> out =
      ops.batch_reduce(ReduceOp::kSum, pairs, CommunicationOptions(0, 5.0));
  testing::expect_mirrored(out[0], {cpu(0)}, std::vector<float>(4, 3));
  testing::expect_mirrored(out[1], {cpu(1)}, std::vector<float>(4, 3));
}

}  // namespace
}  // namespace tessel
