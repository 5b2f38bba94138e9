// Internal: which runtime device runs each (replica, logical core) of a replicated computation,
// and the mesh of a replica's cores (see replicate.h, "Placement").
#pragma once

#include <vector>

#include "tessel/mesh/mesh.h"
#include "tessel/replicate/replicate_metadata.h"
#include "tessel/runtime/device.h"
#include "tessel/runtime/runtime.h"

namespace tessel::detail {

// [replica][logical core] -> the runtime's device. Runs metadata.validate_for_run() and the
// placement checks; errors from component "replicate".
std::vector<std::vector<Device*>> assign_replica_devices(const ReplicateMetadata& metadata,
                                                         Runtime& runtime);

// The 1-D mesh "core" over `cores` (logical core order), named "replica_<replica>". Its global
// device names are the devices' own, so that the meshes of different replicas never share a
// collective group (CommunicatorPool keys groups by Mesh::global_fingerprint(), the runtime's
// group service by the members' names).
Mesh replica_core_mesh(int replica, const std::vector<Device*>& cores);

}  // namespace tessel::detail
