// Collective groups of a mesh, and a pool of communicators for them.
//
// Reducing (or gathering) over a set of mesh dimensions D splits the mesh into groups: the
// devices that share their coordinates on every dimension not in D. This is TF DTensor's group
// assignment (GetAllReducePartitionsFromReducedDims): members are mesh offsets in increasing
// order, groups are ordered by their kept coordinates. On x=2,y=2:
//   collective_groups(mesh, {"x"})      == {{0, 2}, {1, 3}}
//   collective_groups(mesh, {"y"})      == {{0, 1}, {2, 3}}
//   collective_groups(mesh, {"x", "y"}) == {{0, 1, 2, 3}}
//
// CommunicatorPool hands every device of a mesh its communicator for a group, creating each
// group's shared state once, on first use; later calls return the same Communicator. With a
// Cluster (multi-client, tessel/comm/cluster.h), a group whose members belong to several clients is
// joined through it: the client owning a device is the task of its name (".../task:<c>/...";
// a name without a task is this client's), and the first get() for a (mesh, dims) that spans
// clients joins every group of it holding a device of this client, in group order, so that
// all clients join in the same order.
// Thread safety: CommunicatorPool is safe to use from every device thread at once.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "tessel/comm/cluster.h"
#include "tessel/comm/communicator.h"
#include "tessel/mesh/mesh.h"

namespace tessel {

namespace detail {
struct CommGroup;  // src/comm/comm_group.h
}

// Unknown or repeated dimension names: Error kInvalidArgument naming them.
std::vector<std::vector<int64_t>> collective_groups(const Mesh& mesh,
                                                    const std::vector<std::string>& dims);

// Where the device at mesh `offset` sits: which group, and its rank inside it.
struct GroupPosition {
  int group = 0;
  int rank = 0;
  std::vector<int64_t> members;  // mesh offsets of the group, rank order
};
GroupPosition group_position(const Mesh& mesh, const std::vector<std::string>& dims,
                             int64_t offset);

class CommunicatorPool {
 public:
  // Makes one group's communicators (rank order) from its size and member names.
  using GroupFactory = std::function<std::vector<std::unique_ptr<Communicator>>(
      int size, std::vector<std::string> names)>;
  // Groups over the in-process transport (make_in_process_communicators).
  CommunicatorPool();
  // Groups made by `factory` (tests: recording or fault-injecting transports).
  explicit CommunicatorPool(GroupFactory factory);
  // Groups spanning clients through `cluster`; the others by `factory` (null: in-process).
  explicit CommunicatorPool(std::shared_ptr<Cluster> cluster, GroupFactory factory = nullptr);
  // Internal (the runtime's group service): the group over member names (rank order) within
  // this client, shared with the source's other users.
  using GroupSource =
      std::function<std::shared_ptr<detail::CommGroup>(const std::vector<std::string>& names)>;
  CommunicatorPool(std::shared_ptr<Cluster> cluster, GroupSource source);

  // The communicator of the device at mesh `offset` for the group over `dims`. The group's
  // members are named by their device names. Errors as collective_groups; a bad offset:
  // kInvalidArgument, as is the offset of another client's device. `join_timeout` bounds joining
  // a group that spans clients (zero: default_collective_timeout()).
  Communicator& get(const Mesh& mesh, const std::vector<std::string>& dims, int64_t offset,
                    std::chrono::milliseconds join_timeout = {});
  // Number of groups created so far (for tests: creation is once per group).
  size_t num_groups() const;

  // ---- internal ---------------------------------------------------------------------------
  // Every group this pool handed communicators of (the group service evicts them with it).
  std::vector<std::shared_ptr<detail::CommGroup>> groups() const;

 private:
  using Key = std::tuple<uint64_t, std::vector<std::string>, int>;  // mesh, dims, group
  // Makes (joins) the group of `members` (mesh offsets) into groups_[key].
  void create(const Key& key, const Mesh& mesh, const std::vector<int64_t>& members,
              std::chrono::milliseconds join_timeout);
  // The client owning each device of `mesh` (by offset), computed once per mesh (keyed by its
  // fingerprint). Under mu_.
  const std::vector<int>& owners(const Mesh& mesh, uint64_t fingerprint);
  int client_id() const;  // this client (0 without a cluster)

  GroupSource source_;  // groups within this client
  std::shared_ptr<Cluster> cluster_;
  mutable std::mutex mu_;
  std::map<Key, std::shared_ptr<detail::CommGroup>> groups_;
  std::map<uint64_t, std::vector<int>> owners_;                        // by mesh fingerprint
};

}  // namespace tessel
