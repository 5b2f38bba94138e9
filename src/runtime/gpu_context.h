// Internal: what a GPU device holds beyond a CPU device's parts: its GPU, its CUDA stream and
// its memory. Free of CUDA types so that device.cpp builds without CUDA; the CUDA backend
// (src/runtime/cuda/) makes the objects and destroys the stream.
#pragma once

#include <cstdint>
#include <memory>

#include "tessel/core/allocator.h"

namespace tessel::detail {

struct GpuContext {
  int ordinal = -1;                  // CUDA ordinal
  void* stream = nullptr;            // cudaStream_t, created by the CUDA backend
  std::shared_ptr<Allocator> memory;  // the caching device allocator (cuda_allocator.h)
  int64_t total_bytes = 0;           // the GPU's memory, the default memory limit
  bool simulated = false;            // a simulated GPU (simulated_gpu.h): no CUDA, no stream
  virtual ~GpuContext() = default;   // the backend's subclass destroys the stream
};

}  // namespace tessel::detail
