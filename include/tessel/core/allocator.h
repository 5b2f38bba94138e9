// Allocator: where tensor storage comes from.
//
// An Allocator hands out 64-byte-aligned blocks of host memory. host_allocator() is the process
// default (aligned_alloc, with a cache of large freed blocks); TrackingAllocator wraps another allocator and counts live, peak and
// total bytes (each runtime Device owns one). Tensor::empty takes an Allocator*.
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

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace tessel {

// Every block an Allocator returns is aligned to this many bytes (one cache line).
inline constexpr size_t kAllocatorAlignment = 64;

class Allocator : public std::enable_shared_from_this<Allocator> {
 public:
  virtual ~Allocator() = default;

  // A block of at least `bytes` bytes (0 allowed: a unique, valid pointer), aligned to
  // kAllocatorAlignment, contents unspecified. Out of memory: Error kUnavailable naming the
  // size and the allocator. Never returns null.
  virtual void* allocate(size_t bytes) = 0;
  // Frees a block from allocate(); `bytes` is the size that was requested. p may not be null.
  virtual void deallocate(void* p, size_t bytes) noexcept = 0;
  // For messages: "host", a device name, ...
  virtual std::string_view name() const = 0;
};

// The process default: aligned_alloc/free, keeping freed blocks of 64 KiB and more for reuse by
// requests of the same rounded size (up to 1 GiB in all; TESSEL_HOST_CACHE_BYTES sets the limit,
// 0 turns it off), so that repeated large temporaries do not page-fault afresh every time.
// Never destroyed (safe to use from static destructors). A request above 2^47 bytes fails with
// kUnavailable without asking the system.
Allocator* host_allocator();

// Counters of a TrackingAllocator; a consistent-enough snapshot (each field read atomically).
struct MemoryStats {
  int64_t live_bytes = 0;             // allocated and not yet freed
  int64_t peak_bytes = 0;             // highest live_bytes since creation or reset_peak()
  int64_t total_allocated_bytes = 0;  // sum of every allocation's size, ever
  int64_t num_allocations = 0;        // number of allocate() calls that succeeded, ever
};

// Forwards to `base` and counts bytes as requested (not rounded up). Thread-safe (atomics).
class TrackingAllocator : public Allocator {
 public:
  // `base` must outlive this allocator (host_allocator() always does).
  TrackingAllocator(Allocator* base, std::string name);
  TrackingAllocator(const TrackingAllocator&) = delete;
  TrackingAllocator& operator=(const TrackingAllocator&) = delete;

  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) noexcept override;
  std::string_view name() const override { return name_; }

  MemoryStats stats() const;
  // Sets peak_bytes to the current live_bytes.
  void reset_peak();

 private:
  Allocator* base_;                // where the memory comes from
  std::string name_;               // e.g. a device name
  std::atomic<int64_t> live_{0};   // MemoryStats::live_bytes
  std::atomic<int64_t> peak_{0};   // MemoryStats::peak_bytes
  std::atomic<int64_t> total_{0};  // MemoryStats::total_allocated_bytes
  std::atomic<int64_t> count_{0};  // MemoryStats::num_allocations
};

}  // namespace tessel
