// Internal: the steps cross-device ops are built from, shared by the implementations.
//
// Each function runs its step on the devices' streams (launch.h), records it in `plan` and
// returns when it is done. Results live in new tensors allocated from the devices that hold
// them (collective gathers: from the host allocator, as the Communicator returns them).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distribute/device_groups.h"
#include "runtime/launch.h"
#include "tessel/distribute/communication_options.h"
#include "tessel/distribute/cross_device_ops.h"

namespace tessel::detail {

inline constexpr std::string_view kOps = "CrossDeviceOps";

// A call's budget: options.timeout_seconds, or default_collective_timeout().
std::chrono::milliseconds effective_timeout(const CommunicationOptions& options);
// Equal as sets (TF's _devices_match).
bool same_devices(const std::vector<Device*>& a, const std::vector<Device*>& b);
std::vector<std::string> names_of(const std::vector<Device*>& devices);
// The algorithm a collective with `algorithm` runs on the in-process transport (kAuto: direct).
std::string resolved_algorithm_name(Algorithm algorithm);

// Identity copies of `value` on every device of `dests` (TF's simple_broadcast).
Mirrored copy_to_devices(const Value& value, const std::vector<Device*>& dests,
                         const CallDeadline& deadline, CrossDevicePlan& plan);

// TF's ReductionToOneDevice: reduce (or, for gather, concatenate along axis) on `reduce_device`,
// then copy to `dests`. MEAN divides by the number of components.
Mirrored reduce_to_one(Device& reduce_device, const ReductionToOneDevice::AccumulationFn& fn,
                       ReduceOp op, const DistributedValues& value,
                       const std::vector<Device*>& value_devices, const std::vector<Device*>& dests,
                       const CallDeadline& deadline, CrossDevicePlan& plan);
Mirrored gather_to_one(Device& reduce_device, const DistributedValues& value,
                       const std::vector<Device*>& value_devices, const std::vector<Device*>& dests,
                       int axis, const CallDeadline& deadline, CrossDevicePlan& plan);

// Tensors `tensors` (indices into the batch, equal dtypes) flattened and concatenated, the
// buffer cut into `ranges` element counts, one all-reduce per range.
struct PackSpec {
  std::vector<int> tensors;
  std::vector<int64_t> ranges;
  // A bytes_per_pack pack (one range): the tensors live in one ScopedAllocator's fields
  // (64-byte aligned) and the collective runs over its backing. Otherwise TF's concat-and-split.
  bool scoped = false;
};

// One collective job over `devices` (this worker's; rank order comes from the group).
struct GroupJob {
  DeviceGroups* groups = nullptr;
  int group_size = 0;  // all workers' devices
  std::vector<Device*> devices;
  CallDeadline deadline;          // the whole call's
  CollectiveOptions collective;   // algorithm; its deadline is `deadline.at`
};
// A job whose collectives end by `deadline` (collective's timeout and deadline are replaced).
inline GroupJob make_group_job(DeviceGroups& groups, int group_size, std::vector<Device*> devices,
                               const CallDeadline& deadline, CollectiveOptions collective) {
  collective.timeout = deadline.timeout;
  collective.deadline = deadline.at;
  return GroupJob{&groups, group_size, std::move(devices), deadline, collective};
}

// Dense all-reduce of a batch: inputs[d][k] is tensor k on devices[d]. Returns the reduced
// tensors in the same layout. MEAN divides by `divisor`.
std::vector<std::vector<Tensor>> all_reduce_dense(const GroupJob& job,
                                                  const std::vector<std::vector<Tensor>>& inputs,
                                                  const std::vector<PackSpec>& packs, ReduceOp op,
                                                  int64_t divisor, CrossDevicePlan& plan);
// TF's collective IndexedSlices all-reduce: inputs[d] on devices[d]. Equal row counts on every
// rank: all-gather values and indices; otherwise densify, all-reduce, and return all rows.
// MEAN divides the values by `divisor`.
std::vector<IndexedSlices> all_reduce_sparse(const GroupJob& job,
                                             const std::vector<IndexedSlices>& inputs, ReduceOp op,
                                             int64_t divisor, CrossDevicePlan& plan);
// All-gather along `axis` (sizes along it may differ).
std::vector<Tensor> all_gather(const GroupJob& job, const std::vector<Tensor>& inputs, int axis,
                               CrossDevicePlan& plan);

// Results on `group_devices` (aligned) placed on `dests`: a device of the group keeps its own
// result, any other destination gets a copy of the first one (TF's CollectiveAllReduce rule).
Mirrored place_results(const std::vector<Device*>& group_devices, const std::vector<Value>& results,
                       const std::vector<Device*>& dests, const CallDeadline& deadline,
                       CrossDevicePlan& plan);

}  // namespace tessel::detail
