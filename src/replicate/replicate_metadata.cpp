#include "tessel/replicate/replicate_metadata.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <charconv>
#include <set>

#include "core/errors.h"

namespace tessel {
namespace {

constexpr const char* kComponent = "ReplicateMetadata";

constexpr std::array<std::pair<StepMarkerLocation, std::string_view>, 4> kStepMarkers{{
    {StepMarkerLocation::kStepMarkAtEntry, "STEP_MARK_AT_ENTRY"},
    {StepMarkerLocation::kStepMarkAtTopLevelWhileLoop, "STEP_MARK_AT_TOP_LEVEL_WHILE_LOOP"},
    {StepMarkerLocation::kStepMarkNone, "STEP_MARK_NONE"},
    {StepMarkerLocation::kStepMarkAtSecondLevelWhileLoop, "STEP_MARK_AT_SECOND_LEVEL_WHILE_LOOP"},
}};

std::string quoted_list(const std::vector<std::string>& v) {
  std::vector<std::string> q;
  for (const auto& s : v) q.push_back(fmt::format("\"{}\"", s));
  return fmt::format("[{}]", fmt::join(q, ", "));
}

}  // namespace

std::string_view step_marker_location_name(StepMarkerLocation location) {
  for (const auto& [value, name] : kStepMarkers) {
    if (value == location) return name;
  }
  return "UNKNOWN";
}

StepMarkerLocation step_marker_location_from_name(std::string_view name) {
  for (const auto& [value, n] : kStepMarkers) {
    if (n == name) return value;
  }
  detail::throw_invalid(kComponent,
                        "Malformed step_marker_location: \"{}\"; allowed: STEP_MARK_AT_ENTRY "
                        "(the default), STEP_MARK_AT_TOP_LEVEL_WHILE_LOOP, STEP_MARK_NONE, "
                        "STEP_MARK_AT_SECOND_LEVEL_WHILE_LOOP",
                        name);
}

StepMarkerLocation ReplicateMetadata::step_marker() const {
  return step_marker_location_from_name(step_marker_location);
}

std::optional<Topology> ReplicateMetadata::parsed_topology() const {
  if (topology.empty()) return std::nullopt;
  try {
    return Topology::from_serialized(topology);
  } catch (const Error& e) {
    detail::throw_invalid(kComponent, "topology ({} bytes) is not a valid TopologyProto: {}",
                          topology.size(), e.what());
  }
}

std::optional<DeviceAssignment> ReplicateMetadata::parsed_device_assignment() const {
  if (device_assignment.empty()) return std::nullopt;
  auto topo = parsed_topology();
  if (!topo) {
    detail::throw_invalid(kComponent,
                          "device_assignment [{}] is given but topology is empty: the "
                          "coordinates need the topology they refer to",
                          fmt::join(device_assignment, ", "));
  }
  const int64_t rank = topo->mesh_rank();
  const int64_t expected = int64_t{num_replicas} * num_cores_per_replica * rank;
  if (static_cast<int64_t>(device_assignment.size()) != expected) {
    detail::throw_invalid(kComponent,
                          "device_assignment has {} entries; num_replicas ({}) * "
                          "num_cores_per_replica ({}) * topology rank ({}) = {} expected",
                          device_assignment.size(), num_replicas, num_cores_per_replica, rank,
                          expected);
  }
  try {
    return DeviceAssignment::from_flat(std::move(*topo), num_replicas, num_cores_per_replica,
                                       device_assignment);
  } catch (const Error& e) {
    detail::throw_invalid(kComponent, "device_assignment does not fit the topology: {}",
                          e.message());
  }
}

std::vector<std::pair<std::string, int>> ReplicateMetadata::parsed_host_compute_core() const {
  std::vector<std::pair<std::string, int>> out;
  std::set<std::string> seen;
  for (const auto& entry : host_compute_core) {
    const auto colon = entry.rfind(':');
    int core = -1;
    bool ok = colon != std::string::npos && colon > 0 && colon + 1 < entry.size();
    if (ok) {
      const char* first = entry.data() + colon + 1;
      const char* last = entry.data() + entry.size();
      const auto [ptr, ec] = std::from_chars(first, last, core);
      ok = ec == std::errc() && ptr == last;
    }
    if (!ok) {
      detail::throw_invalid(kComponent,
                            "Malformed host_compute_core entry {} should be "
                            "<cluster_name>:<core_number>.",
                            entry);
    }
    const std::string cluster = entry.substr(0, colon);
    if (core < 0 || core >= num_cores_per_replica) {
      detail::throw_invalid(kComponent,
                            "host_compute_core entry {}: core {} out of range [0, {}) "
                            "(num_cores_per_replica)",
                            entry, core, num_cores_per_replica);
    }
    if (!seen.insert(cluster).second) {
      detail::throw_invalid(kComponent,
                            "host_compute_core has two entries for cluster \"{}\": {}", cluster,
                            quoted_list(host_compute_core));
    }
    out.emplace_back(cluster, core);
  }
  return out;
}

void ReplicateMetadata::validate() const {
  if (num_replicas < 0) {
    detail::throw_invalid(kComponent, "num_replicas must be >= 0; got {}", num_replicas);
  }
  if (num_cores_per_replica < 1) {
    detail::throw_invalid(kComponent, "num_cores_per_replica must be >= 1; got {}",
                          num_cores_per_replica);
  }
  if (!computation_shape.empty()) {
    detail::throw_invalid(kComponent,
                          "computation_shape [{}] is deprecated and no longer supported; use "
                          "num_cores_per_replica (and device_assignment for the placement)",
                          fmt::join(computation_shape, ", "));
  }
  if (!padding_map.empty()) {
    detail::throw_invalid(kComponent,
                          "padding_map ({} entries) is deprecated and no longer supported; "
                          "dynamic dimensions are given by the replicated inputs' shapes "
                          "(unknown dimensions, merged across replicas)",
                          padding_map.size());
  }
  (void)step_marker();
  (void)parsed_host_compute_core();
  (void)parsed_topology();
  (void)parsed_device_assignment();
}

void ReplicateMetadata::validate_for_run() const {
  validate();
  if (num_replicas < 1) {
    detail::throw_invalid(kComponent, "num_replicas must be >= 1 to run a replicated computation; "
                          "got {}", num_replicas);
  }
}

std::string ReplicateMetadata::to_string() const {
  return fmt::format(
      "ReplicateMetadata(num_replicas={}, num_cores_per_replica={}, topology=<{} bytes>, "
      "use_tpu={}, device_assignment=[{}], computation_shape=[{}], host_compute_core={}, "
      "padding_map=<{} entries>, step_marker_location={}, allow_soft_placement={}, "
      "use_spmd_for_xla_partitioning={}, use_shardy_partitioner={}, "
      "tpu_compile_options_proto=<{} bytes>)",
      num_replicas, num_cores_per_replica, topology.size(), use_tpu,
      fmt::join(device_assignment, ","), fmt::join(computation_shape, ","),
      quoted_list(host_compute_core), padding_map.size(), step_marker_location,
      allow_soft_placement, use_spmd_for_xla_partitioning, use_shardy_partitioner,
      tpu_compile_options_proto.size());
}

std::ostream& operator<<(std::ostream& os, const ReplicateMetadata& metadata) {
  return os << metadata.to_string();
}

}  // namespace tessel
