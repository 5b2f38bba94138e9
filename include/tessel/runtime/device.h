// Device: one virtual CPU device of this process: a name, an in-order stream with its own worker
// thread, and an allocator that accounts every byte allocated through it and refuses what would
// exceed the device's memory limit (TF's LogicalDeviceConfiguration.memory_limit, here in bytes).
//
// Devices are made by a Runtime, which owns them; user code holds references.
//
//   Device& d = runtime.device(0);       // "/job:localhost/replica:0/task:0/device:CPU:0"
//   Tensor t = d.allocate(Shape{1024}, DType::kF32);
//   d.memory_stats().live_bytes == 4096; // back to 0 when the last view of t dies
//   d.stream().enqueue("fill", [t]() mutable { t.fill(1.0); });
//   d.set_memory_limit(int64_t{64} << 20);
//   d.allocate(Shape{25 << 20}, DType::kF32);   // 100 MiB: kResourceExhausted, nothing counted
//
// Memory limit: a request that would take memory_stats().live_bytes past memory_limit() fails
// before any memory is taken, with kResourceExhausted naming the device, the request (bytes,
// and shape and dtype through Tensor), the limit and the bytes in use. Every device's memory
// also comes out of the process's host limit (core/host_memory.h), which is checked next.
// A Runtime gives its devices equal shares of the host limit by default (runtime.h).
//
// A tensor allocated from a device may outlive the device and its Runtime: its storage shares
// ownership of the device's allocator (see allocator.h), which frees the memory at the end.
//
// Thread safety: every method may be called from any thread; the counters are atomics.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tessel/core/allocator.h"
#include "tessel/core/device_name.h"
#include "tessel/core/dtype.h"
#include "tessel/core/shape.h"
#include "tessel/core/tensor.h"
#include "tessel/runtime/stream.h"

namespace tessel {

class Device {
 public:
  // Starts the device's stream. `name` must be fully specified (kInvalidArgument quoting it
  // otherwise); `index` is its position in its runtime. memory_limit: bytes, >= 1, or -1 for
  // host_memory_limit() (the device may use what the process may); anything else:
  // kInvalidArgument naming the value.
  Device(DeviceName name, int index, int64_t memory_limit = -1);
  // Drains and joins the stream (see Stream); the allocator lives on while tensors use it.
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // "/job:localhost/replica:0/task:0/device:CPU:3".
  const std::string& name() const { return name_; }
  const DeviceName& parsed_name() const { return parsed_name_; }
  // Position in the runtime's devices() (equal to parsed_name().id for a Runtime's devices).
  int index() const { return index_; }

  // The device's in-order work queue.
  Stream& stream() { return *stream_; }
  // The accounting allocator; valid while the device lives, and longer for tensors that hold it.
  Allocator* allocator() const { return allocator_.get(); }

  // Bytes allocated through allocator(): live, peak, total, number of allocations and the limit.
  MemoryStats memory_stats() const { return allocator_->stats(); }
  // Sets peak_bytes to the current live_bytes.
  void reset_peak_memory() { allocator_->reset_peak(); }

  // The most bytes the device's tensors may hold at once (memory_stats().limit_bytes).
  int64_t memory_limit() const { return allocator_->limit(); }
  // Sets it: bytes >= 1 (kInvalidArgument otherwise). Tensors already allocated stay valid when
  // the new limit is below what they use; new requests fail until enough is freed.
  void set_memory_limit(int64_t bytes);

  // A contiguous tensor from allocator(), zero-filled unless zero_fill is false (see
  // Tensor::empty). Over the memory limit, or out of memory: kResourceExhausted naming the
  // device, the size, the shape and dtype, and the limit.
  Tensor allocate(const Shape& shape, DType dtype, bool zero_fill = true);

 private:
  std::string name_;                              // name as text
  DeviceName parsed_name_;                        // name as parts
  int index_;                                     // position in the runtime
  std::shared_ptr<TrackingAllocator> allocator_;  // shared with the storage it allocated
  std::unique_ptr<Stream> stream_;                // destroyed (drained) first
};

}  // namespace tessel
