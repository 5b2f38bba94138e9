// Internal: device placement of replicas (see replica_placement.h).
#include "replicate/replica_placement.h"

#include <fmt/format.h>

#include <cstdint>
#include <numeric>
#include <string>

#include "comm/group_service.h"
#include "core/errors.h"
#include "core/inert_attribute.h"
#include "tessel/core/device_name.h"
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

bool ReplicaPlacement::spans_clients() const {
  for (size_t r = 0; r < devices.size(); ++r) {
    if (!is_local(static_cast<int>(r))) return true;
  }
  return false;
}

ReplicaPlacement place_replicas(const ReplicateMetadata& md, Runtime& runtime) {
  md.validate_for_run();
  warn_inert_metadata(md);
  const int replicas = md.num_replicas;
  const int cores = md.num_cores_per_replica;
  const int clients = GroupService::of(runtime)->num_clients();
  const int my_task = runtime.options().task;
  if (int64_t{replicas} * cores > int64_t{clients} * runtime.num_devices()) {
    throw_invalid(kComponent,
                  "{} replicas x {} cores per replica need {} devices; the runtime has {}{}",
                  replicas, cores, int64_t{replicas} * cores, runtime.num_devices(),
                  clients > 1 ? fmt::format(" on each of {} clients ({} in all)", clients,
                                            int64_t{clients} * runtime.num_devices())
                              : "");
  }
  if (cores > 1 && !md.use_spmd_for_xla_partitioning) {
    throw_error(ErrorCode::kUnimplemented, kComponent,
                "num_cores_per_replica = {} without use_spmd_for_xla_partitioning: TF's model "
                "parallelism without SPMD places each op on a core by hand, which tessel has no "
                "API for; set use_spmd_for_xla_partitioning to run the computation as DTensor "
                "SPMD over each replica's {} cores",
                cores, cores);
  }
  // The runtime's own topology names its task 0 (one client); the job's topology, and a given
  // topology, name each client by its task.
  const bool own_topology = md.topology.empty();
  const Topology topology = !own_topology ? *md.parsed_topology()
                            : clients > 1 ? Topology::for_hosts(clients, runtime.num_devices())
                                          : runtime.topology();
  const DeviceAssignment assignment = md.device_assignment.empty()
                                          ? default_assignment(md, topology)
                                          : *md.parsed_device_assignment();
  const int task = own_topology && clients == 1 ? 0 : my_task;
  const std::string& job = runtime.options().job;
  ReplicaPlacement placement;
  placement.num_clients = clients;
  placement.devices.resize(static_cast<size_t>(replicas));
  placement.names.resize(static_cast<size_t>(replicas));
  for (int r = 0; r < replicas; ++r) {
    for (int c = 0; c < cores; ++c) {
      const int t = assignment.task(r, c);
      const int d = assignment.tpu_ordinal(r, c);
      const bool here = t == task;
      if (topology.device_type() != "CPU" || d >= runtime.num_devices() ||
          (clients == 1 && !here) || t >= clients) {
        if (clients == 1) {
          throw_invalid(kComponent,
                        "replica {} logical core {} is assigned to {}, which is not a device of "
                        "this runtime (its CPU devices 0..{} of task {})",
                        r, c, assignment.device(r, c, job), runtime.num_devices() - 1, my_task);
        }
        throw_invalid(kComponent,
                      "replica {} logical core {} is assigned to {}, which is not a device of "
                      "this job ({} clients, tasks 0..{}, each with CPU devices 0..{})",
                      r, c, assignment.device(r, c, job), clients, clients - 1,
                      runtime.num_devices() - 1);
      }
      const int owner = here ? my_task : t;
      if (c == 0) {
        placement.owner.push_back(owner);
      } else if (placement.owner.back() != owner) {
        throw_error(ErrorCode::kUnimplemented, kComponent,
                    "replica {} has logical core 0 on task {} and logical core {} on task {}: the "
                    "cores of one replica must be devices of one client (process)",
                    r, placement.owner.back(), c, owner);
      }
      auto& devices = placement.devices[static_cast<size_t>(r)];
      devices.push_back(here ? &runtime.device(d) : nullptr);
      placement.names[static_cast<size_t>(r)].push_back(
          here ? devices.back()->name()
               : DeviceName::make(job, runtime.options().replica, t, "CPU", d).to_string());
    }
  }
  return placement;
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
