// ReplicaContext's lifetime rule (replica_context.h, "Lifetime"): a context kept past its
// computation (replicate() returned, compile() traced) keeps its plain values and refuses
// runtime() and the collectives with kFailedPrecondition; expire() waits for calls in flight.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "replicate/replicate_testing.h"
#include "tessel/replicate/compile.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

using testing::replicate_options;
using testing::vec;

// Each replica's context, kept past replicate().
struct KeptContexts {
  std::mutex mu;
  std::vector<std::shared_ptr<ReplicaContext>> by_replica =
      std::vector<std::shared_ptr<ReplicaContext>>(2);

  void keep(ReplicaContext& ctx) {
    std::lock_guard<std::mutex> lock(mu);
    by_replica[static_cast<size_t>(ctx.replica_id())] = ctx.shared_from_this();
  }
};

void expect_expired(ReplicaContext& ctx, const DTensor& x, const std::string& what_ended) {
  const std::string tail = " used after " + what_ended + " (replica " +
                           std::to_string(ctx.replica_id()) + " of " +
                           std::to_string(ctx.num_replicas()) + ")";
  EXPECT_TRUE(ctx.expired());
  EXPECT_TESSEL_ERROR(ctx.barrier(), ErrorCode::kFailedPrecondition,
                      "ReplicaContext: barrier" + tail);
  EXPECT_TESSEL_ERROR(ctx.all_reduce(x), ErrorCode::kFailedPrecondition,
                      "ReplicaContext: all_reduce" + tail);
  EXPECT_TESSEL_ERROR(ctx.all_gather(x, 0), ErrorCode::kFailedPrecondition,
                      "ReplicaContext: all_gather" + tail);
  EXPECT_TESSEL_ERROR(ctx.broadcast(x, 0), ErrorCode::kFailedPrecondition,
                      "ReplicaContext: broadcast" + tail);
  EXPECT_TESSEL_ERROR(ctx.runtime(), ErrorCode::kFailedPrecondition,
                      "ReplicaContext: runtime" + tail);
}

TEST(ReplicaContextLifetime, AContextKeptPastReplicateExpires) {
  KeptContexts kept;
  const auto outs = replicate(
      [&](ReplicaContext& ctx, const std::vector<DTensor>& in) {
        kept.keep(ctx);
        EXPECT_FALSE(ctx.expired());
        return std::vector<DTensor>{ctx.all_reduce(in[0])};
      },
      {{vec({1, 2}), vec({3, 4})}}, {}, {}, {}, replicate_options(2));
  ASSERT_EQ(testing::host_values(outs[1][0]), (std::vector<float>{4, 6}));
  for (int r = 0; r < 2; ++r) {
    ReplicaContext& ctx = *kept.by_replica[static_cast<size_t>(r)];
    EXPECT_EQ(ctx.replica_id(), r);  // the plain values stay readable
    EXPECT_EQ(ctx.num_replicas(), 2);
    EXPECT_EQ(ctx.mesh().size(), 1);
    expect_expired(ctx, outs[static_cast<size_t>(r)][0], "replicate() returned");
  }
}

TEST(ReplicaContextLifetime, AContextOfAFailedReplicateExpires) {
  KeptContexts kept;
  EXPECT_TESSEL_ERROR(
      replicate(
          [&](ReplicaContext& ctx, const std::vector<DTensor>&) -> std::vector<DTensor> {
            kept.keep(ctx);
            throw Error(ErrorCode::kInvalidArgument, "test", "boom");
          },
          {{vec({1}), vec({2})}}, {}, {}, {}, replicate_options(2)),
      ErrorCode::kInvalidArgument, "boom");
  const Mesh mesh = kept.by_replica[0]->mesh();
  const DTensor x =
      copy_to_mesh(vec({1}), Layout::replicated(mesh, 1), testing::replicate_runtime());
  expect_expired(*kept.by_replica[0], x, "replicate() returned");
}

TEST(ReplicaContextLifetime, AContextKeptPastTracingExpires) {
  std::shared_ptr<ReplicaContext> kept;
  CompileOptions options;
  options.replicate = replicate_options(2);
  const CompilationResult r =
      compile(Function("keep",
                       [&](ReplicaContext& ctx, const std::vector<DTensor>& in) {
                         kept = ctx.shared_from_this();
                         return std::vector<DTensor>{ctx.all_reduce(in[0])};
                       }),
              {{Shape{2}}}, options);
  ASSERT_TRUE(r.ok()) << r.status_string();
  const DTensor x =
      copy_to_mesh(vec({1, 2}), Layout::replicated(kept->mesh(), 1), testing::replicate_runtime());
  expect_expired(*kept, x, "compile() traced the function");
  // The compiled computation runs on fresh contexts of its own.
  const auto outs = r.computation()->run({{vec({1, 2}), vec({3, 4})}});
  EXPECT_EQ(testing::host_values(outs[0][0]), (std::vector<float>{4, 6}));
}

// A single-replica context whose barrier blocks until released: a call in flight.
class BlockingContext final : public ReplicaContext {
 public:
  explicit BlockingContext(Mesh mesh)
      : ReplicaContext(0, 1, std::move(mesh), testing::replicate_runtime()) {}
  std::promise<void> entered;
  std::promise<void> release;

 private:
  void run_barrier() override {
    entered.set_value();
    release.get_future().wait();
  }
};

TEST(ReplicaContextLifetime, ExpireWaitsForACallInFlightAndKeepsTheFirstReason) {
  const auto ctx =
      std::make_shared<BlockingContext>(Mesh::create_on_devices({{"core", 1}}, {"CPU:0"}));
  std::thread caller([&] { ctx->barrier(); });
  ctx->entered.get_future().wait();
  std::atomic<bool> expired{false};
  std::thread ender([&] {
    ctx->expire("the test ended it");
    expired = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(expired.load());  // the barrier in flight holds it off
  ctx->release.set_value();
  caller.join();
  ender.join();
  EXPECT_TRUE(expired.load());
  ctx->expire("a second reason");
  EXPECT_TESSEL_ERROR(ctx->barrier(), ErrorCode::kFailedPrecondition,
                      "ReplicaContext: barrier used after the test ended it (replica 0 of 1)");
}

}  // namespace
}  // namespace tessel
