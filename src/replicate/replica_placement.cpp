// Internal: device placement of replicas (see replica_placement.h).
#include "replicate/replica_placement.h"

#include <fmt/format.h>

#include <cstdint>
#include <numeric>
#include <string>

#include "core/errors.h"
#include "core/inert_attribute.h"
#include "tessel/mesh/topology.h"
#include "tessel/replicate/device_assignment.h"

namespace tessel::detail {
namespace {

constexpr const char* kComponent = "replicate";

// DeviceAssignment::build over the metadata's topology (else the runtime's), each replica a
// block of num_cores_per_replica devices along the topology's first dimension (a host's
// devices, in for_hosts / Runtime::topology() topologies).
DeviceAssignment default_assignment(const ReplicateMetadata& md, const Topology& topology) {
  std::vector<int> computation_shape(static_cast<size_t>(topology.mesh_rank()), 1);
  computation_shape[0] = md.num_cores_per_replica;
  try {
    return DeviceAssignment::build(topology, computation_shape, {}, md.num_replicas);
  } catch (const Error& e) {
    throw_error(e.code(), kComponent,
                "no default device assignment of {} replicas x {} cores per replica on {}: {}",
                md.num_replicas, md.num_cores_per_replica, topology.to_string(), e.what());
  }
}

// The metadata TF's compiler reads and tessel has no counterpart for: kept, and said so once.
void warn_inert_metadata(const ReplicateMetadata& md) {
  constexpr std::string_view kMetadata = "ReplicateMetadata";
  if (md.step_marker_location != ReplicateMetadata::kDefaultStepMarkerLocation) {
    warn_inert_attribute(kMetadata, "step_marker_location", md.step_marker_location,
                         "tessel compiles no XLA program to mark steps in; a replicate() call "
                         "is one step");
  }
  if (md.use_shardy_partitioner) {
    warn_inert_attribute(kMetadata, "use_shardy_partitioner", "true",
                         "tessel partitions by its ops' own sharding rules, with neither "
                         "GSPMD nor Shardy");
  }
  if (!md.tpu_compile_options_proto.empty()) {
    warn_inert_attribute(kMetadata, "tpu_compile_options_proto",
                         fmt::format("<{} bytes>", md.tpu_compile_options_proto.size()),
                         "tessel has no XLA compiler to pass options to");
  }
  if (!md.host_compute_core.empty()) {
    warn_inert_attribute(kMetadata, "host_compute_core", md.host_compute_core.front(),
                         "tessel has no outside compilation: host code in the computation runs "
                         "on the replica's controller thread");
  }
}

}  // namespace

std::vector<std::vector<Device*>> assign_replica_devices(const ReplicateMetadata& md,
                                                         Runtime& runtime) {
  md.validate_for_run();
  warn_inert_metadata(md);
  const int replicas = md.num_replicas;
  const int cores = md.num_cores_per_replica;
  if (int64_t{replicas} * cores > runtime.num_devices()) {
    throw_invalid(kComponent,
                  "{} replicas x {} cores per replica need {} devices; the runtime has {}",
                  replicas, cores, int64_t{replicas} * cores, runtime.num_devices());
  }
  if (cores > 1 && !md.use_spmd_for_xla_partitioning) {
    throw_error(ErrorCode::kUnimplemented, kComponent,
                "num_cores_per_replica = {} without use_spmd_for_xla_partitioning: TF's model "
                "parallelism without SPMD places each op on a core by hand, which tessel has no "
                "API for; set use_spmd_for_xla_partitioning to run the computation as DTensor "
                "SPMD over each replica's {} cores",
                cores, cores);
  }
  // The runtime's own topology names its task 0; a given topology must name this runtime's task.
  const bool own_topology = md.topology.empty();
  const Topology topology = own_topology ? runtime.topology() : *md.parsed_topology();
  const DeviceAssignment assignment = md.device_assignment.empty()
                                          ? default_assignment(md, topology)
                                          : *md.parsed_device_assignment();
  const int task = own_topology ? 0 : runtime.options().task;
  std::vector<std::vector<Device*>> devices(static_cast<size_t>(replicas));
  for (int r = 0; r < replicas; ++r) {
    for (int c = 0; c < cores; ++c) {
      const int t = assignment.task(r, c);
      const int d = assignment.tpu_ordinal(r, c);
      if (topology.device_type() != "CPU" || t != task || d >= runtime.num_devices()) {
        throw_invalid(kComponent,
                      "replica {} logical core {} is assigned to {}, which is not a device of this "
                      "runtime (its CPU devices 0..{} of task {})",
                      r, c, assignment.device(r, c, runtime.options().job),
                      runtime.num_devices() - 1, runtime.options().task);
      }
      devices[static_cast<size_t>(r)].push_back(&runtime.device(d));
    }
  }
  return devices;
}

Mesh replica_core_mesh(int replica, const std::vector<Device*>& cores) {
  std::vector<std::string> names;
  for (const Device* d : cores) names.push_back(d->name());
  std::vector<int64_t> ids(cores.size());
  std::iota(ids.begin(), ids.end(), 0);
  const auto n = static_cast<int64_t>(cores.size());
  return Mesh({"core"}, {n}, ids, ids, names, fmt::format("replica_{}", replica), names);
}

}  // namespace tessel::detail
