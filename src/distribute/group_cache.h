// Internal: communicator groups for cross-device ops, cached per device set.
//
// A CommGroup holds one in-process Communicator per member device, ranks in device order
// (job, replica, task, type, id, compared as parsed). Local groups (every member in this
// worker) are made at once; a CollectiveAllReduce group of group_size > local devices is
// matched with the other workers of this process through a process-wide rendezvous keyed by
// TF's group key and group_size: each worker joins with its own devices, the last one to join
// creates the group, every worker gets the same CommGroup.
//
// Thread safety: GroupCache and the rendezvous are safe from any thread; a CommGroup's
// communicators are used by one device stream each, abort() from anywhere.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tessel/comm/communicator.h"
#include "tessel/runtime/device.h"

namespace tessel::detail {

struct CommGroup {
  std::vector<std::string> members;                  // device names, rank order
  std::vector<std::unique_ptr<Communicator>> comms;  // rank r's communicator

  // The communicator of member `device` (kInternal if it is not a member).
  Communicator& at(const std::string& device) const;
  int rank_of(const std::string& device) const;  // -1 when not a member
  // Aborts the group: every current and later call of every member throws kAborted.
  void abort(const std::string& reason) const;
};

// Sorts device names into rank order.
std::vector<std::string> rank_order(std::vector<std::string> devices);

class GroupCache {
 public:
  // The group over exactly `devices` (this worker's, group_size == devices.size()), or, with
  // group_size > devices.size(), the group this worker's devices form with the other workers'
  // (waits for them until `deadline`: kDeadlineExceeded naming the devices that joined).
  std::shared_ptr<CommGroup> get(const std::vector<Device*>& devices, int group_size,
                                 std::chrono::steady_clock::time_point deadline);
  // Forgets `group` (after a failure aborted it); the next get() makes a fresh one.
  void evict(const std::shared_ptr<CommGroup>& group);
  // TF's group key of a device set: 1, 2, ... in order of first use.
  int64_t group_key(const std::vector<Device*>& devices);

 private:
  static std::vector<std::string> key_of(const std::vector<Device*>& devices);
  std::mutex mu_;
  std::map<std::vector<std::string>, std::shared_ptr<CommGroup>> groups_;
  std::map<std::vector<std::string>, int64_t> keys_;
  int64_t next_key_ = 1;
};

// The process-wide rendezvous behind GroupCache::get for multi-worker groups. Errors: a device
// already joined under this key (kInvalidArgument), more devices than group_size
// (kInvalidArgument), the deadline (kDeadlineExceeded naming who joined).
std::shared_ptr<CommGroup> join_group(int64_t group_key, int group_size,
                                      const std::vector<std::string>& devices,
                                      std::chrono::steady_clock::time_point deadline);

}  // namespace tessel::detail
