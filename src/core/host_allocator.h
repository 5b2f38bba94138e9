// Internal: the process's host allocator (allocator.h's host_allocator()), with the accounting
// and the limit of host_memory.h.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "core/memory_counters.h"
#include "tessel/core/allocator.h"

namespace tessel::detail {

// The default of host_memory_limit() (host_memory.h): from the environment and the host's memory.
// A malformed variable: kInvalidArgument naming it.
int64_t default_host_memory_limit();

// aligned_alloc/free with a cache of large freed blocks. Counts the bytes it holds (in use and
// cached, sizes rounded up to kAllocatorAlignment) and refuses a request that would take them
// past its limit; see host_memory.h.
class HostAllocator final : public Allocator {
 public:
  explicit HostAllocator(int64_t limit);

  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) noexcept override;
  std::string_view name() const override { return "host"; }

  int64_t limit() const { return counters_.limit(); }
  // bytes >= 1 (kInvalidArgument otherwise).
  void set_limit(int64_t bytes);
  MemoryStats stats() const;
  void reset_peak();

  // The one instance, never destroyed (host_allocator() returns it).
  static HostAllocator& instance();

 private:
  // A cached block of exactly `rounded` bytes, now in use; null if there is none.
  void* take_cached(size_t rounded);
  // Counts `rounded` more bytes in use if the bytes held stay within the limit, after giving the
  // cache back if needed, and returns the bytes in use; otherwise throws kResourceExhausted
  // naming the request.
  int64_t reserve(size_t requested, size_t rounded);
  // Frees every cached block.
  void release_cache();

  const size_t cache_limit_;            // most bytes the cache keeps
  MemoryCounters counters_;             // blocks handed out (sizes rounded) and the limit
  std::atomic<int64_t> cached_{0};      // MemoryStats::cached_bytes (changed under mu_)
  std::mutex mu_;                       // guards cache_
  std::multimap<size_t, void*> cache_;  // freed large blocks by rounded size
};

}  // namespace tessel::detail
