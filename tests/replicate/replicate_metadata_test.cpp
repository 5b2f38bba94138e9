// ReplicateMetadata (seed 105): TF's TPUReplicateMetadata attributes, defaults and validation.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tessel/mesh/topology.h"
#include "tessel/replicate/replicate_metadata.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

TEST(Seed105, MetadataDefaultsAreTFs) {
  const ReplicateMetadata md;
  EXPECT_EQ(md.num_replicas, 0);
  EXPECT_EQ(md.num_cores_per_replica, 1);
  EXPECT_EQ(md.topology, "");
  EXPECT_TRUE(md.use_tpu);
  EXPECT_TRUE(md.device_assignment.empty());
  EXPECT_TRUE(md.computation_shape.empty());
  EXPECT_TRUE(md.host_compute_core.empty());
  EXPECT_TRUE(md.padding_map.empty());
  EXPECT_EQ(md.step_marker_location, "STEP_MARK_AT_ENTRY");
  EXPECT_FALSE(md.allow_soft_placement);
  EXPECT_FALSE(md.use_spmd_for_xla_partitioning);
  EXPECT_FALSE(md.use_shardy_partitioner);
  EXPECT_EQ(md.tpu_compile_options_proto, "");
  EXPECT_NO_THROW(md.validate());
  EXPECT_FALSE(md.parsed_topology().has_value());
  EXPECT_FALSE(md.parsed_device_assignment().has_value());
}

TEST(Seed105, MetadataNumReplicasAtLeastZeroAndAtLeastOneToRun) {
  ReplicateMetadata md;
  EXPECT_NO_THROW(md.validate());
  EXPECT_TESSEL_ERROR(md.validate_for_run(), ErrorCode::kInvalidArgument,
                      "ReplicateMetadata: num_replicas must be >= 1 to run a replicated "
                      "computation; got 0");
  md.num_replicas = -1;
  EXPECT_TESSEL_ERROR(md.validate(), ErrorCode::kInvalidArgument,
                      "num_replicas must be >= 0; got -1");
  md.num_replicas = 3;
  EXPECT_NO_THROW(md.validate_for_run());
}

TEST(Seed105, MetadataNumCoresPerReplicaPositive) {
  ReplicateMetadata md;
  md.num_cores_per_replica = 0;
  EXPECT_TESSEL_ERROR(md.validate(), ErrorCode::kInvalidArgument,
                      "num_cores_per_replica must be >= 1; got 0");
}

TEST(Seed105, MetadataComputationShapeDeprecatedUseNumCoresPerReplica) {
  ReplicateMetadata md;
  md.computation_shape = {1, 1, 1, 2};
  EXPECT_TESSEL_ERROR(md.validate(), ErrorCode::kInvalidArgument,
                      "computation_shape [1, 1, 1, 2] is deprecated and no longer supported; use "
                      "num_cores_per_replica");
}

TEST(Seed105, MetadataPaddingMapDeprecated) {
  ReplicateMetadata md;
  md.padding_map = {"x"};
  EXPECT_TESSEL_ERROR(md.validate(), ErrorCode::kInvalidArgument,
                      "padding_map (1 entries) is deprecated and no longer supported; dynamic "
                      "dimensions are given by the replicated inputs' shapes");
}

TEST(Seed105, BR_105_04_StepMarkerDefaultIsAtEntry) {
  const ReplicateMetadata md;
  EXPECT_EQ(md.step_marker(), StepMarkerLocation::kStepMarkAtEntry);
  EXPECT_EQ(static_cast<int>(StepMarkerLocation::kStepMarkAtEntry), 0);
}

TEST(Seed105, BR_105_04_StepMarkerAllowedValuesWithTFsNumbering) {
  const std::vector<std::pair<std::string, int>> values{
      {"STEP_MARK_AT_ENTRY", 0},
      {"STEP_MARK_AT_TOP_LEVEL_WHILE_LOOP", 1},
      {"STEP_MARK_NONE", 2},
      {"STEP_MARK_AT_SECOND_LEVEL_WHILE_LOOP", 3}};
  for (const auto& [name, number] : values) {
    ReplicateMetadata md;
    md.step_marker_location = name;
    EXPECT_NO_THROW(md.validate()) << name;
    EXPECT_EQ(static_cast<int>(md.step_marker()), number);
    EXPECT_EQ(step_marker_location_name(md.step_marker()), name);
  }
}

TEST(Seed105, BR_105_04_StepMarkerUnknownValueRejected) {
  ReplicateMetadata md;
  md.step_marker_location = "STEP_MARK_AT_EXIT";
  EXPECT_TESSEL_ERROR(md.validate(), ErrorCode::kInvalidArgument,
                      "Malformed step_marker_location: \"STEP_MARK_AT_EXIT\"; allowed: "
                      "STEP_MARK_AT_ENTRY (the default)");
  EXPECT_TESSEL_ERROR(step_marker_location_from_name("step_mark_none"),
                      ErrorCode::kInvalidArgument, "Malformed step_marker_location");
}

TEST(Seed105, MetadataHostComputeCoreEntries) {
  ReplicateMetadata md;
  md.num_cores_per_replica = 2;
  md.host_compute_core = {"cluster_a:1", "b:c:0"};
  EXPECT_NO_THROW(md.validate());
  const auto parsed = md.parsed_host_compute_core();
  ASSERT_EQ(parsed.size(), 2u);
  EXPECT_EQ(parsed[0], (std::pair<std::string, int>{"cluster_a", 1}));
  EXPECT_EQ(parsed[1], (std::pair<std::string, int>{"b:c", 0}));
  for (const std::string bad : {"nocolon", ":1", "a:", "a:x", "a:1x"}) {
    md.host_compute_core = {bad};
    EXPECT_TESSEL_ERROR(md.validate(), ErrorCode::kInvalidArgument,
                        "Malformed host_compute_core entry " + bad +
                            " should be <cluster_name>:<core_number>.");
  }
  md.host_compute_core = {"a:2"};
  EXPECT_TESSEL_ERROR(md.validate(), ErrorCode::kInvalidArgument,
                      "host_compute_core entry a:2: core 2 out of range [0, 2)");
  md.host_compute_core = {"a:0", "a:1"};
  EXPECT_TESSEL_ERROR(md.validate(), ErrorCode::kInvalidArgument,
                      "host_compute_core has two entries for cluster \"a\"");
}

TEST(Seed105, MetadataTopologyMustParse) {
  ReplicateMetadata md;
  md.topology = Topology::for_hosts(2, 2).serialized();
  EXPECT_EQ(md.parsed_topology(), Topology::for_hosts(2, 2));
  md.topology = std::string("\xff\xff\xff", 3);
  EXPECT_TESSEL_ERROR(md.validate(), ErrorCode::kInvalidArgument,
                      "topology (3 bytes) is not a valid TopologyProto");
}

TEST(Seed105, BR_105_03_MetadataDeviceAssignmentMatchesTopology) {
  ReplicateMetadata md;
  md.num_replicas = 4;
  md.topology = Topology::for_hosts(2, 2).serialized();
  md.device_assignment = {0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0};
  EXPECT_NO_THROW(md.validate_for_run());
  const auto da = md.parsed_device_assignment();
  ASSERT_TRUE(da.has_value());
  EXPECT_EQ(da->num_replicas(), 4);
  EXPECT_EQ(da->device(2), "/job:localhost/replica:0/task:1/device:CPU:0");
}

TEST(Seed105, BR_105_03_MetadataDeviceAssignmentErrors) {
  ReplicateMetadata md;
  md.num_replicas = 2;
  md.device_assignment = {0, 0, 0, 0, 1, 0, 0, 0};
  EXPECT_TESSEL_ERROR(md.validate(), ErrorCode::kInvalidArgument,
                      "device_assignment [0, 0, 0, 0, 1, 0, 0, 0] is given but topology is empty");
  md.topology = Topology::for_hosts(2, 2).serialized();
  md.num_cores_per_replica = 2;
  EXPECT_TESSEL_ERROR(md.validate(), ErrorCode::kInvalidArgument,
                      "device_assignment has 8 entries; num_replicas (2) * num_cores_per_replica "
                      "(2) * topology rank (4) = 16 expected");
  md.num_cores_per_replica = 1;
  md.device_assignment = {0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_TESSEL_ERROR(md.validate(), ErrorCode::kInvalidArgument,
                      "device_assignment does not fit the topology: device at coordinates "
                      "[0, 0, 0, 0] (task 0 device 0) is assigned twice");
  md.device_assignment = {0, 0, 0, 0, 0, 2, 0, 0};
  EXPECT_TESSEL_ERROR(md.validate(), ErrorCode::kInvalidArgument, "lie outside the topology mesh");
}

TEST(Seed105, MetadataFlagsAndCompileOptionsAreKept) {
  ReplicateMetadata md;
  md.num_replicas = 1;
  md.use_tpu = false;
  md.allow_soft_placement = true;
  md.use_spmd_for_xla_partitioning = true;
  md.use_shardy_partitioner = true;
  md.tpu_compile_options_proto = std::string("\x08\x01", 2);
  EXPECT_NO_THROW(md.validate_for_run());
  ReplicateMetadata copy = md;
  EXPECT_EQ(copy, md);
  copy.use_shardy_partitioner = false;
  EXPECT_NE(copy, md);
  EXPECT_EQ(md.to_string(),
            "ReplicateMetadata(num_replicas=1, num_cores_per_replica=1, topology=<0 bytes>, "
            "use_tpu=false, device_assignment=[], computation_shape=[], host_compute_core=[], "
            "padding_map=<0 entries>, step_marker_location=STEP_MARK_AT_ENTRY, "
            "allow_soft_placement=true, use_spmd_for_xla_partitioning=true, "
            "use_shardy_partitioner=true, tpu_compile_options_proto=<2 bytes>)");
}

}  // namespace
}  // namespace tessel
