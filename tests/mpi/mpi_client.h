// This process as a client of an MPI job (tessel_mpi_tests, tessel_mpi_checkpoint): a runtime
// of kClientDevices CPU devices named after the MPI rank (job "worker", task = rank), so that
// the process's MPI cluster serves it, and meshes over every process's devices.
#pragma once

#include <vector>

#include "tessel/comm/mpi.h"
#include "tessel/mesh/mesh.h"
#include "tessel/runtime/clients.h"
#include "tessel/runtime/runtime.h"

namespace tessel::testing {

inline constexpr int kClientDevices = 2;

inline Runtime& client_runtime() {
  static Runtime* runtime = new Runtime(
      RuntimeOptions{.num_cpu_devices = kClientDevices, .job = "worker", .task = mpi_rank()});
  return *runtime;
}

// A mesh of `dims` over every process's devices, this process holding CPU:0 and CPU:1.
inline Mesh client_mesh(const std::vector<MeshDimension>& dims) {
  return create_distributed_mesh(dims, {"CPU:0", "CPU:1"},
                                 ClientConfig{mpi_size(), mpi_rank(), "worker"});
}

}  // namespace tessel::testing
