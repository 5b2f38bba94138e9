// Topology: construction, TF's validation texts, the inverse maps and the TopologyProto form.
#include <gtest/gtest.h>

#include <vector>

#include "tessel/mesh/topology.h"
#include "tessel/runtime/runtime.h"
#include "testing/expect_error.h"
#include "testing/topology_bytes.h"

namespace tessel {
namespace {

using Coords = std::vector<std::vector<std::vector<int>>>;

using testing::put_packed;
using testing::put_varint;

std::string proto_bytes(std::vector<int> mesh_shape, int num_tasks, int per_task,
                        std::vector<int> coordinates) {
  return testing::topology_proto_bytes(mesh_shape, num_tasks, per_task, coordinates);
}

TEST(Topology, ForHostsIsTheRankFourUniformTopology) {
  const Topology t = Topology::for_hosts(2, 4);
  EXPECT_EQ(t.mesh_shape(), (std::vector<int>{4, 2, 1, 1}));
  EXPECT_EQ(t.mesh_rank(), 4);
  EXPECT_EQ(t.num_tasks(), 2);
  EXPECT_EQ(t.num_devices_per_task(), 4);
  EXPECT_EQ(t.num_devices(), 8);
  EXPECT_EQ(t.device_type(), "CPU");
  EXPECT_EQ(t.device_coordinates(0, 0), (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(t.device_coordinates(1, 3), (std::vector<int>{3, 1, 0, 0}));
  EXPECT_EQ(t.device_coordinates().size(), 8u * 4u);
  EXPECT_EQ(t.global_device_id(1, 3), 7);
  EXPECT_EQ(t.global_device_ids(1), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_TRUE(t.missing_devices().empty());
  EXPECT_EQ(t.to_string(),
            "Topology(mesh_shape=[4,2,1,1], num_tasks=2, num_devices_per_task=4, device_type=CPU)");
}

TEST(Topology, ForHostsNeedsPositiveCounts) {
  EXPECT_TESSEL_ERROR(Topology::for_hosts(0, 2), ErrorCode::kInvalidArgument, "num_tasks >= 1");
  EXPECT_TESSEL_ERROR(Topology::for_hosts(2, 0), ErrorCode::kInvalidArgument,
                      "devices_per_task >= 1");
}

TEST(Topology, FromRuntimeIsOneHostOfItsDevices) {
  Runtime rt({.num_cpu_devices = 3});
  const Topology t = rt.topology();
  EXPECT_EQ(t, Topology::for_hosts(1, 3));
  EXPECT_EQ(t.device_name(0, 2), rt.device(2).name());
}

TEST(Topology, EmptyTopologyHasNoHosts) {
  const Topology t;
  EXPECT_EQ(t.num_tasks(), 0);
  EXPECT_EQ(t.num_devices(), 0);
  EXPECT_EQ(t.missing_devices(), (std::vector<std::vector<int>>{{0, 0, 0, 0}}));
  EXPECT_EQ(Topology::from_serialized(t.serialized()), t);
}

TEST(Topology, SerializedRoundTripsExactly) {
  const std::vector<Topology> cases = {
      Topology::for_hosts(1, 1), Topology::for_hosts(4, 2), Topology::for_hosts(3, 5, "TPU"),
      Topology({2, 2}, Coords{{{0, 0}, {1, 1}}}, "GPU"),  // two points missing
      Topology()};
  for (const Topology& t : cases) {
    const Topology back = Topology::from_serialized(t.serialized());
    EXPECT_EQ(back, t) << t;
    EXPECT_EQ(back.serialized(), t.serialized());
    EXPECT_EQ(back.device_type(), t.device_type());
  }
}

TEST(Topology, ParsesTensorFlowBytes) {
  // A TF TopologyProto: fields 1-4, no device_type (reads as CPU), and field 5 (TF's hardware
  // feature message), which tessel skips as unknown.
  std::string bytes = proto_bytes({2, 2, 1, 2}, 2, 4,
                                  {0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 1,
                                   0, 1, 0, 0, 0, 1, 0, 1, 1, 1, 0, 0, 1, 1, 0, 1});
  bytes += std::string("\x2a\x02\x08\x01", 4);  // field 5, length 2: { field 1 = 1 }
  const Topology t = Topology::from_serialized(bytes);
  EXPECT_EQ(t.mesh_shape(), (std::vector<int>{2, 2, 1, 2}));
  EXPECT_EQ(t.num_tasks(), 2);
  EXPECT_EQ(t.num_devices_per_task(), 4);
  EXPECT_EQ(t.device_type(), "CPU");
  EXPECT_EQ(t.device_coordinates(1, 2), (std::vector<int>{1, 1, 0, 0}));
  EXPECT_EQ(t.task_ordinal_at_coordinates({1, 1, 0, 1}), 1);
  EXPECT_EQ(t.device_ordinal_at_coordinates({1, 1, 0, 1}), 3);
}

TEST(Topology, SerializedIsTensorFlowsWireFormatPlusDeviceType) {
  // Fields 1-4 exactly as TF writes them, then tessel's field 100 (TF skips it as unknown).
  std::string expected = proto_bytes({1, 2, 1, 1}, 2, 1, {0, 0, 0, 0, 0, 1, 0, 0});
  put_varint(expected, (100 << 3) | 2);
  put_varint(expected, 3);
  expected += "CPU";
  EXPECT_EQ(Topology::for_hosts(2, 1).serialized(), expected);
}

TEST(Topology, ConstructorFromArraysMatchesProtoForm) {
  const Topology a({2, 1, 1, 1}, Coords{{{0, 0, 0, 0}}, {{1, 0, 0, 0}}});
  EXPECT_EQ(a.num_tasks(), 2);
  EXPECT_EQ(a.num_devices_per_task(), 1);
  EXPECT_EQ(a, Topology::from_serialized(proto_bytes({2, 1, 1, 1}, 2, 1, {0, 0, 0, 0, 1, 0, 0, 0})));
}

TEST(Topology, ValidationUsesTensorFlowTexts) {
  EXPECT_TESSEL_ERROR(Topology::from_serialized(proto_bytes({}, 0, 0, {})),
                      ErrorCode::kInvalidArgument, "`mesh_shape` must be a vector");
  EXPECT_TESSEL_ERROR(Topology::from_serialized(proto_bytes({2, 0, 1, 1}, 0, 0, {})),
                      ErrorCode::kInvalidArgument, "with positive entries; got [2, 0, 1, 1]");
  EXPECT_TESSEL_ERROR(Topology::from_serialized(proto_bytes({1, 1, 1, 1}, -1, 0, {})),
                      ErrorCode::kInvalidArgument, "`num_tasks` must be >= 0; got -1");
  EXPECT_TESSEL_ERROR(Topology::from_serialized(proto_bytes({1, 1, 1, 1}, 1, -2, {})),
                      ErrorCode::kInvalidArgument, "`num_tpu_devices_per_task` must be >= 0");
  EXPECT_TESSEL_ERROR(Topology::from_serialized(proto_bytes({2, 1, 1, 1}, 1, 2, {0, 0, 0, 0})),
                      ErrorCode::kInvalidArgument,
                      "`device_coordinates` must have shape num_tasks (1) * "
                      "num_tpu_devices_per_task (2) * len(mesh_shape) (4); got shape 4");
  EXPECT_TESSEL_ERROR(Topology::from_serialized(proto_bytes({2, 1, 1, 1}, 1, 1, {0, -1, 0, 0})),
                      ErrorCode::kInvalidArgument, "`device_coordinates` must be >= 0");
}

TEST(Topology, StricterThanTensorFlowCoordinatesInsideMeshAndDistinct) {
  EXPECT_TESSEL_ERROR(Topology({2, 1}, Coords{{{0, 0}, {2, 0}}}), ErrorCode::kInvalidArgument,
                      "of task 0 device 1 lie outside mesh_shape [2, 1]");
  EXPECT_TESSEL_ERROR(Topology({2, 1}, Coords{{{1, 0}}, {{1, 0}}}), ErrorCode::kInvalidArgument,
                      "task 0 device 0 and task 1 device 0 both have coordinates [1, 0]");
}

TEST(Topology, ConstructorChecksArrayShape) {
  EXPECT_TESSEL_ERROR(Topology({2, 2}, Coords{{{0, 0}, {0, 1}}, {{1, 0}}}),
                      ErrorCode::kInvalidArgument, "task 1 has 1 devices but task 0 has 2");
  EXPECT_TESSEL_ERROR(Topology({2, 2}, Coords{{{0, 0, 0}}}), ErrorCode::kInvalidArgument,
                      "minor dimension of device_coordinates must have size equal to the mesh "
                      "rank (2), got 3");
  EXPECT_TESSEL_ERROR(Topology({2}, Coords{{{0}}}, "cpu"), ErrorCode::kInvalidArgument,
                      "device_type 'cpu' is not a device type");
}

TEST(Topology, GarbageBytesAreRejected) {
  EXPECT_TESSEL_ERROR(Topology::from_serialized("\xff\xff\xff"), ErrorCode::kInvalidArgument,
                      "3 bytes are not a TopologyProto");
}

TEST(Topology, InverseMapsAndMissingDevices) {
  // 2x2 mesh, one task with devices at (0,0) and (1,1).
  const Topology t({2, 2}, Coords{{{0, 0}, {1, 1}}});
  EXPECT_EQ(t.task_ordinal_at_coordinates({1, 1}), 0);
  EXPECT_EQ(t.device_ordinal_at_coordinates({1, 1}), 1);
  EXPECT_EQ(t.task_ordinal_at_coordinates({0, 1}), -1);
  EXPECT_EQ(t.device_ordinal_at_coordinates({1, 0}), -1);
  EXPECT_EQ(t.missing_devices(), (std::vector<std::vector<int>>{{0, 1}, {1, 0}}));
  EXPECT_EQ(t.device_name_at_coordinates({1, 1}, "worker"),
            "/job:worker/replica:0/task:0/device:CPU:1");
  EXPECT_TESSEL_ERROR(t.device_name_at_coordinates({0, 1}), ErrorCode::kNotFound,
                      "no device at coordinates [0, 1]");
  EXPECT_TESSEL_ERROR(t.task_ordinal_at_coordinates({2, 0}), ErrorCode::kOutOfRange,
                      "lie outside mesh_shape");
  EXPECT_TESSEL_ERROR(t.task_ordinal_at_coordinates({0}), ErrorCode::kInvalidArgument,
                      "the mesh rank is 2");
}

TEST(Topology, IndexesOutOfRangeAreErrors) {
  const Topology t = Topology::for_hosts(2, 2);
  EXPECT_TESSEL_ERROR(t.device_coordinates(2, 0), ErrorCode::kOutOfRange,
                      "task 2 device 0 is outside the topology (2 tasks x 2 devices)");
  EXPECT_TESSEL_ERROR(t.global_device_id(0, -1), ErrorCode::kOutOfRange, "outside the topology");
  EXPECT_TESSEL_ERROR(t.global_device_ids(5), ErrorCode::kOutOfRange, "task 5");
  EXPECT_TESSEL_ERROR(t.device_name(0, 2), ErrorCode::kOutOfRange, "outside the topology");
}

TEST(Topology, DeviceNamesFollowTasksAndType) {
  const Topology t = Topology::for_hosts(2, 2, "TPU");
  EXPECT_EQ(t.device_name(1, 0, "worker"), "/job:worker/replica:0/task:1/device:TPU:0");
  EXPECT_EQ(t.device_name_at_coordinates({1, 1, 0, 0}), "/job:localhost/replica:0/task:1/device:TPU:1");
}

}  // namespace
}  // namespace tessel
