// Seed 70 (cross-device communication): one test per business rule (BR-70-01..05) and per row of
// the error table, on every implementation where the rule applies.
#include <gtest/gtest.h>

#include <memory>
#include <type_traits>

#include "distribute/distribute_test_util.h"
#include "runtime/runtime_test_util.h"

namespace tessel {
namespace {

using testing::cpu;
using testing::filled;
using testing::kBounded;
using testing::vec;

// One of each implementation over `rt`.
std::vector<std::unique_ptr<CrossDeviceOps>> all_ops(Runtime& rt) {
  std::vector<std::unique_ptr<CrossDeviceOps>> out;
  out.push_back(std::make_unique<ReductionToOneDevice>("", nullptr, rt));
  out.push_back(std::make_unique<NcclAllReduce>(1, rt));
  out.push_back(std::make_unique<HierarchicalCopyAllReduce>(1, rt));
  out.push_back(std::make_unique<CollectiveAllReduce>(std::vector<std::string>{cpu(0), cpu(1)}, 2,
                                                      CommunicationOptions{}, rt));
  return out;
}

TEST(Seed70, BR_70_01_EmptyDestinationsRejected) {
  Runtime rt({.num_cpu_devices = 2});
  const PerReplica v = filled(2, Shape{3});
  const PerReplica empty_value({}, {});
  for (auto& ops : all_ops(rt)) {
    for (const Destinations& d :
         {Destinations(""), Destinations(std::vector<std::string>{}), Destinations(empty_value)}) {
      EXPECT_TESSEL_ERROR(ops->reduce(ReduceOp::kSum, v, d, kBounded), ErrorCode::kInvalidArgument,
                          "destinations can not be empty");
      EXPECT_TESSEL_ERROR(ops->batch_reduce(ReduceOp::kSum, {{v, v}, {v, d}}, kBounded),
                          ErrorCode::kInvalidArgument, "destinations can not be empty");
      EXPECT_TESSEL_ERROR(ops->broadcast(vec({1}), d), ErrorCode::kInvalidArgument,
                          "destinations can not be empty");
      EXPECT_TESSEL_ERROR(ops->gather(v, d, 0, kBounded), ErrorCode::kInvalidArgument,
                          "destinations can not be empty");
    }
  }
}

TEST(Seed70, BR_70_02_DestinationsAreDistributedValuesTensorsOrDeviceStrings) {
  // The type rule is the constructor set: what TF rejects at run time does not compile here.
  static_assert(std::is_convertible_v<const char*, Destinations>);
  static_assert(std::is_convertible_v<std::string, Destinations>);
  static_assert(std::is_convertible_v<std::vector<std::string>, Destinations>);
  static_assert(std::is_convertible_v<PerReplica, Destinations>);
  static_assert(std::is_convertible_v<Mirrored, Destinations>);
  static_assert(!std::is_constructible_v<Destinations, int>);
  static_assert(!std::is_constructible_v<Destinations, double>);
  static_assert(!std::is_constructible_v<Destinations, std::nullptr_t>);
  static_assert(std::is_convertible_v<Tensor, Destinations>);  // the device holding it
  static_assert(!std::is_constructible_v<Destinations, IndexedSlices>);
  EXPECT_NE(kDestinationsTypeMessage.find("destinations must be one of a `DistributedValues` "
                                          "object, a tf.Variable object, or a device string."),
            std::string_view::npos);

  // Each accepted form names its devices.
  Runtime rt({.num_cpu_devices = 3});
  ReductionToOneDevice ops("", nullptr, rt);
  const PerReplica v = filled(2, Shape{2});
  testing::expect_mirrored(ops.reduce(ReduceOp::kSum, v, "/cpu:2", kBounded), {cpu(2)}, {3, 3});
  testing::expect_mirrored(ops.reduce(ReduceOp::kSum, v, std::string("/device:CPU:1"), kBounded),
                           {cpu(1)}, {3, 3});
  testing::expect_mirrored(ops.reduce(ReduceOp::kSum, v, {"/cpu:2", "/cpu:0"}, kBounded),
                           {cpu(2), cpu(0)}, {3, 3});
  testing::expect_mirrored(ops.reduce(ReduceOp::kSum, v, v, kBounded), {cpu(0), cpu(1)}, {3, 3});
  const Mirrored m({cpu(1)}, {vec({0, 0})});
  testing::expect_mirrored(ops.reduce(ReduceOp::kSum, v, m, kBounded), {cpu(1)}, {3, 3});
  // A tensor: the device whose memory holds it (TF's tensor.device); a host tensor is CPU:0.
  const Tensor on_2 = rt.device(2).allocate(Shape{2}, DType::kF32);
  EXPECT_EQ(Destinations(on_2).devices(), std::vector<std::string>{cpu(2)});
  testing::expect_mirrored(ops.reduce(ReduceOp::kSum, v, on_2, kBounded), {cpu(2)}, {3, 3});
  testing::expect_mirrored(ops.reduce(ReduceOp::kSum, v, vec({0, 0}), kBounded), {cpu(0)},
                           {3, 3});
  EXPECT_TESSEL_ERROR(ops.reduce(ReduceOp::kSum, v, Tensor(), kBounded),
                      ErrorCode::kInvalidArgument, "destinations can not be empty");
}

TEST(Seed70, BR_70_03_ReduceOpIsSumOrMean) {
  Runtime rt({.num_cpu_devices = 2});
  const PerReplica v = filled(2, Shape{2});  // 1 and 2
  const IndexedSlices s0(vec({1, 2}).reshape(Shape{1, 2}),
                         Tensor::from_vector<int64_t>({0}, Shape{1}), Shape{3, 2});
  const PerReplica sparse({cpu(0), cpu(1)}, {s0, s0});
  for (auto& ops : all_ops(rt)) {
    testing::expect_mirrored(ops->reduce(ReduceOp::kSum, v, v, kBounded), {cpu(0), cpu(1)}, {3, 3});
    testing::expect_mirrored(ops->reduce(ReduceOp::kMean, v, v, kBounded), {cpu(0), cpu(1)},
                             {1.5, 1.5});
    // tessel extensions for dense values.
    testing::expect_mirrored(ops->reduce(ReduceOp::kMax, v, v, kBounded), {cpu(0), cpu(1)}, {2, 2});
    testing::expect_mirrored(ops->reduce(ReduceOp::kMin, v, v, kBounded), {cpu(0), cpu(1)}, {1, 1});
    testing::expect_mirrored(ops->reduce(ReduceOp::kProd, v, v, kBounded), {cpu(0), cpu(1)},
                             {2, 2});
    // TF's rule holds for IndexedSlices.
    for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd}) {
      EXPECT_TESSEL_ERROR(ops->reduce(op, sparse, sparse, kBounded), ErrorCode::kInvalidArgument,
                          "`reduce_op` must be Reduce.SUM or Reduce.MEAN.");
    }
    EXPECT_EQ(ops->reduce(ReduceOp::kSum, sparse, sparse, kBounded).indexed_slices(1).num_slices(),
              2);
  }
}

TEST(Seed70, BR_70_04_GatherRejectsIndexedSlices) {
  Runtime rt({.num_cpu_devices = 2});
  const IndexedSlices s(vec({1, 2}).reshape(Shape{1, 2}),
                        Tensor::from_vector<int64_t>({0}, Shape{1}), Shape{3, 2});
  const PerReplica sparse({cpu(0), cpu(1)}, {s, s});
  const PerReplica one({cpu(0)}, {s});  // even where the single-replica shortcut would apply
  for (auto& ops : all_ops(rt)) {
    EXPECT_TESSEL_ERROR(ops->gather(sparse, sparse, 0, kBounded), ErrorCode::kUnimplemented,
                        "gather/all_gather does not support IndexedSlices");
    EXPECT_TESSEL_ERROR(ops->gather(one, one, 0, kBounded), ErrorCode::kUnimplemented,
                        "gather/all_gather does not support IndexedSlices");
  }
}

TEST(Seed70, BR_70_05_CallsComeFromTheControllerThread) {
  // Outside replicate()'s computation (tests/replicate/seed70_replica_context_test.cpp) every
  // call is cross-replica. From the controller (this thread, or any thread that is not a device
  // stream) the calls work ...
  Runtime rt({.num_cpu_devices = 2});
  NcclAllReduce ops(1, rt);
  const PerReplica v = filled(2, Shape{2});
  testing::expect_mirrored(ops.reduce(ReduceOp::kSum, v, v, kBounded), {cpu(0), cpu(1)}, {3, 3});
  std::thread other([&] {
    testing::expect_mirrored(ops.reduce(ReduceOp::kSum, v, v, kBounded), {cpu(0), cpu(1)}, {3, 3});
  });
  other.join();
  // ... and from a task on a device's stream (where a replica would run) they fail instead of
  // waiting for their own stream.
  rt.device(1).stream().enqueue("replica_fn", [&] { ops.reduce(ReduceOp::kSum, v, v, kBounded); });
  EXPECT_TESSEL_ERROR(rt.synchronize(testing::kWaitLimit), ErrorCode::kFailedPrecondition,
                      "reduce must be called from the controller (a cross-replica context)");
  rt.device(0).stream().enqueue("replica_fn", [&] { ops.broadcast(testing::vec({1}), v); });
  EXPECT_TESSEL_ERROR(rt.synchronize(testing::kWaitLimit), ErrorCode::kFailedPrecondition,
                      "broadcast must be called from the controller");
}

// The error table's rows, each with the code Python maps to the table's exception class
// (InvalidArgument -> ValueError, Unimplemented -> NotImplementedError).
TEST(Seed70, Error_EmptyDestinationsIsValueError) {
  Runtime rt({.num_cpu_devices = 2});
  NcclAllReduce ops(1, rt);
  EXPECT_TESSEL_ERROR(ops.reduce(ReduceOp::kSum, filled(2, Shape{1}), "", kBounded),
                      ErrorCode::kInvalidArgument, "destinations can not be empty");
}

TEST(Seed70, Error_InvalidDestinationTypeIsValueError) {
  // C++ rejects other types at compile time (BR_70_02); the text Python raises is TF's.
  EXPECT_EQ(kDestinationsTypeMessage,
            "destinations must be one of a `DistributedValues` object, a tf.Variable object, or "
            "a device string.");
  static_assert(!std::is_constructible_v<Destinations, int>);
}

TEST(Seed70, Error_GatherOfIndexedSlicesIsNotImplemented) {
  Runtime rt({.num_cpu_devices = 2});
  ReductionToOneDevice ops("", nullptr, rt);
  const IndexedSlices s(vec({1}).reshape(Shape{1, 1}), Tensor::from_vector<int64_t>({0}, Shape{1}),
                        Shape{1, 1});
  const PerReplica v({cpu(0), cpu(1)}, {s, s});
  EXPECT_TESSEL_ERROR(ops.gather(v, cpu(0), 0, kBounded), ErrorCode::kUnimplemented,
                      "gather/all_gather does not support IndexedSlices");
}

TEST(Seed70, Error_EmptyPerReplicaIsValueError) {
  Runtime rt({.num_cpu_devices = 2});
  const PerReplica empty({}, {});
  for (auto& ops : all_ops(rt)) {
    EXPECT_TESSEL_ERROR(ops->reduce(ReduceOp::kSum, empty, cpu(0), kBounded),
                        ErrorCode::kInvalidArgument, "`per_replica_value` must be non-empty");
    EXPECT_TESSEL_ERROR(ops->batch_reduce(ReduceOp::kMean, {{empty, cpu(0)}}, kBounded),
                        ErrorCode::kInvalidArgument, "`per_replica_value` must be non-empty");
    EXPECT_TESSEL_ERROR(ops->gather(empty, cpu(0), 0, kBounded), ErrorCode::kInvalidArgument,
                        "`per_replica_value` must be non-empty");
  }
}

TEST(Seed70, Error_UnimplementedHooksAreNotImplemented) {
  // A CrossDeviceOps that implements nothing: TF's base-class NotImplementedError texts.
  Runtime rt({.num_cpu_devices = 2});
  CrossDeviceOps base(rt);
  const PerReplica v = filled(2, Shape{2});
  EXPECT_TESSEL_ERROR(base.reduce(ReduceOp::kSum, v, v, kBounded), ErrorCode::kUnimplemented,
                      "_reduce method must be implemented in descendants.");
  EXPECT_TESSEL_ERROR(base.batch_reduce(ReduceOp::kSum, {{v, v}}, kBounded),
                      ErrorCode::kUnimplemented,
                      "batch_reduce_implementation method must be implemented in descendants.");
  EXPECT_TESSEL_ERROR(base.gather(v, v, 0, kBounded), ErrorCode::kUnimplemented,
                      "_gather method must be implemented in descendants.");
  // broadcast has a base implementation (simple_broadcast), as in TF.
  testing::expect_mirrored(base.broadcast(vec({4, 5}), v), {cpu(0), cpu(1)}, {4, 5});
}

TEST(Seed70, Flow_ShortcutThenImplementationThenMirrored) {
  // The processing flow: validate, single-replica shortcut (identity copy), else the
  // implementation, whose result is regrouped as Mirrored.
  Runtime rt({.num_cpu_devices = 2});
  ReductionToOneDevice ops("", nullptr, rt);
  const PerReplica one({cpu(0)}, {vec({6})});
  const Mirrored r = ops.reduce(ReduceOp::kMean, one, cpu(0), kBounded);
  EXPECT_EQ(ops.last_plan().path, "single_replica_shortcut");
  EXPECT_EQ(testing::floats(r.value(0)), std::vector<float>{6});  // no division by 1 emitted
  EXPECT_TRUE(std::holds_alternative<Tensor>(regroup(r)));        // TF returns the plain tensor
  const PerReplica two({cpu(0), cpu(1)}, {vec({6}), vec({2})});
  const Mirrored m = ops.reduce(ReduceOp::kMean, two, two, kBounded);
  EXPECT_EQ(ops.last_plan().path, "reduce_to_one_device");
  EXPECT_TRUE(std::holds_alternative<Mirrored>(regroup(m)));
  testing::expect_mirrored(m, {cpu(0), cpu(1)}, {4});  // (6 + 2) / 2
}

}  // namespace
}  // namespace tessel
