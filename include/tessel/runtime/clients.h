// Multi-client configuration (TF DTensor's config.py): how many processes (clients) a program
// runs as, which one this is, and a mesh over every client's devices.
//
//   // under `mpirun -np 2`, 2 devices per process:
//   num_clients() == 2;  client_id() == OMPI_COMM_WORLD_RANK
//   Mesh mesh = create_distributed_mesh({{"x", 4}}, {"CPU:0", "CPU:1"});
//   mesh.global_device_ids() == {0, 1, 2, 3};  mesh.local_device_ids() == {2 * client_id(), ...}
//
// Sources, first found wins: num_clients: TESSEL_NUM_CLIENTS, DTENSOR_NUM_CLIENTS, the length of
// DTENSOR_JOBS (comma list), OMPI_COMM_WORLD_SIZE, PMI_SIZE, else 1. client_id: TESSEL_CLIENT_ID,
// DTENSOR_CLIENT_ID, OMPI_COMM_WORLD_RANK, PMI_RANK, else 0. job_name: TESSEL_JOB_NAME,
// DTENSOR_JOB_NAME, else "localhost" for one client and "worker" for several (TF).
// Errors (kInvalidArgument, component "clients", TF's ValueError): a value that is not an
// integer; client_id outside [0, num_clients); full_job_name with a nonzero task on one client;
// create_distributed_mesh whose dimensions do not multiply to num_clients x local devices.
//
// Thread safety: reads the environment on every call; no state.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tessel/mesh/mesh.h"

namespace tessel {

int num_clients();
int client_id();
std::string job_name();
// "<job>/replica:0/task:<task>" (task: this client by default).
std::string full_job_name(std::optional<int> task_id = std::nullopt);
// DTENSOR_JOBS split on ',' (empty when unset).
std::vector<std::string> jobs();

// TF's create_distributed_mesh for CPU devices: global ids 0..N-1 with N = num_clients() x
// local_devices.size(); this client holds ids client_id() * L .. + L - 1; every device is named
// "/job:<job>/replica:0/task:<client>/device:<type>:<i>". Local device names may be short
// ("CPU:0").
Mesh create_distributed_mesh(const std::vector<MeshDimension>& dims,
                             const std::vector<std::string>& local_devices,
                             const std::string& mesh_name = "", bool use_xla_spmd = false);

// Who this client is: num_clients(), client_id() and job_name() read together.
struct ClientConfig {
  int num_clients = 1;
  int client_id = 0;
  std::string job = "localhost";
};
ClientConfig client_config();

// create_distributed_mesh for the client `client` names rather than the environment's: tests
// simulate several clients in one process (one Runtime per client, RuntimeOptions::task =
// client_id, job = client.job; multi_client.h). A client id outside [0, num_clients):
// kInvalidArgument.
Mesh create_distributed_mesh(const std::vector<MeshDimension>& dims,
                             const std::vector<std::string>& local_devices,
                             const ClientConfig& client, const std::string& mesh_name = "",
                             bool use_xla_spmd = false);

}  // namespace tessel
