// Internal: the DeviceMemoryOps (core/memory_space.h) of the CUDA backend, installed when the
// first GPU device is made. Copies run on the legacy default stream, which CUDA orders after the
// work already queued on the devices' (blocking) streams, and return when the bytes are in place.
#pragma once

namespace tessel::detail {

// Installs the CUDA DeviceMemoryOps once; later calls do nothing.
void install_cuda_memory_ops();

}  // namespace tessel::detail
