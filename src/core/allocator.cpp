// host_allocator() and TrackingAllocator.
#include "tessel/core/allocator.h"

#include <cstdlib>
#include <map>
#include <mutex>

#include "core/errors.h"

namespace tessel {
namespace {

// Above the x86-64/AArch64 user address space: cannot succeed, and asking the system for it
// would abort under sanitizers (allocator_may_return_null=0) instead of failing cleanly.
constexpr size_t kMaxHostAllocation = size_t{1} << 47;

// Blocks of at least this size are kept for reuse when freed: a fresh large block costs a page
// fault per 4 KiB on first touch (a 64 MiB relayout output: 16K faults, far more than the copy).
// glibc returns such blocks to the system (mmap above its threshold, heap trimming in the
// replica threads' arenas): with 1 MiB here, a replicated MLP step of 128-512 KiB tensors took
// about 1000 faults and 1.5-2x its time (docs/benchmarks.md, bench replicate).
constexpr size_t kCachedBlockBytes = size_t{1} << 16;
// At most this many bytes are kept (TESSEL_HOST_CACHE_BYTES overrides; 0 turns the cache off).
constexpr size_t kDefaultCacheBytes = size_t{1} << 30;

size_t cache_limit() {
  if (const char* v = std::getenv("TESSEL_HOST_CACHE_BYTES")) {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v, &end, 10);
    if (end != v && *end == '\0') return static_cast<size_t>(n);
  }
  return kDefaultCacheBytes;
}

class HostAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    if (bytes > kMaxHostAllocation) {
      detail::throw_error(ErrorCode::kUnavailable, "Allocator",
                          "host cannot allocate {} bytes (more than 2^47)", bytes);
    }
    const size_t rounded = round(bytes);
    if (rounded >= kCachedBlockBytes) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = cache_.find(rounded);
      if (it != cache_.end()) {
        void* p = it->second;
        cache_.erase(it);
        cached_bytes_ -= rounded;
        return p;
      }
    }
    void* p = std::aligned_alloc(kAllocatorAlignment, rounded);
    if (p == nullptr) {
      release_cache();  // give the cached blocks back and try once more
      p = std::aligned_alloc(kAllocatorAlignment, rounded);
    }
    if (p == nullptr) {
      detail::throw_error(ErrorCode::kUnavailable, "Allocator",
                          "host cannot allocate {} bytes: out of memory", bytes);
    }
    return p;
  }

  void deallocate(void* p, size_t bytes) noexcept override {
    const size_t rounded = round(bytes);
    if (rounded >= kCachedBlockBytes) {
      std::lock_guard<std::mutex> lock(mu_);
      if (cached_bytes_ + rounded <= limit_) {
        cache_.emplace(rounded, p);
        cached_bytes_ += rounded;
        return;
      }
    }
    std::free(p);
  }

  std::string_view name() const override { return "host"; }

 private:
  // aligned_alloc needs a size that is a multiple of the alignment; at least one line.
  static size_t round(size_t bytes) {
    const size_t a = kAllocatorAlignment;
    return bytes == 0 ? a : (bytes + a - 1) / a * a;
  }

  void release_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [size, p] : cache_) std::free(p);
    cache_.clear();
    cached_bytes_ = 0;
  }

  const size_t limit_ = cache_limit();
  std::mutex mu_;
  std::multimap<size_t, void*> cache_;  // freed large blocks by rounded size
  size_t cached_bytes_ = 0;
};

}  // namespace

Allocator* host_allocator() {
  static Allocator* const allocator = new HostAllocator();  // never destroyed, by design
  return allocator;
}

TrackingAllocator::TrackingAllocator(Allocator* base, std::string name)
    : base_(base), name_(std::move(name)) {
  if (base_ == nullptr) {
    detail::throw_invalid("Allocator", "TrackingAllocator '{}' needs a base allocator", name_);
  }
}

void* TrackingAllocator::allocate(size_t bytes) {
  void* p = base_->allocate(bytes);
  const auto n = static_cast<int64_t>(bytes);
  const int64_t live = live_.fetch_add(n, std::memory_order_relaxed) + n;
  int64_t peak = peak_.load(std::memory_order_relaxed);
  while (live > peak && !peak_.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
  total_.fetch_add(n, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  return p;
}

void TrackingAllocator::deallocate(void* p, size_t bytes) noexcept {
  base_->deallocate(p, bytes);
  live_.fetch_sub(static_cast<int64_t>(bytes), std::memory_order_relaxed);
}

MemoryStats TrackingAllocator::stats() const {
  MemoryStats s;
  s.live_bytes = live_.load(std::memory_order_relaxed);
  s.peak_bytes = peak_.load(std::memory_order_relaxed);
  s.total_allocated_bytes = total_.load(std::memory_order_relaxed);
  s.num_allocations = count_.load(std::memory_order_relaxed);
  return s;
}

void TrackingAllocator::reset_peak() {
  peak_.store(live_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  // An allocation racing with the store may have missed raising the peak: raise it now, so
  // peak_bytes >= live_bytes holds once the racing calls return.
  const int64_t live = live_.load(std::memory_order_relaxed);
  int64_t peak = peak_.load(std::memory_order_relaxed);
  while (live > peak && !peak_.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

}  // namespace tessel
