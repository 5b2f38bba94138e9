// DeviceCopyCounter: counts the bytes simulated GPUs copy, by direction (to the host, from the
// host, within device memory), while it is installed; the tests use it to show that a call keeps
// its data in device memory or how much it stages through the host.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>

#include "tessel/core/memory_space.h"

namespace tessel::testing {

// Installs itself as the simulated GPUs' DeviceMemoryOps for its lifetime, passing every call
// on and counting the bytes moved, by direction. Copies run on the devices' streams: locked.
class DeviceCopyCounter : public DeviceMemoryOps {
 public:
  DeviceCopyCounter()
      : inner_(&device_memory_ops("DeviceCopyCounter", MemorySpace::simulated_gpu(0))) {
    set_device_memory_ops(MemorySpace::Kind::kSimulatedGpu, this);
  }
  ~DeviceCopyCounter() override { set_device_memory_ops(MemorySpace::Kind::kSimulatedGpu, inner_); }
  DeviceCopyCounter(const DeviceCopyCounter&) = delete;
  DeviceCopyCounter& operator=(const DeviceCopyCounter&) = delete;

  void copy(void* dst, MemorySpace dst_space, const void* src, MemorySpace src_space,
            size_t bytes) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto n = static_cast<int64_t>(bytes);
      if (dst_space.is_host()) {
        to_host_[src_space.device_ordinal] += n;
      } else if (src_space.is_host()) {
        from_host_[dst_space.device_ordinal] += n;
      } else {
        on_device_[dst_space.device_ordinal] += n;
      }
    }
    inner_->copy(dst, dst_space, src, src_space, bytes);
  }
  void zero(void* p, MemorySpace space, size_t bytes) override { inner_->zero(p, space, bytes); }
  void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                 size_t rows, MemorySpace space) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      on_device_[space.device_ordinal] += static_cast<int64_t>(row_bytes * rows);
    }
    inner_->copy_rows(dst, dst_pitch, src, src_pitch, row_bytes, rows, space);
  }

  // Bytes GPU `ordinal` sent to the host, received from it, and copied within its memory.
  int64_t to_host(int ordinal) { return get(to_host_, ordinal); }
  int64_t from_host(int ordinal) { return get(from_host_, ordinal); }
  int64_t on_device(int ordinal) { return get(on_device_, ordinal); }

 private:
  int64_t get(const std::map<int, int64_t>& m, int ordinal) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = m.find(ordinal);
    return it == m.end() ? 0 : it->second;
  }
  DeviceMemoryOps* inner_;
  std::mutex mu_;
  std::map<int, int64_t> to_host_, from_host_, on_device_;
};

}  // namespace tessel::testing
