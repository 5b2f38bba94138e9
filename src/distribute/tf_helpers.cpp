// TF's reduce_util / collective_util / cross_device_ops helpers.
#include "tessel/distribute/tf_helpers.h"

#include <algorithm>

#include "core/errors.h"
#include "tessel/core/device_name.h"

namespace tessel {

CommunicationOptions collective_hints(int64_t bytes_per_pack,
                                      std::optional<double> timeout_seconds) {
  return CommunicationOptions(bytes_per_pack, timeout_seconds);
}

std::unique_ptr<CrossDeviceOps> select_cross_device_ops(const std::vector<std::string>& devices,
                                                        Runtime& runtime) {
  if (devices.empty()) {
    detail::throw_invalid("select_cross_device_ops", "devices must not be empty");
  }
  const bool all_gpus = std::all_of(devices.begin(), devices.end(), [](const std::string& d) {
    return DeviceName::parse(d).type == "GPU";
  });
  if (all_gpus) return std::make_unique<NcclAllReduce>(1, runtime);
  return std::make_unique<ReductionToOneDevice>("", nullptr, runtime);
}

std::vector<HierarchicalCopyStep> hierarchical_copy_plan(int num_devices, int num_tensors) {
  if (num_devices < 2 || num_devices % 2 != 0) {
    detail::throw_invalid("HierarchicalCopyAllReduce",
                          "the DGX-1 copy plan needs an even number of devices >= 2, got {} (TF's "
                          "two groups of n // 2 would leave a device out of the sum)",
                          num_devices);
  }
  if (num_tensors < 0) {
    detail::throw_invalid("HierarchicalCopyAllReduce", "num_tensors must be >= 0, got {}",
                          num_tensors);
  }
  const int half = num_devices / 2;
  std::vector<HierarchicalCopyStep> plan;
  for (int i = 0; i < num_tensors; ++i) {
    HierarchicalCopyStep step;
    step.group_0_main = i % num_devices;
    step.group_1_main = (step.group_0_main + half) % num_devices;
    const int group_0_begin = step.group_0_main < half ? 0 : half;
    const int group_1_begin = half - group_0_begin;
    for (int d = 0; d < half; ++d) {
      step.group_0.push_back(group_0_begin + d);
      step.group_1.push_back(group_1_begin + d);
    }
    for (int j = 0; j < num_devices; ++j) {
      step.copy_from.push_back((step.group_0_main < half) == (j < half) ? step.group_0_main
                                                                        : step.group_1_main);
    }
    plan.push_back(std::move(step));
  }
  return plan;
}

}  // namespace tessel
