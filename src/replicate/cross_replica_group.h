// Internal: the state the replicas of one replicate() call share — one Communicator group per
// logical core (core c of every replica, rank = replica id), the order check of their
// collectives, and the record of their failures.
//
//   // devices[replica][core]:
//   CrossReplicaGroup group(GroupService::of(runtime), devices, timeout);
//   // on replica r's controller thread, before each collective:
//   group.enter(r, "all_reduce(sum) f32[4] sharding_specs:unsharded,");
//   ... group.communicator(r, c) on core c's stream ...
//   group.finished(r);                                  // r's computation returned
//   group.record_failure(r, error);                     // r's computation threw
//   group.first_failure()                               // what replicate() throws
//
// enter() turns two kinds of mismatch into immediate errors instead of deadline waits: replicas
// whose collectives at the same position differ (kFailedPrecondition naming both), and a
// replica that returned while another waits in (or starts) a collective it never called.
// Both record the failure and abort the group, so that the replicas waiting in communicators
// wake with kAborted.
//
// The per-core groups are the runtime's (comm's GroupService), named "replica <r> (<device>)"
// per member so that errors name the replica. They are taken for this call alone
// (GroupService::take) rather than shared like the other users' groups: each replica launches
// its collectives on its own cores independently (no launch spans every member's stream), so
// two overlapping replicate() calls over the same cores could pair replica 0's collective of one
// call with replica 1's of the other. When the call is over they are given back for the next
// call, unless a failure aborted them: then they are dropped (the groups' failure policy, evict).
//
// Thread safety: every method may be called from any replica's thread; communicator(r, c) is
// used by core c of replica r only (on its stream).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/comm_group.h"
#include "comm/group_service.h"
#include "tessel/comm/communicator.h"
#include "tessel/core/error.h"
#include "tessel/runtime/device.h"

namespace tessel::detail {

class CrossReplicaGroup {
 public:
  // devices[r][c]: the device of logical core c of replica r (the communicators' scratch
  // memory comes from it). timeout > 0. The groups come from `service` (the devices' runtime's).
  CrossReplicaGroup(std::shared_ptr<GroupService> service,
                    const std::vector<std::vector<Device*>>& devices,
                    std::chrono::milliseconds timeout);
  // Gives the groups back to the service, unless the call failed.
  ~CrossReplicaGroup();
  CrossReplicaGroup(const CrossReplicaGroup&) = delete;
  CrossReplicaGroup& operator=(const CrossReplicaGroup&) = delete;

  int num_replicas() const { return num_replicas_; }
  int num_cores() const { return num_cores_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  Device& device(int replica, int core) const { return *devices_[replica][core]; }
  Communicator& communicator(int replica, int core) const {
    return *groups_[static_cast<size_t>(core)]->comms[static_cast<size_t>(replica)];
  }

  // Replica `replica` starts its next collective, described by `signature` (the same text on
  // every replica for matching calls). Throws kFailedPrecondition (after recording it and
  // aborting the group) on a mismatch with another replica's call at that position, or when a
  // replica that already returned never reaches it.
  void enter(int replica, const std::string& signature);
  // Replica `replica`'s computation returned normally; replicas waiting in a collective it
  // never called fail now (recorded, group aborted).
  void finished(int replica);

  // Aborts every core's group: current and later collectives throw kAborted with `reason`.
  void abort(const std::string& reason);

  // Records replica `replica`'s failure (the first of each replica counts).
  void record_failure(int replica, ErrorCode code, const std::string& what);
  struct Failure {
    int replica = 0;
    ErrorCode code = ErrorCode::kInternal;
    std::string what;
  };
  // The earliest failure that is not kAborted, else the earliest one; nullopt when none.
  std::optional<Failure> first_failure() const;

 private:
  // One position in the replicas' sequence of collectives.
  struct Slot {
    int first_replica = 0;
    std::string signature;
    int arrived = 0;
  };
  // Records, aborts, throws (mu_ not held).
  [[noreturn]] void fail(int replica, const std::string& message);

  int num_replicas_;
  int num_cores_;
  std::chrono::milliseconds timeout_;
  std::vector<std::vector<Device*>> devices_;  // [replica][core]
  std::shared_ptr<GroupService> service_;
  std::vector<std::shared_ptr<CommGroup>> groups_;  // [core], ranks by replica
  std::atomic<bool> aborted_{false};

  mutable std::mutex mu_;
  std::vector<uint64_t> started_;   // collectives each replica has entered
  std::vector<bool> finished_;      // replicas whose computation returned
  std::map<uint64_t, Slot> slots_;  // positions some but not all replicas have entered
  std::vector<Failure> failures_;   // in the order they were recorded
  std::vector<bool> failed_;        // replicas with a recorded failure
};

}  // namespace tessel::detail
