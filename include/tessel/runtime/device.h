// Device: one device of this process: a name, an in-order stream with its own worker thread, and
// an allocator that accounts every byte allocated through it and refuses what would exceed the
// device's memory limit (TF's LogicalDeviceConfiguration.memory_limit, here in bytes).
//
// A CPU device's memory is host memory. A GPU device ("/job:.../device:GPU:i", made by a Runtime
// built with CUDA for each visible GPU) allocates from its GPU's memory through a caching
// allocator (freed blocks are kept for reuse; memory_stats() counts what tensors hold, live and
// peak), and owns a CUDA stream (cuda_stream()) on which its kernels, copies and NCCL
// collectives are ordered; its worker thread is where host code that launches them runs.
// Tensors it allocates live in device memory (Tensor::memory_space()): copy_from / to_host move
// them, element access on the host refuses them.
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

namespace detail {
struct GpuContext;    // src/runtime/cuda/gpu_context.h
class CpuCoreShare;   // tessel/core/parallel.h
}

class Device {
 public:
  // Starts the device's stream. `name` must be fully specified (kInvalidArgument quoting it
  // otherwise); `index` is its position in its runtime. memory_limit: bytes, >= 1, or -1 for
  // host_memory_limit() (the device may use what the process may); anything else:
  // kInvalidArgument naming the value.
  Device(DeviceName name, int index, int64_t memory_limit = -1);
  // Drains and joins the stream (see Stream); the allocator lives on while tensors use it.
  ~Device();
  // A GPU device on CUDA GPU `cuda_ordinal` (Runtime makes them; see runtime.h). memory_limit:
  // bytes >= 1, or -1 for the GPU's total memory. Built without CUDA: kUnavailable; an ordinal
  // that is not a visible GPU: kInvalidArgument naming it and the visible count.
  static std::unique_ptr<Device> make_gpu(DeviceName name, int index, int cuda_ordinal,
                                          int64_t memory_limit = -1);
  // A simulated GPU device (runtime.h, TESSEL_SIMULATED_GPUS): a GPU device whose memory is host
  // memory tagged as its own (MemorySpace::simulated_gpu(index)), with no CUDA stream; every op
  // runs host-staged on it. memory_limit: bytes >= 1 (its size).
  static std::unique_ptr<Device> make_simulated_gpu(DeviceName name, int index,
                                                    int64_t memory_limit);
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // "/job:localhost/replica:0/task:0/device:CPU:3".
  const std::string& name() const { return name_; }
  const DeviceName& parsed_name() const { return parsed_name_; }
  // Position in the runtime's devices() (equal to parsed_name().id for a Runtime's devices).
  int index() const { return index_; }

  // "CPU" or "GPU" (the name's device type).
  const std::string& device_type() const { return *parsed_name_.type; }
  // GPU devices: the CUDA ordinal of the GPU (a simulated GPU's: its index); CPU devices: -1.
  int gpu_ordinal() const;
  // GPU devices on a CUDA GPU: the device's CUDA stream (a cudaStream_t); CPU devices and
  // simulated GPUs: null.
  void* cuda_stream() const;
  // True for a simulated GPU device.
  bool is_simulated_gpu() const;
  // Where the device's tensors live: host memory, or its GPU's.
  MemorySpace memory_space() const { return allocator_->memory_space(); }

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
  // A GPU device over `gpu` (make_gpu).
  Device(DeviceName name, int index, std::shared_ptr<detail::GpuContext> gpu, int64_t memory_limit);
  // Checks the name and index of either kind of device.
  void check_identity() const;

  std::string name_;                              // name as text
  DeviceName parsed_name_;                        // name as parts
  int index_;                                     // position in the runtime
  std::shared_ptr<TrackingAllocator> allocator_;  // shared with the storage it allocated
  std::shared_ptr<detail::GpuContext> gpu_;       // GPU devices: stream and memory; else null
  std::unique_ptr<detail::CpuCoreShare> core_share_;  // CPU devices: their share of the cores
  std::unique_ptr<Stream> stream_;                // destroyed (drained) first
};

}  // namespace tessel
