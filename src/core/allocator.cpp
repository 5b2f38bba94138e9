// host_allocator() and TrackingAllocator.
#include "tessel/allocator.h"

#include <cstdlib>

#include "core/errors.h"

namespace tessel {
namespace {

// Above the x86-64/AArch64 user address space: cannot succeed, and asking the system for it
// would abort under sanitizers (allocator_may_return_null=0) instead of failing cleanly.
constexpr size_t kMaxHostAllocation = size_t{1} << 47;

class HostAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    if (bytes > kMaxHostAllocation) {
      detail::throw_error(ErrorCode::kUnavailable, "Allocator",
                          "host cannot allocate {} bytes (more than 2^47)", bytes);
    }
    // aligned_alloc needs a size that is a multiple of the alignment; at least one line.
    const size_t a = kAllocatorAlignment;
    const size_t rounded = bytes == 0 ? a : (bytes + a - 1) / a * a;
    void* p = std::aligned_alloc(a, rounded);
    if (p == nullptr) {
      detail::throw_error(ErrorCode::kUnavailable, "Allocator",
                          "host cannot allocate {} bytes: out of memory", bytes);
    }
    return p;
  }

  void deallocate(void* p, size_t) noexcept override { std::free(p); }

  std::string_view name() const override { return "host"; }
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
