// The GPU devices that the suites "on GPU devices" run on: the visible GPUs when there are any
// (n devices dealt round robin over them, several sharing a GPU when n exceeds their count, as
// TF's logical GPUs do), else n simulated GPUs (host memory kept apart as device memory). So the
// same suite checks the GPU code paths on every machine, and the real kernels, copies and
// streams where a GPU is visible (`make test-gpu` runs these suites by their "OnGpuDevices"
// names).
#pragma once

#include <vector>

#include "tessel/runtime/gpu.h"
#include "tessel/runtime/runtime.h"

namespace tessel::testing {

inline bool gpu_devices_are_real() { return visible_gpu_count() > 0; }

inline RuntimeOptions options_with_gpu_devices(int n, int num_cpu_devices = 1) {
  RuntimeOptions options{.num_cpu_devices = num_cpu_devices};
  if (!gpu_devices_are_real()) {
    options.num_simulated_gpu_devices = n;
    return options;
  }
  for (int i = 0; i < n; ++i) options.gpu_ordinals.push_back(i % visible_gpu_count());
  return options;
}

}  // namespace tessel::testing
