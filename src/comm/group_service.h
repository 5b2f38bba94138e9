// Internal: the communicator groups of one Runtime, and the cluster they reach other clients
// through. One GroupService is attached to each Runtime (Runtime::attachment) and dies with it,
// so no group of a dead runtime outlives it (but in the hands of a caller still running); a
// group of device threads is never shared by two runtimes that happen to name their devices
// alike.
//
// Groups are named by their members (names in rank order, each rank used on its own member's
// stream). Every user asks here:
//   auto groups = GroupService::of(runtime);
//   // CrossDeviceOps: the one group over these devices, shared by every caller
//   std::shared_ptr<CommGroup> g = groups->group({"/job:localhost/.../CPU:0", ".../CPU:1"});
//   // relayout: the mesh-shaped view; its groups within this client are the same shared groups
//   Communicator& c = groups->pool()->get(mesh, {"x"}, offset);
//   // replicate(): a group for this call alone, returned for reuse when the call succeeded
//   std::shared_ptr<CommGroup> mine = groups->take(names);  ...  groups->give_back(mine);
//
// Failure policy (one for every user): a failed collective aborts its group for good, so
// whoever saw the failure evicts what it used: evict(group), or evict(pool), which also evicts
// every group the pool handed out; evicting a group also drops the current pool if it holds
// that group. Later callers get fresh groups. Evicting a group that was already replaced does
// nothing.
// Callers that are still running keep what they hold (shared_ptr) until they finish.
//
// Groups within this process are in-process groups, except when every member is a GPU device on
// its own CUDA GPU: then they are NCCL groups (tessel/comm/nccl.h), so that collectives on GPU
// memory run NCCL (and host tensors still take the host transport).
//
// Which cluster a group spanning clients joins through: the one given to set_cluster (see
// tessel/comm/multi_client.h); else the process's MPI cluster, made on first need when MPI is
// initialised; else kFailedPrecondition saying how to run several clients.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/comm_group.h"
#include "tessel/comm/cluster.h"
#include "tessel/comm/mesh_groups.h"
#include "tessel/runtime/runtime.h"

namespace tessel::detail {

class GroupService : public std::enable_shared_from_this<GroupService> {
 public:
  // `runtime` resolves member names to devices (groups whose members are all GPU devices on
  // distinct CUDA GPUs are NCCL groups); null: every group is in-process.
  explicit GroupService(int task, const Runtime* runtime = nullptr)
      : task_(task), runtime_(runtime) {}

  // The service attached to `runtime` (made on first use).
  static std::shared_ptr<GroupService> of(const Runtime& runtime);

  // The group over `members` (names in rank order, not empty): made on first use (by the group
  // factory, else in process), then the same group for every caller until it is evicted.
  std::shared_ptr<CommGroup> group(const std::vector<std::string>& members);
  // The registered group over `members`, or null.
  std::shared_ptr<CommGroup> find(const std::vector<std::string>& members) const;
  // Registers a group made elsewhere (CollectiveAllReduce's rendezvous of several runtimes)
  // under its members, in place of the one registered before.
  void adopt(std::shared_ptr<CommGroup> group);
  // A new group spanning clients (CollectiveAllReduce's multi-worker groups and replicate()'s
  // per-core groups under mpirun), joined through the cluster groups spanning clients go
  // through (see above; collective over the owning clients, in the same order on each); not
  // registered (adopt() it to share it). `members` in rank order, `owners[r]` the client of
  // member r; `timeout` bounds the meeting. Errors: Cluster::join's.
  std::shared_ptr<CommGroup> join(const std::vector<std::string>& members,
                                  const std::vector<int>& owners,
                                  std::chrono::milliseconds timeout);
  // How many clients the runtime's program runs as: the set cluster's num_clients(); else, for
  // a runtime named as this client (job and task: job_name() and client_id() of
  // runtime/clients.h, as Runtime::global() is), the program's num_clients() (the MPI job's
  // size under mpirun); else 1 (a runtime of this process alone, such as Runtime({}) under
  // mpirun: job "localhost").
  int num_clients() const;
  // A group over `members` for one caller alone: the registered one, taken out so that nobody
  // else gets it, or a new one. give_back() registers it again for reuse (unless another was
  // registered meanwhile); a caller that saw a failure does not give it back (it is evicted).
  std::shared_ptr<CommGroup> take(const std::vector<std::string>& members);
  void give_back(std::shared_ptr<CommGroup> group);
  // Drops `group` if it is still the one registered for its members, and the current pool if
  // it holds `group`.
  void evict(const std::shared_ptr<CommGroup>& group);
  // Number of registered groups (tests).
  size_t num_groups() const;

  // The current pool (the mesh-shaped view; made on first use, after an eviction or a change
  // of cluster or factory). Its groups within this client are this service's group(names).
  std::shared_ptr<CommunicatorPool> pool();
  // Drops `pool` if it is still the current one, and evicts every group it handed out (those
  // still registered).
  void evict(const std::shared_ptr<CommunicatorPool>& pool);

  // The cluster for groups spanning clients (null: the default, see above). Drops the pool.
  void set_cluster(std::shared_ptr<Cluster> cluster);
  std::shared_ptr<Cluster> cluster() const;
  // Tests: groups from now on come from `factory` (recording transports). Drops the pool and
  // the registered groups.
  void set_group_factory(CommunicatorPool::GroupFactory factory);

 private:
  // Drops `group` if registered (mu_ held).
  void unregister(const std::shared_ptr<CommGroup>& group);
  // A new group over `members` by the factory (mu_ held).
  std::shared_ptr<CommGroup> make(const std::vector<std::string>& members) const;

  const int task_;  // the runtime's task: this client's id
  const Runtime* runtime_;  // the runtime this service is attached to (outlives it)
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::shared_ptr<CommGroup>> groups_;  // by members
  std::shared_ptr<CommunicatorPool> pool_;
  std::shared_ptr<Cluster> cluster_;
  CommunicatorPool::GroupFactory factory_;
};

}  // namespace tessel::detail
