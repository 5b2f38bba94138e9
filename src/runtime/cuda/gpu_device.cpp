// GPU devices: discovery, and the stream and memory a GPU device owns.
#include <cuda_runtime_api.h>

#include "core/errors.h"
#include "runtime/cuda/cuda_allocator.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda_memory_ops.h"
#include "runtime/gpu_context.h"
#include "tessel/runtime/device.h"
#include "tessel/runtime/gpu.h"

namespace tessel {
namespace {

// The backend's GpuContext: destroys the stream after draining it.
struct CudaGpuContext : detail::GpuContext {
  ~CudaGpuContext() override {
    if (stream == nullptr) return;
    if (cudaSetDevice(ordinal) != cudaSuccess) return;  // the runtime is gone at exit
    auto s = static_cast<cudaStream_t>(stream);
    (void)cudaStreamSynchronize(s);
    (void)cudaStreamDestroy(s);
  }
};

}  // namespace

bool built_with_cuda() { return true; }

int visible_gpu_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: no GPUs, not an error
    return 0;
  }
  return count;
}

std::unique_ptr<Device> Device::make_gpu(DeviceName name, int index, int cuda_ordinal,
                                         int64_t memory_limit) {
  const int visible = visible_gpu_count();
  if (cuda_ordinal < 0 || cuda_ordinal >= visible) {
    detail::throw_invalid("Device", "CUDA ordinal {} for {} is not a visible GPU ({} visible)",
                          cuda_ordinal, name.to_string(), visible);
  }
  auto gpu = std::make_shared<CudaGpuContext>();
  gpu->ordinal = cuda_ordinal;
  detail::ScopedCudaDevice on(cuda_ordinal);
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  detail::check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes), "Device",
                     fmt::format("cudaMemGetInfo for {}", name.to_string()));
  gpu->total_bytes = static_cast<int64_t>(total_bytes);
  cudaStream_t stream = nullptr;
  // A blocking stream: the legacy default stream (Tensor's copies) orders after its work.
  detail::check_cuda(cudaStreamCreate(&stream), "Device",
                     fmt::format("cudaStreamCreate for {}", name.to_string()));
  gpu->stream = stream;
  gpu->memory = std::make_shared<detail::CudaCachingAllocator>(cuda_ordinal, name.to_string());
  detail::install_cuda_memory_ops();
  return std::unique_ptr<Device>(new Device(std::move(name), index, std::move(gpu), memory_limit));
}

}  // namespace tessel
