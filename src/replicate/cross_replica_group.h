// Internal: the state the replicas of one replicate() call share — one in-process Communicator
// group per logical core (core c of every replica, rank = replica id), the order check of their
// collectives, and the record of their failures.
//
//   CrossReplicaGroup group(devices, timeout);          // devices[replica][core]
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
// Thread safety: every method may be called from any replica's thread; communicator(r, c) is
// used by core c of replica r only (on its stream).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tessel/comm/communicator.h"
#include "tessel/core/error.h"
#include "tessel/runtime/device.h"

namespace tessel::detail {

class CrossReplicaGroup {
 public:
  // devices[r][c]: the device of logical core c of replica r (the communicators' scratch
  // memory comes from it). timeout > 0.
  CrossReplicaGroup(const std::vector<std::vector<Device*>>& devices,
                    std::chrono::milliseconds timeout);

  int num_replicas() const { return num_replicas_; }
  int num_cores() const { return num_cores_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  Device& device(int replica, int core) const { return *devices_[replica][core]; }
  Communicator& communicator(int replica, int core) const {
    return *comms_[static_cast<size_t>(core)][static_cast<size_t>(replica)];
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
  std::vector<std::vector<Device*>> devices_;                      // [replica][core]
  std::vector<std::vector<std::unique_ptr<Communicator>>> comms_;  // [core][replica]

  mutable std::mutex mu_;
  std::vector<uint64_t> started_;   // collectives each replica has entered
  std::vector<bool> finished_;      // replicas whose computation returned
  std::map<uint64_t, Slot> slots_;  // positions some but not all replicas have entered
  std::vector<Failure> failures_;   // in the order they were recorded
  std::vector<bool> failed_;        // replicas with a recorded failure
};

}  // namespace tessel::detail
