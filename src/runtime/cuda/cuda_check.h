// Internal: CUDA runtime errors as tessel Errors, and the current-device guard every CUDA call
// of the backend runs under (the runtime keeps a current device per host thread).
#pragma once

#include <string_view>

#include <cuda_runtime_api.h>

namespace tessel::detail {

// Throws when `status` is not cudaSuccess: "<component>: <what>: <cudaErrorName>: <text>",
// kResourceExhausted for an allocation failure, kUnavailable when there is no usable device or
// driver, kInternal otherwise. Clears CUDA's sticky last error for recoverable errors.
void check_cuda(cudaError_t status, std::string_view component, std::string_view what);

// Makes `ordinal` the calling thread's current CUDA device for its lifetime, then restores the
// previous one.
class ScopedCudaDevice {
 public:
  explicit ScopedCudaDevice(int ordinal);
  ~ScopedCudaDevice();
  ScopedCudaDevice(const ScopedCudaDevice&) = delete;
  ScopedCudaDevice& operator=(const ScopedCudaDevice&) = delete;

 private:
  int previous_ = -1;
  bool changed_ = false;
};

}  // namespace tessel::detail
