// CUDA runtime errors as tessel Errors; the current-device guard.
#include "runtime/cuda/cuda_check.h"

#include "core/errors.h"

namespace tessel::detail {

void check_cuda(cudaError_t status, std::string_view component, std::string_view what) {
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();  // a recoverable error must not fail the next, unrelated call
  ErrorCode code = ErrorCode::kInternal;
  if (status == cudaErrorMemoryAllocation) code = ErrorCode::kResourceExhausted;
  if (status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver ||
      status == cudaErrorInvalidDevice) {
    code = ErrorCode::kUnavailable;
  }
  throw_error(code, component, "{}: {}: {}", what, cudaGetErrorName(status),
              cudaGetErrorString(status));
}

ScopedCudaDevice::ScopedCudaDevice(int ordinal) {
  check_cuda(cudaGetDevice(&previous_), "GPU", "cudaGetDevice");
  if (previous_ != ordinal) {
    check_cuda(cudaSetDevice(ordinal), "GPU", fmt::format("cudaSetDevice({})", ordinal));
    changed_ = true;
  }
}

ScopedCudaDevice::~ScopedCudaDevice() {
  if (changed_) (void)cudaSetDevice(previous_);
}

}  // namespace tessel::detail
