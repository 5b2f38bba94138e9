// host_allocator(): malloc / aligned_alloc with a cache of large blocks, under the process's memory limit.
#include "core/host_allocator.h"

#include <cstdlib>

#include "core/byte_size.h"
#include "core/env.h"
#include "core/errors.h"

namespace tessel {
namespace detail {
namespace {

// Above the x86-64/AArch64 user address space: cannot succeed, and asking the system for it
// would abort under sanitizers (allocator_may_return_null=0) instead of failing cleanly.
constexpr size_t kMaxHostAllocation = size_t{1} << 47;

// Blocks of at least this size are kept for reuse when freed: a fresh large block costs a page
// fault per 4 KiB on first touch (a 64 MiB relayout output: 16K faults, far more than the copy).
// glibc returns such blocks to the system (mmap above its threshold, heap trimming in the
// replica threads' arenas): with 1 MiB here, a replicated MLP step of 128-512 KiB tensors took
// about 1000 faults and 1.5-2x its time (docs/benchmarks-history.md, bench replicate).
constexpr size_t kCachedBlockBytes = size_t{1} << 16;
// At most this many bytes are kept (TESSEL_HOST_CACHE_BYTES overrides; 0 turns the cache off).
constexpr size_t kDefaultCacheBytes = size_t{1} << 30;

size_t cache_limit() {
  const auto bytes = env_byte_size("TESSEL_HOST_CACHE_BYTES", 0, "Allocator");
  return bytes ? static_cast<size_t>(*bytes) : kDefaultCacheBytes;
}

// Blocks up to this size come from malloc, aligned by hand: glibc serves small mallocs from a
// per-thread cache, while aligned_alloc takes its slow path and fragments the heap (an op on a
// mesh of tiny blocks spent a fifth of its time there: tessel bench dispatch).
constexpr size_t kSmallBlockBytes = 960;

// A small block: `rounded` + one alignment from malloc, the aligned address handed out and the
// address malloc gave just below it (malloc's 16-byte alignment leaves at least 16 bytes).
void* allocate_small(size_t rounded) {
  void* raw = std::malloc(rounded + kAllocatorAlignment);
  if (raw == nullptr) return nullptr;
  const auto aligned = (reinterpret_cast<uintptr_t>(raw) + kAllocatorAlignment) &
                       ~static_cast<uintptr_t>(kAllocatorAlignment - 1);
  reinterpret_cast<void**>(aligned)[-1] = raw;
  return reinterpret_cast<void*>(aligned);
}

// A block of `rounded` bytes from the system: small ones by malloc, the rest by aligned_alloc.
void* system_allocate(size_t rounded) {
  return rounded <= kSmallBlockBytes ? allocate_small(rounded)
                                     : std::aligned_alloc(kAllocatorAlignment, rounded);
}

// Gives back a block system_allocate made for `rounded` bytes.
void system_free(void* p, size_t rounded) {
  std::free(rounded <= kSmallBlockBytes ? static_cast<void**>(p)[-1] : p);
}

// aligned_alloc needs a size that is a multiple of the alignment; at least one line.
size_t round_up(size_t bytes) {
  const size_t a = kAllocatorAlignment;
  return bytes == 0 ? a : (bytes + a - 1) / a * a;
}

constexpr const char* kLimitHint =
    "; set it with set_host_memory_limit, TESSEL_HOST_MEMORY_LIMIT or "
    "TESSEL_PER_PROCESS_MEMORY_FRACTION (docs/memory.md)";

}  // namespace

HostAllocator::HostAllocator(int64_t limit) : cache_limit_(cache_limit()), counters_(limit) {}

HostAllocator& HostAllocator::instance() {
  // Never destroyed, by design: tensors may be freed from static destructors.
  static HostAllocator* const allocator = new HostAllocator(default_host_memory_limit());
  return *allocator;
}

void HostAllocator::set_limit(int64_t bytes) {
  if (bytes < 1) {
    throw_invalid("Allocator", "the host memory limit must be at least 1 byte, got {}", bytes);
  }
  counters_.set_limit(bytes);
}

void* HostAllocator::allocate(size_t bytes) {
  if (bytes > kMaxHostAllocation) {
    throw_error(ErrorCode::kResourceExhausted, "Allocator",
                "host cannot allocate {} bytes (more than 2^47, beyond any address space)", bytes);
  }
  const size_t rounded = round_up(bytes);
  if (void* p = take_cached(rounded)) return p;
  const int64_t in_use = reserve(bytes, rounded);
  void* p = system_allocate(rounded);
  if (p == nullptr) {
    release_cache();  // give the cached blocks back and try once more
    p = system_allocate(rounded);
  }
  if (p == nullptr) {
    counters_.release(static_cast<int64_t>(rounded));
    throw_error(ErrorCode::kResourceExhausted, "Allocator",
                "host cannot allocate {}: the system refused (in use {})",
                format_request_bytes(static_cast<int64_t>(bytes)),
                format_bytes(counters_.in_use()));
  }
  counters_.count_handed_out(in_use, static_cast<int64_t>(rounded));
  return p;
}

void* HostAllocator::take_cached(size_t rounded) {
  if (rounded < kCachedBlockBytes) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cache_.find(rounded);
  if (it == cache_.end()) return nullptr;
  void* p = it->second;
  cache_.erase(it);
  // The block moves from cached to in use: the bytes held do not change.
  const auto n = static_cast<int64_t>(rounded);
  const int64_t in_use = counters_.add_in_use(n);
  cached_.fetch_sub(n, std::memory_order_relaxed);
  counters_.count_handed_out(in_use, n);
  return p;
}

int64_t HostAllocator::reserve(size_t requested, size_t rounded) {
  const auto n = static_cast<int64_t>(rounded);
  int64_t in_use = counters_.try_reserve(n, cached_.load(std::memory_order_relaxed));
  if (in_use < 0) {
    release_cache();  // cached blocks must not cause a refusal
    in_use = counters_.try_reserve(n);
  }
  if (in_use < 0) {
    throw_error(ErrorCode::kResourceExhausted, "Allocator",
                "host: allocating {} would exceed the process's host memory limit {} (in use "
                "{}){}",
                format_request_bytes(static_cast<int64_t>(requested)), format_bytes(limit()),
                format_bytes(counters_.in_use()), kLimitHint);
  }
  return in_use;
}

void HostAllocator::deallocate(void* p, size_t bytes) noexcept {
  const size_t rounded = round_up(bytes);
  const auto n = static_cast<int64_t>(rounded);
  if (rounded >= kCachedBlockBytes) {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<size_t>(cached_.load(std::memory_order_relaxed)) + rounded <= cache_limit_) {
      cache_.emplace(rounded, p);
      cached_.fetch_add(n, std::memory_order_relaxed);
      counters_.release(n);
      return;
    }
  }
  system_free(p, rounded);
  counters_.release(n);
}

void HostAllocator::release_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [size, p] : cache_) std::free(p);
  cache_.clear();
  cached_.store(0, std::memory_order_relaxed);
}

MemoryStats HostAllocator::stats() const {
  MemoryStats s = counters_.stats();
  s.cached_bytes = cached_.load(std::memory_order_relaxed);
  return s;
}

void HostAllocator::reset_peak() { counters_.reset_peak(); }

}  // namespace detail

Allocator* host_allocator() { return &detail::HostAllocator::instance(); }

}  // namespace tessel
