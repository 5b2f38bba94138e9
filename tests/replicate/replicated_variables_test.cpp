// Replicated variables written back (seed 105: the variables of _TPUReplicate are resources the
// computation updates): ReplicaContext::read_variable / assign_variable, and replicate()'s
// write-back after every replica finished: per-replica values, mirrored values by their
// aggregation, nothing written when the call fails.
#include <gtest/gtest.h>

#include "replicate/replicate_testing.h"
#include "tessel/dtensor/ops.h"
#include "tessel/replicate/replicate.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

using testing::host_values;
using testing::replicate_options;
using testing::vec;

std::vector<float> values_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::vector<float>(c.data<float>(), c.data<float>() + c.num_elements());
}

// Each replica r sets variable 0 to its value * (r + 1) and returns what it then reads.
std::vector<DTensor> scale_by_replica(ReplicaContext& ctx, const std::vector<DTensor>&) {
  ctx.assign_variable(0, multiply(ctx.read_variable(0), ctx.replica_id() + 1.0));
  return {ctx.read_variable(0)};
}

TEST(ReplicatedVariables, PerReplicaVariableTakesEachReplicasAssignment) {
  const Tensor w0 = vec({1, 2});
  const Tensor w1 = vec({3, 4});
  const auto outs =
      replicate(scale_by_replica, {}, {}, {ReplicatedVariable::per_replica("w", {w0, w1})}, {},
                replicate_options(2));
  EXPECT_EQ(host_values(outs[0][0]), (std::vector<float>{1, 2}));  // reads see the assignment
  EXPECT_EQ(host_values(outs[1][0]), (std::vector<float>{6, 8}));
  EXPECT_EQ(values_of(w0), (std::vector<float>{1, 2}));  // the caller's tensors, in place
  EXPECT_EQ(values_of(w1), (std::vector<float>{6, 8}));
}

TEST(ReplicatedVariables, MirroredVariableCombinesTheReplicasByItsAggregation) {
  const struct {
    VariableAggregation aggregation;
    std::vector<float> expected;  // replica r assigns {1, 2} * (r + 1), r = 0, 1, 2
  } cases[] = {{VariableAggregation::kSum, {6, 12}},
               {VariableAggregation::kMean, {2, 4}},
               {VariableAggregation::kOnlyFirstReplica, {1, 2}}};
  for (const auto& c : cases) {
    const Tensor m = vec({1, 2});
    replicate(scale_by_replica, {}, {}, {ReplicatedVariable::mirrored("m", m, {}, c.aggregation)},
              {}, replicate_options(3));
    EXPECT_EQ(values_of(m), c.expected) << variable_aggregation_name(c.aggregation);
  }
}

TEST(ReplicatedVariables, MirroredWithoutAggregationIsTfsErrorWithSeveralReplicas) {
  const Tensor m = vec({1, 2});
  EXPECT_TESSEL_ERROR(replicate(scale_by_replica, {}, {}, {ReplicatedVariable::mirrored("m", m)},
                                {}, replicate_options(2)),
                      ErrorCode::kInvalidArgument,
                      "variable 'm' is mirrored over 2 replicas with aggregation NONE. You must "
                      "specify an aggregation method to update a MirroredVariable in Replica "
                      "Context");
  EXPECT_EQ(values_of(m), (std::vector<float>{1, 2}));
  // One replica: the assignment is the value.
  replicate(scale_by_replica, {}, {}, {ReplicatedVariable::mirrored("m", m)}, {},
            replicate_options(1));
  EXPECT_EQ(values_of(m), (std::vector<float>{1, 2}));
}

TEST(ReplicatedVariables, MirroredAssignedBySomeReplicasOnlyIsRefusedAndNothingIsWritten) {
  const Tensor m = vec({1, 2});
  const Tensor w0 = vec({5});
  const Tensor w1 = vec({6});
  const auto only_replica_1 = [](ReplicaContext& ctx, const std::vector<DTensor>&) {
    ctx.assign_variable(1, multiply(ctx.read_variable(1), 10.0));
    if (ctx.replica_id() == 1) ctx.assign_variable(0, multiply(ctx.read_variable(0), 2.0));
    return std::vector<DTensor>{};
  };
  EXPECT_TESSEL_ERROR(
      replicate(only_replica_1, {}, {},
                {ReplicatedVariable::mirrored("m", m, {}, VariableAggregation::kSum),
                 ReplicatedVariable::per_replica("w", {w0, w1})},
                {}, replicate_options(2)),
      ErrorCode::kInvalidArgument,
      "replicate: variable 'm' is mirrored: replica 1 assigned it and replica 0 did not");
  EXPECT_EQ(values_of(m), (std::vector<float>{1, 2}));
  EXPECT_EQ(values_of(w0), std::vector<float>{5});  // the refused call writes nothing
  EXPECT_EQ(values_of(w1), std::vector<float>{6});
}

TEST(ReplicatedVariables, FailedCallWritesNothing) {
  const Tensor w0 = vec({1});
  const Tensor w1 = vec({2});
  const auto fail_on_1 = [](ReplicaContext& ctx, const std::vector<DTensor>&) {
    ctx.assign_variable(0, multiply(ctx.read_variable(0), 3.0));
    if (ctx.replica_id() == 1) throw Error(ErrorCode::kInternal, "test", "replica 1 fails");
    return std::vector<DTensor>{};
  };
  EXPECT_TESSEL_ERROR(replicate(fail_on_1, {}, {}, {ReplicatedVariable::per_replica("w", {w0, w1})},
                                {}, replicate_options(2)),
                      ErrorCode::kInternal, "replica 1: test: replica 1 fails");
  EXPECT_EQ(values_of(w0), std::vector<float>{1});
  EXPECT_EQ(values_of(w1), std::vector<float>{2});
}

TEST(ReplicatedVariables, BadAssignmentsNameTheVariableAndTheValue) {
  const auto run = [](ReplicaComputation computation) {
    replicate(std::move(computation), {}, {}, {ReplicatedVariable::per_replica("w", {vec({1, 2})})},
              {}, replicate_options(1));
  };
  EXPECT_TESSEL_ERROR(run([](ReplicaContext& ctx, const std::vector<DTensor>& in) {
                        ctx.assign_variable(1, in[0]);
                        return std::vector<DTensor>{};
                      }),
                      ErrorCode::kInvalidArgument,
                      "assign_variable on replica 0: variable 1 is not one of the 1 variables");
  EXPECT_TESSEL_ERROR(run([](ReplicaContext& ctx, const std::vector<DTensor>&) {
                        return std::vector<DTensor>{ctx.read_variable(-1)};
                      }),
                      ErrorCode::kInvalidArgument,
                      "read_variable on replica 0: variable -1 is not one of the 1 variables");
  EXPECT_TESSEL_ERROR(run([](ReplicaContext& ctx, const std::vector<DTensor>& in) {
                        ctx.assign_variable(0, concat({in[0], in[0]}, 0));
                        return std::vector<DTensor>{};
                      }),
                      ErrorCode::kInvalidArgument,
                      "variable 'w': Cannot update variable with shape [2] using a Tensor with "
                      "shape [4], shapes must be equal.");
  EXPECT_TESSEL_ERROR(run([](ReplicaContext& ctx, const std::vector<DTensor>& in) {
                        ctx.assign_variable(0, cast(in[0], DType::kF64));
                        return std::vector<DTensor>{};
                      }),
                      ErrorCode::kInvalidArgument, "variable 'w' is f32; the value is f64");
  EXPECT_TESSEL_ERROR(run([](ReplicaContext& ctx, const std::vector<DTensor>&) {
                        ctx.assign_variable(0, DTensor());
                        return std::vector<DTensor>{};
                      }),
                      ErrorCode::kInvalidArgument,
                      "assign_variable on replica 0: the input is a null DTensor");
}

}  // namespace
}  // namespace tessel
