// Internal: the counters behind MemoryStats (bytes in use, peak, totals, limit), lock-free, shared
// by TrackingAllocator and the host allocator.
#pragma once

#include <atomic>
#include <cstdint>

#include "tessel/core/allocator.h"

namespace tessel::detail {

class MemoryCounters {
 public:
  // limit 0: none.
  explicit MemoryCounters(int64_t limit = 0) : limit_(limit) {}

  int64_t limit() const { return limit_.load(std::memory_order_relaxed); }
  // The caller checks the value (each names its own component).
  void set_limit(int64_t bytes) { limit_.store(bytes, std::memory_order_relaxed); }
  int64_t in_use() const { return in_use_.load(std::memory_order_relaxed); }

  // Counts `bytes` more in use if in use + `also_held` then stays within the limit and returns
  // the new bytes in use; otherwise counts nothing and returns -1. Concurrent requests that would
  // only together exceed the limit may both be refused.
  int64_t try_reserve(int64_t bytes, int64_t also_held = 0) {
    const int64_t in_use = in_use_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    const int64_t limit = this->limit();
    if (limit > 0 && in_use + also_held > limit) {
      release(bytes);
      return -1;
    }
    return in_use;
  }
  // Counts `bytes` more in use without a check (a block that was already held, elsewhere).
  int64_t add_in_use(int64_t bytes) {
    return in_use_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  }
  void release(int64_t bytes) { in_use_.fetch_sub(bytes, std::memory_order_relaxed); }
  // Records a block of `bytes` handed out, with `in_use` the count after it was reserved.
  void count_handed_out(int64_t in_use, int64_t bytes) {
    raise_peak(in_use);
    total_.fetch_add(bytes, std::memory_order_relaxed);
    count_.fetch_add(1, std::memory_order_relaxed);
  }

  // Every field but cached_bytes.
  MemoryStats stats() const {
    MemoryStats s;
    s.live_bytes = in_use();
    s.peak_bytes = peak_.load(std::memory_order_relaxed);
    s.total_allocated_bytes = total_.load(std::memory_order_relaxed);
    s.num_allocations = count_.load(std::memory_order_relaxed);
    s.limit_bytes = limit();
    return s;
  }
  // Sets the peak to the bytes in use now.
  void reset_peak() {
    peak_.store(in_use(), std::memory_order_relaxed);
    // An allocation racing with the store may have missed raising the peak: raise it now, so
    // peak >= in use holds once the racing calls return.
    raise_peak(in_use());
  }

 private:
  void raise_peak(int64_t value) {
    int64_t seen = peak_.load(std::memory_order_relaxed);
    while (value > seen && !peak_.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
    }
  }

  std::atomic<int64_t> limit_;      // MemoryStats::limit_bytes
  std::atomic<int64_t> in_use_{0};  // MemoryStats::live_bytes
  std::atomic<int64_t> peak_{0};    // MemoryStats::peak_bytes
  std::atomic<int64_t> total_{0};   // MemoryStats::total_allocated_bytes
  std::atomic<int64_t> count_{0};   // MemoryStats::num_allocations
};

}  // namespace tessel::detail
