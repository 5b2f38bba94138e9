// TrackingAllocator: counts what passes through it and enforces its limit (host_allocator() is in
// host_allocator.cpp).
#include "tessel/core/allocator.h"

#include <algorithm>
#include <mutex>
#include <utility>

#include "core/byte_size.h"
#include "core/errors.h"
#include "core/memory_counters.h"

namespace tessel {
namespace {

// What a request of `bytes` counts as. Requests beyond int64 cannot fit any limit; they are
// counted as 2^62 (so that counters cannot overflow) and the base refuses them in its own words.
int64_t counted(size_t bytes) {
  constexpr size_t kMostCounted = size_t{1} << 62;
  return static_cast<int64_t>(std::min(bytes, kMostCounted));
}

}  // namespace

TrackingAllocator::TrackingAllocator(Allocator* base, std::string name)
    : base_(base), name_(std::move(name)), counters_(std::make_unique<detail::MemoryCounters>()) {
  if (base_ == nullptr) {
    detail::throw_invalid("Allocator", "TrackingAllocator '{}' needs a base allocator", name_);
  }
}

TrackingAllocator::TrackingAllocator(std::shared_ptr<Allocator> base, std::string name)
    : TrackingAllocator(base.get(), std::move(name)) {
  owned_base_ = std::move(base);
}

TrackingAllocator::~TrackingAllocator() = default;

int64_t TrackingAllocator::limit() const { return counters_->limit(); }

void TrackingAllocator::set_limit(int64_t bytes, std::string hint) {
  if (bytes < 1) {
    detail::throw_invalid("Allocator", "memory limit of '{}' must be at least 1 byte, got {}",
                          name_, bytes);
  }
  std::lock_guard<std::mutex> lock(hint_mu_);
  limit_hint_ = std::move(hint);
  counters_->set_limit(bytes);
}

void* TrackingAllocator::allocate(size_t bytes) {
  const int64_t n = counted(bytes);
  const int64_t in_use = counters_->try_reserve(n);
  if (in_use < 0) {
    std::lock_guard<std::mutex> lock(hint_mu_);
    detail::throw_error(ErrorCode::kResourceExhausted, "Allocator",
                        "'{}': allocating {} would exceed its memory limit {} (in use {}){}", name_,
                        detail::format_request_bytes(n), detail::format_bytes(counters_->limit()),
                        detail::format_bytes(counters_->in_use()), limit_hint_);
  }
  void* p = nullptr;
  try {
    p = base_->allocate(bytes);
  } catch (const Error& e) {
    counters_->release(n);
    if (e.code() != ErrorCode::kResourceExhausted) throw;
    throw Error(e.code(), e.component(), fmt::format("'{}': {}", name_, e.message()));
  } catch (...) {
    counters_->release(n);
    throw;
  }
  counters_->count_handed_out(in_use, n);
  return p;
}

void TrackingAllocator::deallocate(void* p, size_t bytes) noexcept {
  base_->deallocate(p, bytes);
  counters_->release(counted(bytes));
}

MemoryStats TrackingAllocator::stats() const { return counters_->stats(); }

void TrackingAllocator::reset_peak() { counters_->reset_peak(); }

}  // namespace tessel
