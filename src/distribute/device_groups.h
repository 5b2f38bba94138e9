// Internal: which communicator group a cross-device op runs on, and the multi-worker rendezvous.
//
// The groups themselves are the runtime's (comm's GroupService, src/comm/group_service.h): a
// group over exactly a device set is the service's group over those device names in rank order
// (job, replica, task, type, id, compared as parsed), shared by every CrossDeviceOps object of
// the runtime and dying with it. A CollectiveAllReduce group of group_size > local devices is
// matched with the other workers (other Runtimes of this process) through a process-wide
// rendezvous keyed by TF's group key and group_size: each worker joins with its own devices, the
// last one to join creates the group, every worker gets the same group and registers it with its
// own runtime's service (adopt); later calls find it there. When the program runs as several
// clients (the runtime's cluster, set_cluster, or the MPI job under mpirun: num_clients() > 1),
// each client is one worker instead (TF's MultiWorkerMirroredStrategy): the group is every
// client's devices named as this worker's but for the task (the client id), joined through the
// cluster (GroupService::join: shared memory within a host, MPI across), and group_size must be
// clients x local devices (kInvalidArgument otherwise). After a failure the caller evicts
// the group from the service (the policy of every group user); the next get() makes or joins a
// fresh one.
//
// Per object (DeviceGroups is a member of each CrossDeviceOps): TF's group keys (1, 2, ... per
// device set in order of first use) and which multi-worker group each device set joined.
//
// Thread safety: DeviceGroups and the rendezvous are safe from any thread; a group's
// communicators are used by one device stream each, abort() from anywhere.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/comm_group.h"
#include "tessel/runtime/device.h"
#include "tessel/runtime/runtime.h"

namespace tessel::detail {

// Sorts device names into rank order.
std::vector<std::string> rank_order(std::vector<std::string> devices);

class DeviceGroups {
 public:
  explicit DeviceGroups(Runtime& runtime) : runtime_(runtime) {}

  // The group over exactly `devices` (this worker's, group_size == devices.size()), or, with
  // group_size > devices.size(), the group this worker's devices form with the other workers'
  // (waits for them until `deadline`: kDeadlineExceeded naming the devices that joined).
  std::shared_ptr<CommGroup> get(const std::vector<Device*>& devices, int group_size,
                                 std::chrono::steady_clock::time_point deadline);
  // Evicts `group` from the runtime's groups (after a failure aborted it); the next get()
  // makes a fresh one.
  void evict(const std::shared_ptr<CommGroup>& group);
  // TF's group key of a device set: 1, 2, ... in order of first use.
  int64_t group_key(const std::vector<Device*>& devices);

 private:
  static std::vector<std::string> key_of(const std::vector<Device*>& devices);
  Runtime& runtime_;
  std::mutex mu_;
  std::map<std::vector<std::string>, int64_t> keys_;
  // Device set -> the members of the multi-worker group it joined last.
  std::map<std::vector<std::string>, std::vector<std::string>> joined_;
  int64_t next_key_ = 1;
};

// The process-wide rendezvous behind DeviceGroups::get for multi-worker groups. Errors: a device
// already joined under this key (kInvalidArgument), more devices than group_size
// (kInvalidArgument), the deadline (kDeadlineExceeded naming who joined). Pending entries are
// removed when their group is complete or their joiners gave up.
std::shared_ptr<CommGroup> join_group(int64_t group_key, int group_size,
                                      const std::vector<std::string>& devices,
                                      std::chrono::steady_clock::time_point deadline);

}  // namespace tessel::detail
