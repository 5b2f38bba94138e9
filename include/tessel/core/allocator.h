// Allocator: where tensor storage comes from.
//
// An Allocator hands out 64-byte-aligned blocks of host memory. host_allocator() is the process
// default (aligned_alloc, with a cache of large freed blocks, under the process's memory limit of
// host_memory.h); TrackingAllocator wraps another allocator, counts live, peak and total bytes
// and may enforce a limit of its own (each runtime Device owns one). Tensor::empty takes an
// Allocator*.
//
//   auto tracked = std::make_shared<TrackingAllocator>(host_allocator(), "scratch");
//   Tensor t = Tensor::empty(Shape{256}, DType::kF32, tracked.get());  // zero-filled
//   tracked->stats().live_bytes == 1024;   // back to 0 when the last view of t dies
//
// Lifetime: a tensor's storage calls deallocate on the allocator it came from. When the
// allocator is owned by a std::shared_ptr (as every Device's is), the storage shares that
// ownership, so the allocator lives until the last tensor allocated from it dies. Otherwise
// (host_allocator(), an allocator on the stack) the caller keeps it alive that long.
//
// Thread safety: allocate and deallocate may be called from any thread; implementations must
// allow that (host_allocator() and TrackingAllocator do).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "tessel/core/memory_space.h"

namespace tessel {

namespace detail {
class MemoryCounters;  // src/core/memory_counters.h
}  // namespace detail

// Every block an Allocator returns is aligned to this many bytes (one cache line).
inline constexpr size_t kAllocatorAlignment = 64;

class Allocator : public std::enable_shared_from_this<Allocator> {
 public:
  virtual ~Allocator() = default;

  // A block of at least `bytes` bytes (0 allowed: a unique, valid pointer), aligned to
  // kAllocatorAlignment, contents unspecified. Out of memory, or over a memory limit: Error
  // kResourceExhausted naming the size and the allocator. Never returns null.
  virtual void* allocate(size_t bytes) = 0;
  // Frees a block from allocate(); `bytes` is the size that was requested. p may not be null.
  virtual void deallocate(void* p, size_t bytes) noexcept = 0;
  // For messages: "host", a device name, ...
  virtual std::string_view name() const = 0;
  // Where the blocks live (memory_space.h): host memory unless the allocator says otherwise.
  virtual MemorySpace memory_space() const { return MemorySpace::host(); }
};

// The process default: aligned_alloc/free, keeping freed blocks of 64 KiB and more for reuse by
// requests of the same rounded size (up to 1 GiB in all; TESSEL_HOST_CACHE_BYTES sets the limit,
// 0 turns it off), so that repeated large temporaries do not page-fault afresh every time.
// Never destroyed (safe to use from static destructors). A request that would take the bytes it
// holds past host_memory_limit() (host_memory.h), or above 2^47 bytes, fails with
// kResourceExhausted without asking the system; so does one the system refuses.
Allocator* host_allocator();

// Counters of a TrackingAllocator or of host_allocator() (host_memory_stats()); a
// consistent-enough snapshot (each field read atomically). TF's AllocatorStats calls these
// bytes_in_use, peak_bytes_in_use, num_allocs and bytes_limit.
struct MemoryStats {
  int64_t live_bytes = 0;             // allocated and not yet freed
  int64_t peak_bytes = 0;             // highest live_bytes since creation or reset_peak()
  int64_t total_allocated_bytes = 0;  // sum of every allocation's size, ever
  int64_t num_allocations = 0;        // number of allocate() calls that succeeded, ever
  int64_t limit_bytes = 0;            // the memory limit; 0: none
  int64_t cached_bytes = 0;           // freed blocks kept for reuse (host_allocator() only)
};

// Forwards to `base` and counts bytes as requested (not rounded up). With a limit, a request
// that would take live_bytes past it fails with kResourceExhausted before `base` is asked:
//   "'<name>': allocating 100.0 MiB (104857600 bytes) would exceed its memory limit 64.0 MiB (in
//   use 0 B)<hint>"
// A kResourceExhausted of `base` is passed on with this allocator's name in front. A failed
// request counts nothing. Thread-safe (atomics); concurrent requests that would only together
// exceed the limit may both be refused.
class TrackingAllocator : public Allocator {
 public:
  // `base` must outlive this allocator (host_allocator() always does). No limit.
  TrackingAllocator(Allocator* base, std::string name);
  // As above, sharing ownership of `base` (a GPU device's allocator lives as long as the last
  // tensor that holds this one).
  TrackingAllocator(std::shared_ptr<Allocator> base, std::string name);
  ~TrackingAllocator() override;
  TrackingAllocator(const TrackingAllocator&) = delete;
  TrackingAllocator& operator=(const TrackingAllocator&) = delete;

  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) noexcept override;
  std::string_view name() const override { return name_; }
  MemorySpace memory_space() const override { return base_->memory_space(); }

  MemoryStats stats() const;
  // Sets peak_bytes to the current live_bytes.
  void reset_peak();

  // The limit on live_bytes; 0: none.
  int64_t limit() const;
  // Sets it (bytes >= 1, else kInvalidArgument naming the value and the allocator). A limit below
  // live_bytes is allowed: new requests fail until enough is freed. `hint` ends the refusal's
  // message, e.g. "; set it with Device::set_memory_limit". A request racing with the change
  // sees either limit.
  void set_limit(int64_t bytes, std::string hint = {});

 private:
  Allocator* base_;                                   // where the memory comes from
  std::shared_ptr<Allocator> owned_base_;             // base_, when this allocator owns it
  std::string name_;                                  // e.g. a device name
  mutable std::mutex hint_mu_;                        // guards limit_hint_
  std::string limit_hint_;                            // ends a refusal's message
  std::unique_ptr<detail::MemoryCounters> counters_;  // stats() and the limit
};

}  // namespace tessel
