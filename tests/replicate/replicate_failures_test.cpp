// replicate()'s failure handling: a replica that throws aborts the others' collectives at once,
// mismatched or missing collectives fail fast naming the replicas, every wait has a deadline.
// Each test bounds itself: the options' timeout is long (60 s) where the test asserts that
// nobody waits for it.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "replicate/replicate_testing.h"
#include "tessel/dtensor/ops.h"
#include "testing/concurrent_calls.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

using testing::replicate_options;
using testing::vec;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<std::vector<Tensor>> one_input(int replicas) {
  std::vector<Tensor> values;
  for (int r = 0; r < replicas; ++r) values.push_back(vec({static_cast<float>(r)}));
  return {values};
}

// replicate(body) over `replicas` replicas of one core, replica r's one input holding r.
template <typename Body>
std::vector<std::vector<DTensor>> run(
    int replicas, Body body, std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  return replicate(body, one_input(replicas), {}, {}, {}, replicate_options(replicas, 1, timeout));
}

std::vector<DTensor> summed(ReplicaContext& ctx, const DTensor& x) { return {ctx.all_reduce(x)}; }

TEST(ReplicateErrors, OneReplicaThrowsAndTheOthersBlockedInAllReduceStopAtOnce) {
  std::mutex mu;
  std::vector<std::string> others;  // what the replicas waiting in all_reduce saw
  const auto start = Clock::now();
  EXPECT_TESSEL_ERROR(
      run(4,
          [&](ReplicaContext& ctx, const std::vector<DTensor>& in) {
            if (ctx.replica_id() == 2) {
              std::this_thread::sleep_for(std::chrono::milliseconds(200));
              throw Error(ErrorCode::kInvalidArgument, "test", "boom");
            }
            try {
              return summed(ctx, in[0]);
            } catch (const Error& e) {
              std::lock_guard<std::mutex> lock(mu);
              others.push_back(std::string(error_code_name(e.code())) + " " + e.what());
              throw;
            }
          }),
      ErrorCode::kInvalidArgument, "replicate: replica 2: test: boom");
  EXPECT_LT(seconds_since(start), 10.0);  // not the 60 s deadline
  ASSERT_EQ(others.size(), 3u);
  for (const std::string& seen : others) {
    // They waited at the all_reduce's rendezvous, for replica 2's part.
    EXPECT_EQ(seen.rfind("Aborted ReplicaContext: replica 2 failed: test: boom", 0), 0u) << seen;
  }
}

TEST(ReplicateErrors, AnExceptionThatIsNotATesselErrorIsInternal) {
  EXPECT_TESSEL_ERROR(run(2,
                          [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
                            if (ctx.replica_id() == 1) throw std::runtime_error("plain failure");
                            return summed(ctx, in[0]);
                          }),
                      ErrorCode::kInternal, "replicate: replica 1: plain failure");
}

TEST(ReplicateErrors, AReplicaThatReturnedEarlyFailsTheWaitersAtOnce) {
  const auto start = Clock::now();
  EXPECT_TESSEL_ERROR(run(3,
                          [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
                            if (ctx.replica_id() == 1) return in;
                            std::this_thread::sleep_for(std::chrono::milliseconds(50));
                            return summed(ctx, in[0]);
                          }),
                      ErrorCode::kFailedPrecondition,
                      "but replica 1 returned from its computation after 0 cross-replica "
                      "collectives: the collective can never complete");
  EXPECT_LT(seconds_since(start), 10.0);
  // The other order: the waiters are already waiting when the replica returns.
  EXPECT_TESSEL_ERROR(run(2,
                          [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
                            ctx.barrier();
                            if (ctx.replica_id() == 0) {
                              std::this_thread::sleep_for(std::chrono::milliseconds(300));
                              return in;
                            }
                            return summed(ctx, in[0]);
                          }),
                      ErrorCode::kFailedPrecondition,
                      "replica 1 waits in collective #1 (all_reduce(sum) of f32[1] "
                      "sharding_specs:unsharded,), but replica 0 returned from its computation "
                      "after 1 cross-replica collective");
  EXPECT_LT(seconds_since(start), 20.0);
}

TEST(ReplicateErrors, MismatchedCollectivesFailNamingBothReplicas) {
  EXPECT_TESSEL_ERROR(run(2,
                          [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
                            if (ctx.replica_id() == 0) {
                              std::this_thread::sleep_for(std::chrono::milliseconds(300));
                              return std::vector<DTensor>{ctx.broadcast(in[0], 0)};
                            }
                            return summed(ctx, in[0]);
                          }),
                      ErrorCode::kFailedPrecondition,
                      "replica 0: ReplicaContext: replicas called different collectives at "
                      "position #0: replica 1 called all_reduce(sum) of f32[1] "
                      "sharding_specs:unsharded,, replica 0 called broadcast(root 0)");
  // Same collective, different shapes.
  EXPECT_TESSEL_ERROR(
      run(2,
          [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
            const DTensor x = ctx.replica_id() == 0 ? in[0] : concat({in[0], in[0]}, 0);
            return summed(ctx, x);
          }),
      ErrorCode::kFailedPrecondition, "all_reduce(sum) of f32[2] sharding_specs");
}

TEST(ReplicateErrors, AReplicaLateForACollectiveIsNamedAtTheDeadline) {
  const auto start = Clock::now();
  EXPECT_TESSEL_ERROR(run(
                          2,
                          [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
                            if (ctx.replica_id() == 1) {
                              std::this_thread::sleep_for(std::chrono::milliseconds(1500));
                            }
                            return summed(ctx, in[0]);
                          },
                          std::chrono::milliseconds(300)),
                      ErrorCode::kDeadlineExceeded,
                      "replicate: replica 1: ReplicaContext: replica 1 did not reach collective #0 "
                      "(all_reduce(sum) of f32[1] sharding_specs:unsharded,) within the call's "
                      "300 ms: it is running its computation; replica 0 waited for it");
  // The deadline, not replica 1's sleep.
  EXPECT_LT(seconds_since(start), testing::bound_seconds(std::chrono::milliseconds(300)));
}

TEST(ReplicateErrors, TheDevicesAreUsableAfterAFailure) {
  EXPECT_THROW(run(4,
                   [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
                     if (ctx.replica_id() == 0) throw Error(ErrorCode::kInternal, "test", "x");
                     return summed(ctx, in[0]);
                   }),
               Error);
  const auto outs = run(
      4, [](ReplicaContext& ctx, const std::vector<DTensor>& in) { return summed(ctx, in[0]); });
  for (const auto& out : outs) EXPECT_EQ(testing::host_values(out[0]), std::vector<float>{6});
}

}  // namespace
}  // namespace tessel
