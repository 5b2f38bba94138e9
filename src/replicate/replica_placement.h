// Internal: which runtime device runs each (replica, logical core) of a replicated computation,
// and the mesh of a replica's cores (see replicate.h, "Placement").
#pragma once

#include <string>
#include <vector>

#include "tessel/mesh/mesh.h"
#include "tessel/replicate/replicate_metadata.h"
#include "tessel/runtime/device.h"
#include "tessel/runtime/runtime.h"

namespace tessel::detail {

// Where the replicas of a call run. With one client, every replica on this runtime's devices.
// When the program runs as several clients (processes under mpirun, or the clients of a set
// cluster: the runtime's GroupService::num_clients() > 1), the replicas are placed over the
// whole job: the topology (metadata.topology, else Topology::for_hosts(clients, this runtime's
// device count): every client has as many devices as this one, the SPMD assumption) names a
// task per client, and a replica on another task runs in that client.
struct ReplicaPlacement {
  std::vector<std::vector<Device*>> devices;     // [replica][core]; null: another client's
  std::vector<std::vector<std::string>> names;   // [replica][core]: the device's full name
  std::vector<int> owner;                        // [replica]: the client (task) running it
  int num_clients = 1;

  bool is_local(int replica) const { return devices[static_cast<size_t>(replica)][0] != nullptr; }
  // Some replica runs in another client.
  bool spans_clients() const;
};

// Runs metadata.validate_for_run() and the placement checks; errors from component "replicate".
// A device on no client, or beyond the devices a client has: kInvalidArgument naming the
// replica, the core and the device; a replica whose cores lie in several clients:
// kUnimplemented.
ReplicaPlacement place_replicas(const ReplicateMetadata& metadata, Runtime& runtime);

// The 1-D mesh "core" over `cores` (logical core order), named "replica_<replica>". Its global
// device names are the devices' own, so that the meshes of different replicas never share a
// collective group (CommunicatorPool keys groups by Mesh::global_fingerprint(), the runtime's
// group service by the members' names).
Mesh replica_core_mesh(int replica, const std::vector<Device*>& cores);

}  // namespace tessel::detail
