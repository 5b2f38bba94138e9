// Simulated GPU devices: host memory tagged as a GPU's, copied with memcpy.
#include "runtime/simulated_gpu.h"

#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>

#include "tessel/core/memory_space.h"

namespace tessel::detail {
namespace {

class SimulatedGpuAllocator : public Allocator {
 public:
  explicit SimulatedGpuAllocator(int ordinal)
      : ordinal_(ordinal), name_("simulated_gpu:" + std::to_string(ordinal)) {}
  void* allocate(size_t bytes) override { return host_allocator()->allocate(bytes); }
  void deallocate(void* p, size_t bytes) noexcept override {
    host_allocator()->deallocate(p, bytes);
  }
  std::string_view name() const override { return name_; }
  MemorySpace memory_space() const override { return MemorySpace::simulated_gpu(ordinal_); }

 private:
  int ordinal_;
  std::string name_;
};

class SimulatedMemoryOps : public DeviceMemoryOps {
 public:
  void copy(void* dst, MemorySpace, const void* src, MemorySpace, size_t bytes) override {
    std::memmove(dst, src, bytes);
  }
  void zero(void* p, MemorySpace, size_t bytes) override { std::memset(p, 0, bytes); }
  void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                 size_t rows, MemorySpace) override {
    for (size_t r = 0; r < rows; ++r) {
      std::memmove(static_cast<uint8_t*>(dst) + r * dst_pitch,
                   static_cast<const uint8_t*>(src) + r * src_pitch, row_bytes);
    }
  }
};

}  // namespace

std::shared_ptr<GpuContext> make_simulated_gpu_context(int ordinal, int64_t total_bytes) {
  static SimulatedMemoryOps ops;  // lives until exit, as set_device_memory_ops asks
  static std::once_flag once;
  std::call_once(once, [] { set_device_memory_ops(MemorySpace::Kind::kSimulatedGpu, &ops); });
  auto gpu = std::make_shared<GpuContext>();
  gpu->ordinal = ordinal;
  gpu->memory = std::make_shared<SimulatedGpuAllocator>(ordinal);
  gpu->total_bytes = total_bytes;
  gpu->simulated = true;
  return gpu;
}

}  // namespace tessel::detail
