// Helpers TF users call around cross-device ops (tf.distribute's reduce_util, collective_util,
// cross_device_ops and cross_device_utils), with TF's answers and errors.
//
//   reduce_op_from_variable_aggregation(VariableAggregation::kMean) == ReduceOp::kMean
//   collective_hints(4096, 5.0) == CommunicationOptions(4096, 5.0)     // deprecated alias
//   select_cross_device_ops({"/gpu:0", "/gpu:1"})  -> NcclAllReduce(num_packs=1)
//   select_cross_device_ops({"/cpu:0", "/gpu:1"})  -> ReductionToOneDevice
//   hierarchical_copy_plan(8, 1)[0]: groups {0..3} and {4..7}, mains 0 and 4
//
// Thread safety: pure functions (select_cross_device_ops only builds an object).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessel/core/reduce_op.h"
#include "tessel/distribute/communication_options.h"
#include "tessel/distribute/cross_device_ops.h"
#include "tessel/distribute/variable_aggregation.h"

namespace tessel {

// TF's deprecated tf.distribute.experimental.CollectiveHints: the CommunicationOptions with
// these two fields (implementation AUTO), validated as CommunicationOptions validates them.
CommunicationOptions collective_hints(int64_t bytes_per_pack = 0,
                                      std::optional<double> timeout_seconds = std::nullopt);

// TF's select_cross_device_ops(devices): ReductionToOneDevice when any device is not a GPU
// (device names are parsed; malformed: kInvalidArgument), else NcclAllReduce(num_packs=1).
// devices must not be empty (kInvalidArgument; TF would pick NCCL for an empty set).
std::unique_ptr<CrossDeviceOps> select_cross_device_ops(const std::vector<std::string>& devices,
                                                        Runtime& runtime = Runtime::global());

// One tensor's copy plan in TF's HierarchicalCopyAllReduce (DGX-1: two fully connected groups of
// n / 2 devices): each group sums on its main device, the group-0 main adds the two sums, both
// mains get the total, every device copies it from its own group's main.
struct HierarchicalCopyStep {
  int group_0_main = 0;        // i % n
  int group_1_main = 0;        // (group_0_main + n / 2) % n
  std::vector<int> group_0;    // the devices summed on group_0_main
  std::vector<int> group_1;    // the devices summed on group_1_main
  std::vector<int> copy_from;  // per device, the main it copies the total from
};

// The plan of tensors 0..num_tensors-1 over num_devices devices, as TF builds it. TF assumes an
// even count: with an odd one TF's groups (n / 2 each) leave the last device out of the sum;
// tessel rejects that case (kInvalidArgument), and num_devices < 2.
std::vector<HierarchicalCopyStep> hierarchical_copy_plan(int num_devices, int num_tensors);

}  // namespace tessel
