// Internal: simulated GPU devices (RuntimeOptions::num_simulated_gpu_devices,
// TESSEL_SIMULATED_GPUS). Their memory is host memory tagged as the simulated GPU's
// (MemorySpace::simulated_gpu), copied with memcpy; they have no CUDA stream, so every op runs
// host-staged on them and NCCL refuses them. What they check: that tensors, DTensors,
// collectives and ops keep device memory apart from host memory, as on a real GPU.
#pragma once

#include <memory>

#include "runtime/gpu_context.h"

namespace tessel::detail {

// The GpuContext of simulated GPU `ordinal`, whose memory counts against the host's limit and
// reports `total_bytes` as its size (its default memory limit).
std::shared_ptr<GpuContext> make_simulated_gpu_context(int ordinal, int64_t total_bytes);

}  // namespace tessel::detail
