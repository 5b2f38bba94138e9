// BR-70-05 (seed 70): CrossDeviceOps' reduce, batch_reduce, broadcast and gather belong to a
// cross-replica context. A replica of replicate()'s computation that makes one fails with
// kFailedPrecondition naming the replica (it reduces with its ReplicaContext instead), and the
// same call from the controller around it works.
#include <gtest/gtest.h>

#include <vector>

#include "distribute/distribute_test_util.h"
#include "replicate/replicate_testing.h"
#include "tessel/distribute/cross_device_ops.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

using testing::replicate_options;
using testing::replicate_runtime;

Tensor one_value(float v) { return Tensor::from_vector<float>({v}, Shape{1}); }

TEST(Seed70, BR_70_05_AReplicaCannotCallCrossDeviceOps) {
  Runtime& rt = replicate_runtime();
  NcclAllReduce ops(1, rt);
  const PerReplica v = testing::filled(2, Shape{2});
  const auto call_from_replica = [&](auto&& cross_device_call) {
    return replicate(
        [&](ReplicaContext&, const std::vector<DTensor>& in) {
          cross_device_call();
          return in;
        },
        {{one_value(1), one_value(2)}}, {}, {}, {}, replicate_options(2));
  };
  EXPECT_TESSEL_ERROR(
      call_from_replica([&] { ops.reduce(ReduceOp::kSum, v, v, testing::kBounded); }),
      ErrorCode::kFailedPrecondition,
      "reduce must be called in a cross-replica context, not inside replicate()'s "
      "computation (here replica ");
  EXPECT_TESSEL_ERROR(call_from_replica([&] { ops.broadcast(one_value(1), v); }),
                      ErrorCode::kFailedPrecondition,
                      "broadcast must be called in a cross-replica context");
  // The controller is a cross-replica context: the same call works there, before and after.
  testing::expect_mirrored(ops.reduce(ReduceOp::kSum, v, v, testing::kBounded),
                           {testing::cpu(0), testing::cpu(1)}, {3, 3});
}

}  // namespace
}  // namespace tessel
