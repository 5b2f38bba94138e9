// Copies and zero-fills of GPU memory for Tensor (core/memory_space.h).
#include "runtime/cuda/cuda_memory_ops.h"

#include <mutex>

#include "core/errors.h"
#include "runtime/cuda/cuda_check.h"
#include "tessel/core/memory_space.h"

namespace tessel::detail {
namespace {

class CudaMemoryOps : public DeviceMemoryOps {
 public:
  void copy(void* dst, MemorySpace dst_space, const void* src, MemorySpace src_space,
            size_t bytes) override {
    // With unified addressing cudaMemcpyDefault tells host, device and peer copies apart itself.
    const int ordinal = dst_space.is_host() ? src_space.device_ordinal : dst_space.device_ordinal;
    ScopedCudaDevice on(ordinal);
    check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "Tensor",
               fmt::format("copy of {} bytes from {} to {} memory", bytes, src_space.to_string(),
                           dst_space.to_string()));
  }

  void zero(void* p, MemorySpace space, size_t bytes) override {
    ScopedCudaDevice on(space.device_ordinal);
    const std::string what = fmt::format("zero-fill of {} bytes of {} memory", bytes, space.to_string());
    check_cuda(cudaMemsetAsync(p, 0, bytes, nullptr), "Tensor", what);
    check_cuda(cudaStreamSynchronize(nullptr), "Tensor", what);
  }
};

}  // namespace

void install_cuda_memory_ops() {
  static CudaMemoryOps ops;  // lives until exit, as set_device_memory_ops asks
  static std::once_flag once;
  std::call_once(once, [] { set_device_memory_ops(MemorySpace::Kind::kCudaDevice, &ops); });
}

}  // namespace tessel::detail
