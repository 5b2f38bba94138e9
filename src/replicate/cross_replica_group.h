// Internal: the state the replicas of one replicate() call share — one Communicator group per
// logical core (core c of every replica, rank = replica id), the call's deadline, the
// rendezvous and order check of their collectives, what each replica is doing, and the record
// of their failures.
//
//   // placement.devices[replica][core] (replica_placement.h):
//   auto group = std::make_shared<CrossReplicaGroup>(GroupService::of(runtime), placement,
//                                                    timeout, deadline);
//   // on replica r's controller thread, for each collective (one task per core of r):
//   group->launch(r, "all_reduce(sum) of f32[4] sharding_specs:unsharded,", my_part);
//   my_part->wait();
//   group->finished(r);                                 // r's computation returned
//   group->record_failure(r, code, what);               // r's computation threw
//   group->first_failure()                              // what replicate() throws
//
// launch() is a rendezvous: each replica deposits its part of the collective (a StreamLaunch
// over its own cores) and the last one to arrive enqueues every part together, under the launch
// lock (launch.h). So the collectives of concurrent calls over shared devices reach every
// stream in one order, and run interleaved on the FIFO streams instead of deadlocking (each
// replica enqueueing its part alone, two calls' parts could meet in opposite orders on two
// streams: each waiting for a peer queued behind the other). A replica waits at the rendezvous
// until the call's deadline at most; then kDeadlineExceeded names the replica that did not
// arrive and what it is doing (note()).
//
// launch() also turns two kinds of mismatch into immediate errors instead of deadline waits:
// replicas whose collectives at the same position differ (kFailedPrecondition naming both),
// and a replica that returned while another waits in (or starts) a collective it never called.
// Both record the failure and abort the group, so that the replicas waiting wake with kAborted.
//
// The per-core groups are the runtime's (comm's GroupService), named "replica <r> (<device>)"
// per member so that errors name the replica. They are taken for this call alone
// (GroupService::take) rather than shared like the other users' groups, so that a failure of
// one call (which aborts its groups) never reaches another. When the call is over they are
// given back for the next call, unless a failure aborted them: then they are dropped (the
// groups' failure policy, evict). The object is shared (shared_ptr) by the replica threads and
// the tasks on the streams, so a replica left running after replicate() returned (a late one)
// keeps what it uses.
//
// Thread safety: every method may be called from any replica's thread; communicator(r, c) is
// used by core c of replica r only (on its stream).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/comm_group.h"
#include "comm/group_service.h"
#include "replicate/replica_placement.h"
#include "runtime/launch.h"
#include "tessel/comm/collective_options.h"
#include "tessel/comm/communicator.h"
#include "tessel/core/error.h"
#include "tessel/runtime/device.h"

namespace tessel::detail {

class CrossReplicaGroup {
 public:
  using Clock = std::chrono::steady_clock;
  // placement.devices[r][c]: the device of logical core c of replica r (the communicators'
  // scratch memory comes from it), null for a replica of another client. timeout > 0: the
  // call's; deadline: when it ends. The groups come from `service` (the devices' runtime's).
  // When the replicas span clients, each core's group is joined through the service's cluster
  // (collective over the clients owning a replica, in the same order on each: every client
  // calls replicate() alike) for this call alone, and dropped after it (never reused, so that
  // no client reuses a group another one dropped); the rendezvous of launch() is among this
  // client's replicas, the collectives themselves cross the clients.
  CrossReplicaGroup(std::shared_ptr<GroupService> service, const ReplicaPlacement& placement,
                    std::chrono::milliseconds timeout, Clock::time_point deadline);
  // Gives the groups back to the service, unless the call failed.
  ~CrossReplicaGroup();
  CrossReplicaGroup(const CrossReplicaGroup&) = delete;
  CrossReplicaGroup& operator=(const CrossReplicaGroup&) = delete;

  int num_replicas() const { return num_replicas_; }
  int num_cores() const { return num_cores_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  Clock::time_point deadline() const { return deadline_; }
  // When a launch of this call's collectives gives up waiting for its tasks: the deadline, or,
  // when the replicas span clients, a little after it (a fortieth of the timeout, 5 ms to
  // 500 ms: half of replicate()'s grace), so that a collective waiting for another process's
  // replica reports first, naming the late peer (the launch only knows its own devices).
  Clock::time_point launch_deadline() const;
  Device& device(int replica, int core) const { return *devices_[replica][core]; }
  Communicator& communicator(int replica, int core) const {
    return *groups_[static_cast<size_t>(core)]->comms[static_cast<size_t>(replica)];
  }
  // The options of the call's collectives: they end by the call's deadline (one that starts
  // after it fails at once, naming whom it waited for).
  CollectiveOptions collective_options() const;

  // What replica `replica` is doing now, for the errors that name a late replica:
  // kInComputation while its own code runs (outside tessel's waits).
  static constexpr const char* kInComputation = "running its computation";
  void note(int replica, std::string doing);
  std::string doing(int replica) const;

  // Replica `replica` starts its next collective, described by `signature` (the same text on
  // every replica for matching calls), with `part` its tasks on its cores: a rendezvous (see
  // above). Returns once every replica's part is enqueued (or failed to be); the caller then
  // waits for its part. Throws (after recording it and aborting the group) kFailedPrecondition
  // on a mismatch with another replica's call at that position or when a replica that already
  // returned never reaches it, and kDeadlineExceeded when a replica does not arrive by the
  // deadline; kAborted when the group is aborted.
  void launch(int replica, const std::string& signature, std::shared_ptr<StreamLaunch> part);
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
    std::vector<std::shared_ptr<StreamLaunch>> parts;  // [replica]; null until it arrives
  };
  // Records, aborts, throws (mu_ not held).
  [[noreturn]] void fail(int replica, ErrorCode code, const std::string& message, int culprit = -1);
  // The mismatch of replica `replica`'s collective #n with the others', or "" (mu_ held).
  std::string mismatch(int replica, uint64_t n, const std::string& signature);

  const int num_replicas_;
  const int num_cores_;
  std::vector<bool> local_;  // [replica]: runs in this client
  int num_local_ = 0;
  bool spans_clients_ = false;
  const std::chrono::milliseconds timeout_;
  const Clock::time_point deadline_;
  std::vector<std::vector<Device*>> devices_;  // [replica][core]
  std::shared_ptr<GroupService> service_;
  std::vector<std::shared_ptr<CommGroup>> groups_;  // [core], ranks by replica

  mutable std::mutex mu_;
  std::condition_variable arrived_;  // launch() waits here for its position to be launched
  bool aborted_ = false;
  std::string abort_reason_;        // the first abort's
  std::vector<uint64_t> started_;   // collectives each replica has entered
  uint64_t launched_ = 0;           // positions whose parts are all enqueued (in order)
  std::vector<bool> finished_;      // replicas whose computation returned
  std::vector<std::string> doing_;  // what each replica is doing (note())
  std::map<uint64_t, Slot> slots_;  // positions some but not all replicas have entered
  std::vector<Failure> failures_;   // in the order they were recorded
  std::vector<bool> failed_;        // replicas with a recorded failure
};

}  // namespace tessel::detail
