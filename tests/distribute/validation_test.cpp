// Reference §A.2-A.4: destination handling, input conversion, the single-replica shortcut,
// batch_reduce edge cases, component checks.
#include <gtest/gtest.h>

#include "distribute/distribute_test_util.h"

namespace tessel {
namespace {

using testing::cpu;
using testing::filled;
using testing::floats;
using testing::kBounded;
using testing::vec;

TEST(CrossDeviceValidation, PartialDeviceNamesResolveToTheRuntimesFullNames) {
  Runtime rt({.num_cpu_devices = 3});
  NcclAllReduce ops(1, rt);
  const PerReplica v({"/cpu:0", "/job:localhost/device:CPU:2"}, {vec({1}), vec({2})});
  const Mirrored m = ops.reduce(ReduceOp::kSum, v, v, kBounded);
  EXPECT_EQ(m.devices(), (std::vector<std::string>{cpu(0), cpu(2)}));
  EXPECT_EQ(ops.last_plan().path, "all_reduce");
}

TEST(CrossDeviceValidation, UnknownDevicesAreNotFound) {
  Runtime rt({.num_cpu_devices = 2});
  ReductionToOneDevice ops("", nullptr, rt);
  const PerReplica v = filled(2, Shape{1});
  EXPECT_TESSEL_ERROR(ops.reduce(ReduceOp::kSum, v, "/cpu:7", kBounded), ErrorCode::kNotFound,
                      "/cpu:7");
  EXPECT_TESSEL_ERROR(ops.reduce(ReduceOp::kSum, v, "/gpu:0", kBounded), ErrorCode::kNotFound,
                      "/gpu:0");
  EXPECT_TESSEL_ERROR(ReductionToOneDevice("/cpu:9", nullptr, rt), ErrorCode::kNotFound, "/cpu:9");
}

TEST(CrossDeviceValidation, ADeviceNamedTwiceIsRejected) {
  Runtime rt({.num_cpu_devices = 2});
  NcclAllReduce ops(1, rt);
  const PerReplica v = filled(2, Shape{1});
  EXPECT_TESSEL_ERROR(ops.reduce(ReduceOp::kSum, v, {"/cpu:0", cpu(0)}, kBounded),
                      ErrorCode::kInvalidArgument, "destinations name device " + cpu(0) + " twice");
  // Parsed names that differ in text but not in device are caught by the runtime's resolution.
  const PerReplica twice({"/cpu:1", cpu(1)}, {vec({1}), vec({2})});
  EXPECT_TESSEL_ERROR(ops.reduce(ReduceOp::kSum, twice, cpu(0), kBounded),
                      ErrorCode::kInvalidArgument, "the value's components name device");
  EXPECT_TESSEL_ERROR(PerReplica({cpu(1), cpu(1)}, {vec({1}), vec({2})}),
                      ErrorCode::kInvalidArgument, "components 0 and 1 are both on device");
}

TEST(CrossDeviceValidation, DevicesMatchAsSets) {
  // TF's _devices_match compares device sets: reversed destinations still all-reduce, and the
  // result follows the destinations' order.
  Runtime rt({.num_cpu_devices = 3});
  NcclAllReduce ops(1, rt);
  const PerReplica v = filled(3, Shape{2});
  const Mirrored m = ops.reduce(ReduceOp::kSum, v, {cpu(2), cpu(0), cpu(1)}, kBounded);
  EXPECT_EQ(ops.last_plan().path, "all_reduce");
  testing::expect_mirrored(m, {cpu(2), cpu(0), cpu(1)}, {6, 6});
  // A subset is not a match: the fallback reduces on one device.
  testing::expect_mirrored(ops.reduce(ReduceOp::kSum, v, {cpu(1), cpu(0)}, kBounded),
                           {cpu(1), cpu(0)}, {6, 6});
  EXPECT_EQ(ops.last_plan().path, "reduce_to_one_device");
}

TEST(CrossDeviceValidation, TensorsWithoutDeviceCannotBecomePerReplica) {
  EXPECT_TESSEL_ERROR(make_tensor_into_per_replica(vec({1}), ""), ErrorCode::kInvalidArgument,
                      "Cannot convert `input_tensor` to a `PerReplica` object because it doesn't "
                      "have device set.");
  const PerReplica p = make_tensor_into_per_replica(vec({1}), cpu(0));
  EXPECT_EQ(p.devices(), std::vector<std::string>{cpu(0)});
}

TEST(CrossDeviceValidation, ReduceShortcutIsAnIdentityCopyWithoutMeanDivision) {
  Runtime rt({.num_cpu_devices = 2});
  const Tensor x = vec({3, 9});
  const PerReplica one({cpu(1)}, {x});
  NcclAllReduce nccl(1, rt);
  ReductionToOneDevice r2od("", nullptr, rt);
  for (CrossDeviceOps* ops : std::vector<CrossDeviceOps*>{&nccl, &r2od}) {
    const Mirrored m = ops->reduce(ReduceOp::kMean, one, "/cpu:1", kBounded);
    EXPECT_EQ(ops->last_plan().path, "single_replica_shortcut");
    EXPECT_TRUE(ops->last_plan().mean_divisors.empty());
    EXPECT_EQ(m.devices(), std::vector<std::string>{cpu(1)});
    EXPECT_EQ(floats(m.value(0)), (std::vector<float>{3, 9}));
    EXPECT_FALSE(m.tensor(0).shares_storage_with(x));  // an identity copy
    const auto plain = regroup(m);
    ASSERT_TRUE(std::holds_alternative<Tensor>(plain));  // TF: a plain tensor, not a Mirrored
    // Any op, even one TF would reject later: the shortcut runs before the op check.
    EXPECT_EQ(floats(ops->reduce(ReduceOp::kProd, one, one, kBounded).value(0)),
              (std::vector<float>{3, 9}));
  }
  // Different device: no shortcut.
  const Mirrored moved = r2od.reduce(ReduceOp::kMean, one, cpu(0), kBounded);
  EXPECT_EQ(r2od.last_plan().path, "reduce_to_one_device");
  EXPECT_EQ(r2od.last_plan().mean_divisors, std::vector<int64_t>{1});
  EXPECT_EQ(moved.devices(), std::vector<std::string>{cpu(0)});
}

TEST(CrossDeviceValidation, BatchReduceShortcutReturnsTheValuesThemselves) {
  Runtime rt({.num_cpu_devices = 2});
  NcclAllReduce ops(1, rt);
  const Tensor a = vec({1, 2});
  const Tensor b = vec({5});
  const PerReplica pa({cpu(0)}, {a});
  const PerReplica pb({cpu(0)}, {b});
  const auto out = ops.batch_reduce(ReduceOp::kMean, {{pa, pa}, {pb, "/cpu:0"}}, kBounded);
  EXPECT_EQ(ops.last_plan().path, "single_replica_shortcut");
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(out[0].tensor(0).shares_storage_with(a));  // no copy, unlike reduce
  EXPECT_TRUE(out[1].tensor(0).shares_storage_with(b));
  // Destinations elsewhere: no shortcut.
  const auto moved = ops.batch_reduce(ReduceOp::kSum, {{pa, pa}, {pb, cpu(1)}}, kBounded);
  EXPECT_EQ(ops.last_plan().path, "per_pair");
  EXPECT_EQ(moved[1].devices(), std::vector<std::string>{cpu(1)});
  EXPECT_EQ(floats(moved[1].value(0)), std::vector<float>{5});
}

TEST(CrossDeviceValidation, GatherShortcutIsAnIdentityCopy) {
  Runtime rt({.num_cpu_devices = 2});
  ReductionToOneDevice ops("", nullptr, rt);
  const PerReplica one({cpu(0)}, {vec({1, 2})});
  const Mirrored m = ops.gather(one, one, 0, kBounded);
  EXPECT_EQ(ops.last_plan().path, "single_replica_shortcut");
  EXPECT_EQ(floats(m.value(0)), (std::vector<float>{1, 2}));
  EXPECT_FALSE(m.tensor(0).shares_storage_with(one.tensor(0)));
}

TEST(CrossDeviceValidation, EmptyBatchReduceReturnsNoResults) {
  // TF indexes pairs[0] and crashes with IndexError; tessel defines the empty batch as empty.
  Runtime rt({.num_cpu_devices = 2});
  NcclAllReduce ops(1, rt);
  EXPECT_TRUE(ops.batch_reduce(ReduceOp::kSum, {}, kBounded).empty());
  EXPECT_EQ(ops.last_plan().method, "batch_reduce");
  EXPECT_EQ(ops.last_plan().path, "empty");
  EXPECT_EQ(ops.num_collectives(), 0);
}

TEST(CrossDeviceValidation, ComponentsMustAgree) {
  Runtime rt({.num_cpu_devices = 2});
  NcclAllReduce ops(1, rt);
  const PerReplica shapes({cpu(0), cpu(1)}, {vec({1, 2}), vec({1})});
  EXPECT_TESSEL_ERROR(ops.reduce(ReduceOp::kSum, shapes, shapes, kBounded),
                      ErrorCode::kInvalidArgument, "component 1 on " + cpu(1) + " ([1] f32)");
  const PerReplica dtypes({cpu(0), cpu(1)},
                          {vec({1}), Tensor::from_vector<int32_t>({1}, Shape{1})});
  EXPECT_TESSEL_ERROR(ops.reduce(ReduceOp::kSum, dtypes, dtypes, kBounded),
                      ErrorCode::kInvalidArgument, "does not match component 0");
  const PerReplica bools({cpu(0), cpu(1)}, {Tensor::full(Shape{2}, DType::kBool, 1),
                                            Tensor::full(Shape{2}, DType::kBool, 0)});
  EXPECT_TESSEL_ERROR(ops.reduce(ReduceOp::kMean, bools, bools, kBounded),
                      ErrorCode::kInvalidArgument, "reduce:");
  const Mirrored any = ops.reduce(ReduceOp::kSum, bools, bools, kBounded);  // logical or
  EXPECT_EQ(std::get<Tensor>(any.value(1)).to_vector<bool>(), (std::vector<bool>{true, true}));
}

TEST(CrossDeviceValidation, GatherChecksAxisAndOtherDimensions) {
  Runtime rt({.num_cpu_devices = 2});
  ReductionToOneDevice ops("", nullptr, rt);
  const PerReplica v({cpu(0), cpu(1)}, {Tensor::zeros(Shape{2, 3}, DType::kF32),
                                        Tensor::zeros(Shape{2, 4}, DType::kF32)});
  EXPECT_TESSEL_ERROR(ops.gather(v, v, 2, kBounded), ErrorCode::kInvalidArgument,
                      "axis 2 is out of range for rank 2");
  EXPECT_TESSEL_ERROR(ops.gather(v, v, -3, kBounded), ErrorCode::kInvalidArgument,
                      "axis -3 is out of range");
  EXPECT_TESSEL_ERROR(ops.gather(v, v, 0, kBounded), ErrorCode::kInvalidArgument,
                      "only the gathered axis may differ");
  const Mirrored m = ops.gather(v, v, -1, kBounded);  // axis 1: 3 + 4 columns
  EXPECT_EQ(m.tensor(1).shape(), (Shape{2, 7}));
  const PerReplica scalars(
      {cpu(0), cpu(1)}, {Tensor::zeros(Shape{}, DType::kF32), Tensor::zeros(Shape{}, DType::kF32)});
  EXPECT_TESSEL_ERROR(ops.gather(scalars, scalars, 0, kBounded), ErrorCode::kInvalidArgument,
                      "out of range for rank 0");
}

TEST(CrossDeviceValidation, BroadcastCopiesToEveryDestination) {
  Runtime rt({.num_cpu_devices = 3});
  for (auto ops : std::vector<std::shared_ptr<CrossDeviceOps>>{
           std::make_shared<ReductionToOneDevice>("", nullptr, rt),
           std::make_shared<NcclAllReduce>(1, rt)}) {
    const Tensor x = vec({7, 8});
    const Mirrored m = ops->broadcast(x, {cpu(2), cpu(0)});
    testing::expect_mirrored(m, {cpu(2), cpu(0)}, {7, 8});
    EXPECT_FALSE(m.tensor(0).shares_storage_with(x));
    EXPECT_FALSE(m.tensor(0).shares_storage_with(m.tensor(1)));
    EXPECT_EQ(ops->last_plan().path, "broadcast");
    EXPECT_TRUE(std::holds_alternative<Tensor>(regroup(ops->broadcast(x, cpu(1)))));
    EXPECT_TESSEL_ERROR(ops->broadcast(Tensor(), cpu(1)), ErrorCode::kInvalidArgument,
                        "null tensor");
  }
}

TEST(CrossDeviceValidation, ResultsAreAllocatedFromTheDestinationDevices) {
  Runtime rt({.num_cpu_devices = 2});
  ReductionToOneDevice ops("", nullptr, rt);
  const PerReplica v = filled(2, Shape{256});
  const int64_t before = rt.device(1).memory_stats().live_bytes;
  const Mirrored m = ops.reduce(ReduceOp::kSum, v, cpu(1), kBounded);
  EXPECT_EQ(rt.device(1).memory_stats().live_bytes, before + 1024);
  EXPECT_EQ(m.tensor(0).allocator(), rt.device(1).allocator());
}

TEST(CrossDeviceValidation, ReduceNonDistributedValue) {
  Runtime rt({.num_cpu_devices = 2});
  const Tensor x = vec({4, 5});
  // MEAN of identical values is the value itself (also MAX and MIN, tessel's ops).
  for (ReduceOp op : {ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin}) {
    const auto same = reduce_non_distributed_value(op, x, cpu(0), 4, rt);
    ASSERT_TRUE(std::holds_alternative<Tensor>(same));
    EXPECT_TRUE(std::get<Tensor>(same).shares_storage_with(x));
  }
  EXPECT_TESSEL_ERROR(reduce_non_distributed_value(ReduceOp::kSum, x, cpu(0), 2, rt),
                      ErrorCode::kInvalidArgument,
                      "cannot be reduced with the given reduce op sum.");
  // One replica: copied to the destinations.
  const auto copied = reduce_non_distributed_value(ReduceOp::kSum, x, {cpu(1), cpu(0)}, 1, rt);
  ASSERT_TRUE(std::holds_alternative<Mirrored>(copied));
  testing::expect_mirrored(std::get<Mirrored>(copied), {cpu(1), cpu(0)}, {4, 5});
  EXPECT_TESSEL_ERROR(reduce_non_distributed_value(ReduceOp::kSum, x, "", 1, rt),
                      ErrorCode::kInvalidArgument, "destinations can not be empty");
}

}  // namespace
}  // namespace tessel
