// Copies and zero-fills of GPU memory for Tensor (core/memory_space.h).
#include "runtime/cuda/cuda_memory_ops.h"

#include <algorithm>
#include <mutex>

#include "core/errors.h"
#include "runtime/cuda/cuda_check.h"
#include "tessel/core/memory_space.h"

namespace tessel::detail {
namespace {

// The largest pitch cudaMemcpy2D takes (cudaDeviceProp::memPitch is 2^31 - 1 on current GPUs).
constexpr size_t kMaxPitch = (size_t{1} << 31) - 1;

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

  void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                 size_t rows, MemorySpace space) override {
    // On the legacy default stream, as copy(): ordered after the work queued on the GPU's
    // (blocking) device streams, and before the work queued on them later.
    ScopedCudaDevice on(space.device_ordinal);
    cudaError_t status = cudaSuccess;
    if (std::max(dst_pitch, src_pitch) <= kMaxPitch) {
      status = cudaMemcpy2D(dst, dst_pitch, src, src_pitch, row_bytes, rows, cudaMemcpyDeviceToDevice);
    } else {  // rows too far apart for one 2-D copy
      for (size_t r = 0; r < rows && status == cudaSuccess; ++r) {
        status = cudaMemcpy(static_cast<char*>(dst) + r * dst_pitch,
                            static_cast<const char*>(src) + r * src_pitch, row_bytes,
                            cudaMemcpyDeviceToDevice);
      }
    }
    if (status != cudaSuccess) {
      check_cuda(status, "Tensor", fmt::format("strided copy of {} rows of {} bytes within {} memory",
                                               rows, row_bytes, space.to_string()));
    }
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
