// Helpers of the replicate() tests: a 4-device runtime of their own, options, small tensors.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "tessel/core/tensor.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/replicate/replicate.h"
#include "tessel/runtime/runtime.h"

namespace tessel::testing {

// Four CPU devices, shared by the replicate tests (never destroyed: streams outlive the tests).
inline Runtime& replicate_runtime() {
  static Runtime* runtime = new Runtime(RuntimeOptions{.num_cpu_devices = 4});
  return *runtime;
}

// `replicas` x `cores` on replicate_runtime(), SPMD on when cores > 1, every wait bounded by
// `timeout` (long enough that a test passing by it would be noticed as slow).
inline ReplicateOptions replicate_options(
    int replicas, int cores = 1, std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  ReplicateOptions options;
  options.metadata.num_replicas = replicas;
  options.metadata.num_cores_per_replica = cores;
  options.metadata.use_spmd_for_xla_partitioning = cores > 1;
  options.runtime = &replicate_runtime();
  options.timeout = timeout;
  return options;
}

inline Tensor vec(const std::vector<float>& values) {
  return Tensor::from_vector<float>(values, Shape{static_cast<int64_t>(values.size())});
}

inline std::vector<float> host_values(const DTensor& d) { return to_host(d).to_vector<float>(); }

inline std::string device_suffix(int index) { return "/device:CPU:" + std::to_string(index); }

inline bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace tessel::testing
