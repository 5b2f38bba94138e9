// Internal: the caching allocator of one GPU's memory.
//
// cudaMalloc and cudaFree are slow (cudaFree synchronises the device), so freed blocks are kept and
// reused by requests of the same rounded size: sizes round up to 512 bytes below 1 MiB and to 2 MiB
// above. When cudaMalloc fails, the caches of every allocator on the GPU (devices may share a GPU)
// are returned to CUDA and the request tried once more; a second failure is kResourceExhausted
// naming the GPU and the size. The tracking allocator above it (Device) counts what tensors hold;
// cached_bytes() is what this one keeps besides.
//
// A block freed by the host may still be read by work queued on the device's stream; it is
// reused only by later work on the same stream or after a synchronising copy, which CUDA orders
// after that work, so reuse is safe without events.
//
// Thread safety: allocate and deallocate from any thread (one mutex).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "tessel/core/allocator.h"

namespace tessel::detail {

class CudaCachingAllocator : public Allocator {
 public:
  CudaCachingAllocator(int ordinal, std::string name);
  // Returns the cached blocks to CUDA (blocks still held by tensors keep this object alive).
  ~CudaCachingAllocator() override;

  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) noexcept override;
  std::string_view name() const override { return name_; }
  MemorySpace memory_space() const override { return MemorySpace::cuda(ordinal_); }

  // Bytes in freed blocks kept for reuse.
  int64_t cached_bytes() const;
  // Returns every cached block to CUDA.
  void empty_cache();

  // The size class of a request (what cudaMalloc is asked for).
  static size_t rounded_size(size_t bytes);

 private:
  void empty_cache_locked();

  int ordinal_;
  std::string name_;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_blocks_;  // by rounded size
  int64_t cached_bytes_ = 0;
};

}  // namespace tessel::detail
