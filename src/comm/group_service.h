// Internal: the communicator groups of one Runtime, and the cluster they reach other clients
// through. One GroupService is attached to each Runtime (Runtime::attachment) and dies with it,
// so no group of a dead runtime outlives it; a group of device threads is never shared by two
// runtimes that happen to name their devices alike.
//
//   auto groups = GroupService::of(runtime);
//   Communicator& c = groups->pool()->get(mesh, {"x"}, offset);   // the mesh-shaped view
//   ... a collective on c failed and aborted its group ...
//   groups->evict(pool);                                          // the next pool() is fresh
//
// Failure policy (one for every user): an aborted group stays aborted, so whoever saw the
// failure evicts the pool it used; later callers get fresh groups. Evicting a pool that was
// already replaced does nothing.
//
// Which cluster a group spanning clients joins through: the one given to set_cluster (see
// tessel/comm/multi_client.h); else the process's MPI cluster, made on first need when MPI is
// initialised; else kFailedPrecondition saying how to run several clients.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <memory>
#include <mutex>

#include "tessel/comm/cluster.h"
#include "tessel/comm/mesh_groups.h"
#include "tessel/runtime/runtime.h"

namespace tessel::detail {

class GroupService {
 public:
  explicit GroupService(int task) : task_(task) {}

  // The service attached to `runtime` (made on first use).
  static std::shared_ptr<GroupService> of(const Runtime& runtime);

  // The current pool of communicator groups (made on first use, after an eviction or a change
  // of cluster or factory).
  std::shared_ptr<CommunicatorPool> pool();
  // Drops `pool` if it is still the current one (its groups may be aborted).
  void evict(const std::shared_ptr<CommunicatorPool>& pool);

  // The cluster for groups spanning clients (null: the default, see above). Drops the pool.
  void set_cluster(std::shared_ptr<Cluster> cluster);
  std::shared_ptr<Cluster> cluster() const;
  // Tests: groups from now on come from `factory` (recording transports). Drops the pool.
  void set_group_factory(CommunicatorPool::GroupFactory factory);

 private:
  const int task_;  // the runtime's task: this client's id
  mutable std::mutex mu_;
  std::shared_ptr<CommunicatorPool> pool_;
  std::shared_ptr<Cluster> cluster_;
  CommunicatorPool::GroupFactory factory_;
};

}  // namespace tessel::detail
