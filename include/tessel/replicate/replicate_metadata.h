// ReplicateMetadata: the attributes of a replicated computation (TF's TPUReplicateMetadata op,
// tensorflow/core/ops/tpu_replication_ops.cc), every attribute with TF's default.
//
//   ReplicateMetadata md;                 // num_replicas 0: valid metadata, cannot run
//   md.num_replicas = 4;
//   md.topology = Topology::for_hosts(2, 2).serialized();
//   md.validate_for_run();                // ok
//   md.step_marker() == StepMarkerLocation::kStepMarkAtEntry   (BR-105-04)
//   md.parsed_device_assignment()         // nullopt: none given (replicate() builds one)
//
// validate() checks, each failure Error kInvalidArgument with component "ReplicateMetadata"
// naming the attribute and its value:
//   num_replicas >= 0; num_cores_per_replica >= 1;
//   computation_shape non-empty: deprecated, "use num_cores_per_replica" (TF's replacement);
//   padding_map non-empty: deprecated, dynamic dimensions come from the replicated inputs'
//     (merged) shapes instead;
//   step_marker_location one of STEP_MARK_AT_ENTRY, STEP_MARK_AT_TOP_LEVEL_WHILE_LOOP,
//     STEP_MARK_NONE, STEP_MARK_AT_SECOND_LEVEL_WHILE_LOOP (TF: "Malformed step_marker_location");
//   host_compute_core entries "<cluster_name>:<core>" (TF's "Malformed host_compute_core entry
//     X should be <cluster_name>:<core_number>."), core in [0, num_cores_per_replica), one
//     entry per cluster;
//   topology, when non-empty, a TopologyProto that Topology::from_serialized accepts;
//   device_assignment, when non-empty, needs a topology, has num_replicas *
//     num_cores_per_replica * topology rank entries and passes DeviceAssignment's validation
//     (BR-105-03).
// The flags (use_tpu, allow_soft_placement, use_spmd_for_xla_partitioning,
// use_shardy_partitioner) and tpu_compile_options_proto take any value, as in TF.
// validate_for_run() adds num_replicas >= 1 (TF's _TPUReplicate bound).
//
// Thread safety: a plain value; concurrent reads are safe.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessel/mesh/topology.h"
#include "tessel/replicate/device_assignment.h"

namespace tessel {

// xla::DebugOptions::StepMarkerLocation, TF's numbering (not monotonic in the list order).
enum class StepMarkerLocation {
  kStepMarkAtEntry = 0,                // the default: a step marker at program entry
  kStepMarkAtTopLevelWhileLoop = 1,    // at each iteration of the top-level while loop
  kStepMarkNone = 2,                   // no step marker
  kStepMarkAtSecondLevelWhileLoop = 3, // at each iteration of the second-level while loops
};

// "STEP_MARK_AT_ENTRY", ... (TF's attribute values).
std::string_view step_marker_location_name(StepMarkerLocation location);
// The inverse; an unknown name: kInvalidArgument listing the allowed values.
StepMarkerLocation step_marker_location_from_name(std::string_view name);

struct ReplicateMetadata {
  static constexpr const char* kDefaultStepMarkerLocation = "STEP_MARK_AT_ENTRY";

  int num_replicas = 0;               // TF: required, >= 0 (>= 1 to run)
  int num_cores_per_replica = 1;
  std::string topology;               // serialized TopologyProto, "" = none
  bool use_tpu = true;                // false: run the computation without the accelerator path
  std::vector<int> device_assignment; // flattened [replica][core][mesh rank]; empty = default
  std::vector<int> computation_shape; // DEPRECATED (use num_cores_per_replica): must be empty
  std::vector<std::string> host_compute_core;  // "<outside_compilation_cluster>:<core>"
  std::vector<std::string> padding_map;        // DEPRECATED: must be empty
  std::string step_marker_location = kDefaultStepMarkerLocation;
  bool allow_soft_placement = false;
  bool use_spmd_for_xla_partitioning = false;
  bool use_shardy_partitioner = false;
  std::string tpu_compile_options_proto;  // opaque serialized compile options, "" = none

  // See the header comment. Returns normally when valid.
  void validate() const;
  // validate() and num_replicas >= 1.
  void validate_for_run() const;

  // step_marker_location parsed (kInvalidArgument as validate()).
  StepMarkerLocation step_marker() const;
  // The topology parsed; nullopt when the attribute is empty. Bad bytes: kInvalidArgument.
  std::optional<Topology> parsed_topology() const;
  // The device assignment built from topology + device_assignment; nullopt when
  // device_assignment is empty. Errors as validate().
  std::optional<DeviceAssignment> parsed_device_assignment() const;
  // host_compute_core parsed into (cluster, core) pairs, in order. Errors as validate().
  std::vector<std::pair<std::string, int>> parsed_host_compute_core() const;

  // "ReplicateMetadata(num_replicas=4, num_cores_per_replica=1, ...)" with every attribute.
  std::string to_string() const;

  friend bool operator==(const ReplicateMetadata&, const ReplicateMetadata&) = default;
};

std::ostream& operator<<(std::ostream& os, const ReplicateMetadata& metadata);

}  // namespace tessel
