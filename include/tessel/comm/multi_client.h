// Multi-client DTensors: the Cluster through which a Runtime's DTensor collectives (relayout,
// the collectives ops insert, fused gradient reductions) reach the devices of other clients.
//
// Every client runs the same program on its own devices (docs/architecture.md); a mesh spans all clients'
// devices (create_distributed_mesh, clients.h) and each client holds the components of its
// local devices. pack/unpack/relayout/ops need no other change: a relayout step whose group
// spans clients runs its collective across them.
//
//   // under `mpirun -np 2`, two devices per process (TESSEL_CPU_DEVICES=2):
//   tessel::MpiEnvironment mpi;
//   Mesh mesh = create_distributed_mesh({{"x", 4}}, {"CPU:0", "CPU:1"});
//   DTensor t = copy_to_mesh(host, Layout::batch_sharded(mesh, "x", 1));   // this client's half
//   DTensor r = relayout(t, Layout::replicated(mesh, 1));                  // all-gather over MPI
//
// Which cluster: the one given to set_cluster for that runtime; else, when MPI is initialised,
// one make_mpi_cluster() made on the first collective that spans clients and shared by every
// runtime of the process (every client reaches that collective, as in any SPMD program), within
// that collective's deadline: a process that does not come is named in kDeadlineExceeded by its
// members in the group being joined, and the cluster is not made again (later collectives that
// span clients fail at once with kAborted quoting the first failure); else
// kFailedPrecondition saying how to run several clients. Simulated clients in one process (one
// Runtime per client, tests) use make_in_process_cluster.
//
// Thread safety: set_cluster and cluster_of may be called from any thread.
#pragma once

#include <memory>

#include "tessel/comm/cluster.h"
#include "tessel/runtime/runtime.h"

namespace tessel {

// From now on, `runtime`'s collectives that span clients go through `cluster` (null: back to the
// default). Groups made before are dropped. The runtime's device names must carry the task equal
// to cluster->client_id() (RuntimeOptions::task).
void set_cluster(Runtime& runtime, std::shared_ptr<Cluster> cluster);

// The cluster set for `runtime` (null when none was set).
std::shared_ptr<Cluster> cluster_of(const Runtime& runtime);

}  // namespace tessel
