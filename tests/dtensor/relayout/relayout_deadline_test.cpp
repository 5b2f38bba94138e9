// One budget per relayout call: RelayoutOptions.timeout bounds all the steps of a plan together,
// so a device that is a little late at every step cannot stretch a call to steps x timeout. A
// RelayoutTimeoutScope sets the budget of the relayouts a thread runs without options (those
// inside ops).
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
using Clock = std::chrono::steady_clock;

// [8, 8] sharded over x, a partial sum over y: to replicated, the plan is an all_reduce over y
// and then an all_gather over x, and CPU:1 takes part in both.
struct TwoStepCase {
  Runtime rt{RuntimeOptions{.num_cpu_devices = 4}};
  Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  Layout from =
      Layout::create(LayoutType::kStatic, {ShardingSpec::sharded({"x"}), ShardingSpec::unsharded()},
                     mesh, {{"y", ReduceOp::kSum}});
  Layout to = Layout({"unsharded", "unsharded"}, mesh);
  DTensor ones() {
    std::vector<Tensor> blocks(4, Tensor::full(Shape{4, 8}, DType::kF32, 1.0));
    return pack(blocks, from, rt);
  }
  // CPU:1 starts the first step `first` late; a task it queues behind that step then holds its
  // stream for `then`, so it reaches the second step at first + then.
  void delay_cpu1(std::chrono::milliseconds first, std::chrono::milliseconds then) {
    Device& late = rt.device(1);
    late.stream().enqueue("slow_kernel", [&late, first, then] {
      std::this_thread::sleep_for(first);
      late.stream().enqueue("slower_kernel", [then] { std::this_thread::sleep_for(then); });
    });
  }
};

TEST(RelayoutDeadline, ThePlanUnderTestHasTwoCollectiveSteps) {
  TwoStepCase c;
  const RelayoutPlan plan = plan_relayout(Shape{8, 8}, c.from, c.to, DType::kF32);
  ASSERT_EQ(plan.steps.size(), 2u) << plan.to_string();
  EXPECT_EQ(plan.steps[0].kind, RelayoutStepKind::kAllReduce);
  EXPECT_EQ(plan.steps[1].kind, RelayoutStepKind::kAllGather);
}

// A budget of 1 s: CPU:1 joins the all_reduce at 0.6 s and the all_gather at 1.5 s. With a fresh
// budget per step the all_gather would have had until 0.6 + 1 s and succeeded; with one budget
// for the call, its peer gives up at 1 s, naming CPU:1.
TEST(RelayoutDeadline, TheTimeoutBoundsTheWholeCallNotEachStep) {
  TwoStepCase c;
  const DTensor d = c.ones();
  c.delay_cpu1(600ms, 900ms);
  const auto start = Clock::now();
  EXPECT_TESSEL_ERROR(relayout(d, c.to, RelayoutOptions{1000ms}), ErrorCode::kDeadlineExceeded,
                      "CPU:1");
  const auto took = Clock::now() - start;
  EXPECT_GE(took, 950ms);
  EXPECT_LT(took, 1450ms);                     // 1 s + 10% + 50 ms, and some slack
  c.rt.synchronize(std::chrono::seconds(10));  // CPU:1's part fails quietly once it runs
}

TEST(RelayoutDeadline, ABudgetThatCoversTheDelaysSucceeds) {
  TwoStepCase c;
  const DTensor d = c.ones();
  c.delay_cpu1(200ms, 300ms);
  const Tensor all = to_host(relayout(d, c.to, RelayoutOptions{5000ms}));
  ASSERT_EQ(all.shape(), Shape({8, 8}));
  for (float v : all.to_vector<float>()) ASSERT_EQ(v, 2.0f);  // the sum over y of ones
}

TEST(RelayoutTimeoutScope, SetsThisThreadsDefaultWhileItLives) {
  EXPECT_EQ(default_relayout_timeout(), 60000ms);
  EXPECT_EQ(RelayoutOptions{}.timeout, 60000ms);
  {
    const RelayoutTimeoutScope outer(500ms);
    EXPECT_EQ(RelayoutOptions{}.timeout, 500ms);
    {
      const RelayoutTimeoutScope inner(2000ms);
      EXPECT_EQ(default_relayout_timeout(), 2000ms);
    }
    EXPECT_EQ(default_relayout_timeout(), 500ms);
    // Another thread keeps its own.
    std::chrono::milliseconds there{0};
    std::thread([&] { there = default_relayout_timeout(); }).join();
    EXPECT_EQ(there, 60000ms);
  }
  EXPECT_EQ(default_relayout_timeout(), 60000ms);
  EXPECT_TESSEL_ERROR(RelayoutTimeoutScope(0ms), ErrorCode::kInvalidArgument,
                      "relayout: a relayout timeout must be positive, got 0 ms");
  EXPECT_EQ(default_relayout_timeout(), 60000ms);
}

// The relayout an op runs inside (a partial sum reduced before an elementwise op with a
// replicated operand) gets the scope's budget: CPU:1 is 1.5 s late, the call ends at 0.4 s.
TEST(RelayoutTimeoutScope, BoundsTheRelayoutsInsideOps) {
  TwoStepCase c;
  const DTensor d = c.ones();
  const DTensor replicated = relayout(d, c.to);
  c.delay_cpu1(1500ms, 0ms);
  const auto start = Clock::now();
  {
    const RelayoutTimeoutScope scope(400ms);
    EXPECT_TESSEL_ERROR(to_host(add(d, replicated)), ErrorCode::kDeadlineExceeded, "CPU:1");
  }
  const auto took = Clock::now() - start;
  EXPECT_GE(took, 380ms);
  EXPECT_LT(took, 900ms);  // 0.4 s + 10% + 50 ms, and slack for a loaded machine
  c.rt.synchronize(std::chrono::seconds(10));
  (void)replicated;
}

}  // namespace
}  // namespace tessel
