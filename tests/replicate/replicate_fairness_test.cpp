// replicate() called from several threads at once over the same devices: every call succeeds
// within its own timeout (+10 %); a replica whose own code overruns the deadline is named at the
// deadline, left running detached, and its later collectives fail with kAborted.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "replicate/replicate_testing.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/relayout.h"
#include "testing/concurrent_calls.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

using testing::bound_seconds;
using testing::longest_of_concurrent_calls;
using testing::replicate_options;
using testing::vec;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Four all_reduces of x * 0.5 over the replicas: the value stays sum(x) / 2 * ... exactly
// computable on the host.
std::vector<DTensor> chained_all_reduces(ReplicaContext& ctx, const std::vector<DTensor>& in) {
  DTensor x = in[0];
  for (int i = 0; i < 4; ++i) x = ctx.all_reduce(multiply(x, 0.5));
  return {x};
}

TEST(ReplicateFairness, ConcurrentCallsOverTheSameDevicesAllFinishWithinTheirTimeout) {
  // Every call puts replica 0 on CPU:0 and replica 1 on CPU:1. Before the rendezvous launch,
  // two calls' collectives could meet in opposite orders on the two streams and wait for each
  // other until the timeout.
  const milliseconds timeout(2000);
  const double longest = longest_of_concurrent_calls(4, 5, [&](int t, int i) {
    const float a = static_cast<float>(t * 10 + i);
    const auto outs = replicate(chained_all_reduces, {{vec({a, 1}), vec({a, 3})}}, {}, {}, {},
                                replicate_options(2, 1, timeout));
    // x -> (x0 + x1) / 2 after the first step, and a fixed point after that.
    for (const auto& out : outs)
      ASSERT_EQ(testing::host_values(out[0]), (std::vector<float>{a, 2}));
  });
  EXPECT_LT(longest, bound_seconds(timeout));
}

TEST(ReplicateFairness, ConcurrentSpmdCallsWithRelayoutsFinishWithinTheirTimeout) {
  // 2 replicas x 2 cores on all four devices: each call's relayouts use the runtime's shared
  // groups, its all_reduce its own.
  const milliseconds timeout(3000);
  const double longest = longest_of_concurrent_calls(3, 3, [&](int t, int) {
    const auto outs = replicate(
        [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
          const DTensor rows = relayout(in[0], Layout({"core", "unsharded"}, ctx.mesh()));
          const DTensor total = ctx.all_reduce(add(rows, 1.0));
          return std::vector<DTensor>{relayout(total, Layout::replicated(ctx.mesh(), 2))};
        },
        {{Tensor::full({4, 2}, DType::kF32, t), Tensor::full({4, 2}, DType::kF32, 2 * t)}}, {}, {},
        {}, replicate_options(2, 2, timeout));
    for (const auto& out : outs) {
      ASSERT_EQ(testing::host_values(out[0]), std::vector<float>(8, static_cast<float>(3 * t + 2)));
    }
  });
  EXPECT_LT(longest, bound_seconds(timeout));
}

// What the late replica saw when it went on after replicate() returned.
struct LateReplica {
  std::atomic<bool> done{false};
  std::mutex mu;
  std::string error;  // "<code> <what>" of its barrier
};

TEST(ReplicateFairness, UserCodePastTheDeadlineIsNamedAtTheDeadlineAndLeftDetached) {
  const milliseconds timeout(300);
  auto late = std::make_shared<LateReplica>();
  const auto start = Clock::now();
  EXPECT_TESSEL_ERROR(
      replicate(
          [late](ReplicaContext& ctx, const std::vector<DTensor>& in) {
            std::vector<DTensor> out = {ctx.all_reduce(in[0])};
            if (ctx.replica_id() == 1) {
              std::this_thread::sleep_for(milliseconds(800));  // past the deadline
              try {
                ctx.barrier();
              } catch (const Error& e) {
                std::lock_guard<std::mutex> lock(late->mu);
                late->error = std::string(error_code_name(e.code())) + " " + e.what();
              }
              late->done = true;
            }
            return out;
          },
          {{vec({1}), vec({2})}}, {}, {}, {}, replicate_options(2, 1, timeout)),
      ErrorCode::kDeadlineExceeded,
      "replicate: replica 1: still running its computation at the call's deadline (300 ms); "
      "replicate() returned without it (its thread goes on detached: its next collective fails "
      "with kAborted)");
  EXPECT_LT(seconds_since(start), bound_seconds(timeout));

  // The devices serve other calls meanwhile.
  const auto outs = replicate(chained_all_reduces, {{vec({1}), vec({3})}}, {}, {}, {},
                              replicate_options(2, 1, milliseconds(2000)));
  EXPECT_EQ(testing::host_values(outs[1][0]), std::vector<float>{2});

  // The late replica goes on with what it holds, and its next collective is aborted.
  const auto wait_until = Clock::now() + std::chrono::seconds(5);
  while (!late->done && Clock::now() < wait_until) std::this_thread::sleep_for(milliseconds(10));
  ASSERT_TRUE(late->done);
  std::lock_guard<std::mutex> lock(late->mu);
  EXPECT_EQ(late->error.rfind("Aborted ReplicaContext: replicate() passed its deadline of 300 ms "
                              "with replica 1 late",
                              0),
            0u)
      << late->error;
}

}  // namespace
}  // namespace tessel
