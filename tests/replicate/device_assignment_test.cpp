// DeviceAssignment (seed 105, BR-105-03): TF's validations, the accessors, build().
#include <gtest/gtest.h>

#include <vector>

#include "tessel/mesh/topology.h"
#include "tessel/replicate/device_assignment.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

using CA = DeviceAssignment::CoreAssignment;

// 2 hosts x 2 devices: mesh [2, 2, 1, 1], device d of task t at [d, t, 0, 0].
Topology two_by_two() { return Topology::for_hosts(2, 2); }

TEST(Seed105, BR_105_03_ValidAssignmentMapsReplicaAndCoreToDevices) {
  DeviceAssignment da(two_by_two(), CA{{{0, 0, 0, 0}, {1, 0, 0, 0}}, {{0, 1, 0, 0}, {1, 1, 0, 0}}});
  EXPECT_EQ(da.num_replicas(), 2);
  EXPECT_EQ(da.num_cores_per_replica(), 2);
  EXPECT_EQ(da.coordinates(1, 0), (std::vector<int>{0, 1, 0, 0}));
  EXPECT_EQ(da.coordinates(), (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(da.task(1, 1), 1);
  EXPECT_EQ(da.tpu_ordinal(1, 1), 1);
  EXPECT_EQ(da.tpu_ordinal(0, 0), 0);
  EXPECT_EQ(da.device(1, 1), "/job:localhost/replica:0/task:1/device:CPU:1");
  EXPECT_EQ(da.device(0, 1, "worker"), "/job:worker/replica:0/task:0/device:CPU:1");
  // TF's tpu_device / host_device: job None by default, no replica part.
  EXPECT_EQ(da.host_device(1, 0), "/task:1/device:CPU:0");
  EXPECT_EQ(da.host_device(1, 0, "worker"), "/job:worker/task:1/device:CPU:0");
  EXPECT_EQ(da.tpu_device(1, 1), "/task:1/device:CPU:1");
  EXPECT_EQ(da.tpu_device(0, 1, "worker"), "/job:worker/task:0/device:CPU:1");
  EXPECT_EQ(da.lookup_replicas(0, 1), (std::vector<int>{0}));
  EXPECT_EQ(da.lookup_replicas(1, 0), (std::vector<int>{1}));
  EXPECT_EQ(da.core_assignment(),
            (std::vector<int>{0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0}));
  EXPECT_EQ(da.core_assignment_nested()[1][1], (std::vector<int>{1, 1, 0, 0}));
  EXPECT_EQ(DeviceAssignment::from_flat(two_by_two(), 2, 2, da.core_assignment()), da);
}

TEST(Seed105, BR_105_03_LookupReplicasListsEveryReplicaOfTheTaskSorted) {
  DeviceAssignment da(two_by_two(),
                      CA{{{1, 1, 0, 0}}, {{0, 0, 0, 0}}, {{1, 0, 0, 0}}, {{0, 1, 0, 0}}});
  EXPECT_EQ(da.lookup_replicas(0, 0), (std::vector<int>{1, 2}));
  EXPECT_EQ(da.lookup_replicas(1, 0), (std::vector<int>{0, 3}));
  EXPECT_TESSEL_ERROR(da.lookup_replicas(0, 1), ErrorCode::kInvalidArgument,
                      "Can not find any replica in task: 0 contains logical_core: 1 ");
  EXPECT_TESSEL_ERROR(da.lookup_replicas(5, 0), ErrorCode::kInvalidArgument,
                      "Can not find any replica in task: 5");
}

TEST(Seed105, BR_105_03_CoreAssignmentMustBeRank3) {
  EXPECT_TESSEL_ERROR(DeviceAssignment::from_array(two_by_two(), {2, 4}, std::vector<int>(8, 0)),
                      ErrorCode::kInvalidArgument,
                      "core_assignment must be a rank 3 numpy array, got shape [2, 4]");
  EXPECT_TESSEL_ERROR(DeviceAssignment(two_by_two(), CA{}), ErrorCode::kInvalidArgument,
                      "core_assignment must be a rank 3 numpy array, got shape [0]");
  EXPECT_TESSEL_ERROR(
      DeviceAssignment(two_by_two(), CA{{{0, 0, 0, 0}}, {{0, 1, 0, 0}, {1, 1, 0, 0}}}),
      ErrorCode::kInvalidArgument, "core_assignment must be a rank 3 numpy array, got a ragged");
}

TEST(Seed105, BR_105_03_MinorDimensionMustEqualTopologyRank) {
  EXPECT_TESSEL_ERROR(DeviceAssignment(two_by_two(), CA{{{0, 0, 0}}}),
                      ErrorCode::kInvalidArgument,
                      "minor dimension of core_assignment must have size equal to topology rank "
                      "(4), got shape [1, 1, 3]");
}

TEST(Seed105, BR_105_03_AtLeastOneReplicaAndCore) {
  EXPECT_TESSEL_ERROR(DeviceAssignment::from_array(two_by_two(), {0, 1, 4}, {}),
                      ErrorCode::kInvalidArgument, "at least one replica and one core");
  EXPECT_TESSEL_ERROR(DeviceAssignment::from_array(two_by_two(), {1, 0, 4}, {}),
                      ErrorCode::kInvalidArgument, "got shape [1, 0, 4]");
  EXPECT_TESSEL_ERROR(DeviceAssignment::from_array(two_by_two(), {1, 1, 4}, {0, 0}),
                      ErrorCode::kInvalidArgument, "needs 4 values, got 2");
}

TEST(Seed105, BR_105_03_CoordinatesMustLieInsideTheMesh) {
  EXPECT_TESSEL_ERROR(DeviceAssignment(two_by_two(), CA{{{2, 0, 0, 0}}}),
                      ErrorCode::kInvalidArgument,
                      "replica 0 logical core 0: coordinates [2, 0, 0, 0] lie outside the "
                      "topology mesh of shape [2, 2, 1, 1]");
  EXPECT_TESSEL_ERROR(DeviceAssignment(two_by_two(), CA{{{0, 0, 0, 0}}, {{0, -1, 0, 0}}}),
                      ErrorCode::kInvalidArgument, "replica 1 logical core 0: coordinates [0, -1");
}

TEST(Seed105, BR_105_03_CoordinatesMustNameAnExistingDevice) {
  // 1 task x 2 devices on a 2x2 mesh: points [0,1] and [1,1] are missing.
  Topology t({2, 2}, {{{0, 0}, {1, 0}}});
  EXPECT_TESSEL_ERROR(DeviceAssignment(t, CA{{{0, 0}}, {{1, 1}}}), ErrorCode::kInvalidArgument,
                      "replica 1 logical core 0: no device at coordinates [1, 1]");
  DeviceAssignment ok(t, CA{{{1, 0}}, {{0, 0}}});
  EXPECT_EQ(ok.tpu_ordinal(0), 1);
}

TEST(Seed105, BR_105_03_NoDeviceUsedTwice) {
  EXPECT_TESSEL_ERROR(
      DeviceAssignment(two_by_two(), CA{{{0, 0, 0, 0}, {1, 0, 0, 0}}, {{1, 0, 0, 0}, {0, 1, 0, 0}}}),
      ErrorCode::kInvalidArgument,
      "device at coordinates [1, 0, 0, 0] (task 0 device 1) is assigned twice: replica 0 "
      "logical core 1 and replica 1 logical core 0");
  EXPECT_TESSEL_ERROR(DeviceAssignment(two_by_two(), CA{{{0, 0, 0, 0}, {0, 0, 0, 0}}}),
                      ErrorCode::kInvalidArgument, "is assigned twice");
}

TEST(Seed105, BR_105_03_FlatAttributeLengthMustMatch) {
  EXPECT_TESSEL_ERROR(DeviceAssignment::from_flat(two_by_two(), 2, 1, {0, 0, 0, 0}),
                      ErrorCode::kInvalidArgument,
                      "device_assignment has 4 entries; num_replicas (2) * num_cores_per_replica "
                      "(1) * topology rank (4) = 8 expected");
  // The reference's example: 4 replicas x 1 core on a 2x2x1x1 mesh.
  const auto da = DeviceAssignment::from_flat(two_by_two(), 4, 1,
                                              {0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0});
  EXPECT_EQ(da.device(3), "/job:localhost/replica:0/task:1/device:CPU:1");
}

TEST(Seed105, BR_105_03_AccessorsRejectOutOfRangeIndices) {
  DeviceAssignment da(two_by_two(), CA{{{0, 0, 0, 0}}});
  EXPECT_TESSEL_ERROR(da.coordinates(1, 0), ErrorCode::kOutOfRange, "replica 1 out of range [0, 1)");
  EXPECT_TESSEL_ERROR(da.device(0, 1), ErrorCode::kOutOfRange, "logical_core 1 out of range [0, 1)");
  EXPECT_TESSEL_ERROR(da.tpu_ordinal(-1), ErrorCode::kOutOfRange, "replica -1");
}

TEST(Seed105, BR_105_03_ToStringShowsTheAssignment) {
  DeviceAssignment da(two_by_two(), CA{{{0, 0, 0, 0}}, {{1, 0, 0, 0}}});
  EXPECT_EQ(da.to_string(),
            "DeviceAssignment(num_replicas=2, num_cores_per_replica=1, "
            "core_assignment=[[[0,0,0,0]],[[1,0,0,0]]])");
}

// build(): TF's device_assignment() helper.
TEST(Seed105, BR_105_03_BuildDefaultsToOneReplicaAtTheOrigin) {
  const auto da = DeviceAssignment::build(two_by_two());
  EXPECT_EQ(da.num_replicas(), 1);
  EXPECT_EQ(da.num_cores_per_replica(), 1);
  EXPECT_EQ(da.coordinates(), (std::vector<int>{0, 0, 0, 0}));
}

TEST(Seed105, BR_105_03_BuildPlacesReplicasWithoutOverlap) {
  // TF: for mesh [2,2,1,1] and 4 replicas the replica grid is [2,2,1,1] (core dim 1 first,
  // then dims in increasing size), replica r at pos (r % 2, r / 2) in MESH order (full
  // replication in AUTO order follows the ring instead: DeviceOrder.*).
  const auto da = DeviceAssignment::build(two_by_two(), {}, {}, 4, DeviceOrderMode::kMesh);
  EXPECT_EQ(da.core_assignment(),
            (std::vector<int>{0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0}));
  // Two cores per replica along dim 0, each replica on one task.
  const auto two = DeviceAssignment::build(two_by_two(), {2, 1, 1, 1}, {}, 2);
  EXPECT_EQ(two.num_cores_per_replica(), 2);
  EXPECT_EQ(two.core_assignment_nested(),
            (CA{{{0, 0, 0, 0}, {1, 0, 0, 0}}, {{0, 1, 0, 0}, {1, 1, 0, 0}}}));
  EXPECT_EQ(two.lookup_replicas(1, 1), (std::vector<int>{1}));
  // Stride 2 along dim 0 on a [4,1,1,1] mesh: a 2-core block spans 0 and 2, the next starts at 1.
  const auto strided = DeviceAssignment::build(Topology::for_hosts(1, 4), {2, 1, 1, 1},
                                               {2, 1, 1, 1}, 2);
  EXPECT_EQ(strided.core_assignment_nested(),
            (CA{{{0, 0, 0, 0}, {2, 0, 0, 0}}, {{1, 0, 0, 0}, {3, 0, 0, 0}}}));
}

TEST(Seed105, BR_105_03_BuildValidatesShapeStrideAndFit) {
  const auto t = two_by_two();
  EXPECT_TESSEL_ERROR(DeviceAssignment::build(t, {1, 1}), ErrorCode::kInvalidArgument,
                      "computation_shape must have shape [4]; got [2]");
  EXPECT_TESSEL_ERROR(DeviceAssignment::build(t, {}, {1}), ErrorCode::kInvalidArgument,
                      "computation_stride must have shape [4]; got [1]");
  EXPECT_TESSEL_ERROR(DeviceAssignment::build(t, {0, 1, 1, 1}), ErrorCode::kInvalidArgument,
                      "computation_shape must be positive; got computation_shape=[0, 1, 1, 1]");
  EXPECT_TESSEL_ERROR(DeviceAssignment::build(t, {}, {1, 0, 1, 1}), ErrorCode::kInvalidArgument,
                      "computation_stride must be positive; got computation_stride=[1, 0, 1, 1]");
  EXPECT_TESSEL_ERROR(DeviceAssignment::build(t, {2, 1, 1, 1}, {2, 1, 1, 1}),
                      ErrorCode::kInvalidArgument,
                      "computation footprint [4, 1, 1, 1] does not fit in TPU topology shape "
                      "[2, 2, 1, 1]");
  EXPECT_TESSEL_ERROR(DeviceAssignment::build(t, {2, 1, 1, 1}, {}, 3),
                      ErrorCode::kInvalidArgument,
                      "requested 3 replicas but only 2 replicas with shape [2, 1, 1, 1] and "
                      "computation_stride [1, 1, 1, 1] fit in a TPU mesh of shape [2, 2, 1, 1]");
  EXPECT_TESSEL_ERROR(DeviceAssignment::build(t, {}, {}, 0), ErrorCode::kInvalidArgument,
                      "num_replicas must be >= 1; got 0");
}

TEST(Seed105, BR_105_03_BuildOnATopologyWithMissingDevicesUsesTaskOrder) {
  // 2 tasks x 1 device on a [2, 2] mesh; [0,1] and [1,0] missing.
  Topology t({2, 2}, {{{1, 1}}, {{0, 0}}});
  const auto da = DeviceAssignment::build(t, {}, {}, 2);
  EXPECT_EQ(da.core_assignment_nested(), (CA{{{1, 1}}, {{0, 0}}}));
  EXPECT_EQ(da.task(1), 1);
  EXPECT_TESSEL_ERROR(DeviceAssignment::build(t, {}, {}, 3), ErrorCode::kInvalidArgument,
                      "requested 3 replicas of 1 cores but the topology has only 2 devices");
  EXPECT_TESSEL_ERROR(DeviceAssignment::build(t, {1, 1}, {2, 1}, 1), ErrorCode::kInvalidArgument,
                      "a topology with missing devices needs computation_stride 1");
}

}  // namespace
}  // namespace tessel
