// Runtime: the devices of this process — virtual CPU devices, and GPU devices (by default one per
// visible CUDA GPU) — each with its own stream and accounting.
//
// A Runtime makes N devices named in TensorFlow's form
// "/job:<job>/replica:<replica>/task:<task>/device:CPU:<i>", i = 0..N-1. N comes from
// RuntimeOptions::num_cpu_devices, or when that is -1 from the environment variable
// TESSEL_CPU_DEVICES, or else 4. Runtime::global() is the process-wide default; other
// Runtimes may exist beside it (tests simulate several hosts with one Runtime per task).
//
// GPU devices, "/job:<job>/replica:<replica>/task:<task>/device:GPU:<i>", come from
// RuntimeOptions::gpu_ordinals (GPU:i on CUDA GPU gpu_ordinals[i]), or when that is empty from
// RuntimeOptions::num_gpu_devices (the first N visible GPUs), or when that is -1 from the
// environment variable TESSEL_GPU_DEVICES (a comma-separated list of CUDA ordinals, "0,1"; GPU:i is
// the i-th listed; "none" or "" for none), or else every visible GPU (gpu.h). A build without CUDA,
// or a machine without a GPU, has none. An ordinal listed k times makes k devices that share that
// GPU, as TF's logical GPUs do ("0,0,0,0": a 2x2 GPU mesh on one GPU): each has its own CUDA stream
// and caching allocator, and a memory limit of 1/k of the GPU's memory (on its live bytes; its
// allocator's cached blocks are not counted). Their groups are not NCCL groups (NCCL takes one rank
// per GPU): collectives between them run host-staged (docs/gpu.md).
// RuntimeOptions::num_simulated_gpu_devices (or, when -1, TESSEL_SIMULATED_GPUS, default 0) makes
// that many simulated GPU devices instead of the real ones (Device::make_simulated_gpu: host memory
// treated as device memory, each the size of a CPU device's limit), so that GPU meshes run, slowly,
// on machines without a GPU. They are listed by gpu_devices(), apart from the CPU devices of
// devices(), and found by device(name) like those. A GPU device's memory limit is its GPU's memory,
// shared equally by the devices on that GPU (Device::set_memory_limit changes it).
//
// Each device has a memory limit (Device::memory_limit(), docs/memory.md): from
// RuntimeOptions::memory_limit, or when that is -1 from TESSEL_DEVICE_MEMORY_LIMIT (a byte
// count: "1073741824", "1G", "512MiB"), or else an equal share of the process's host memory
// limit (host_memory_limit() / N, core/host_memory.h): the devices share one host's memory as
// accelerators of a machine share its board. Devices of several Runtimes in one process each
// get their Runtime's share; the host limit still bounds their sum.
//
//   Runtime rt({.num_cpu_devices = 2, .task = 1});
//   rt.device(1).name() == "/job:localhost/replica:0/task:1/device:CPU:1";
//   rt.device(0).stream().enqueue("work", [] { /* ... */ });
//   rt.synchronize();   // waits for every device; throws the first error, naming device and op
//
// Destruction shuts every stream down in device order (each drains its queue, see Stream),
// then destroys the devices. Work that enqueues onto an already shut-down device fails there.
// Tensors allocated from the devices stay valid.
//
// Thread safety: every method may be called from any thread. global() is created once, on first
// use, and lives until static destruction.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <typeindex>
#include <vector>

#include "tessel/mesh/topology.h"
#include "tessel/runtime/device.h"

namespace tessel {

// The most virtual CPU devices one Runtime may have.
inline constexpr int kMaxCpuDevices = 1024;

struct RuntimeOptions {
  // Number of virtual CPU devices, 1..kMaxCpuDevices; -1: TESSEL_CPU_DEVICES, default 4.
  int num_cpu_devices = -1;
  std::string job = "localhost";  // a letter, then letters, digits or '_'
  int replica = 0;                // >= 0
  int task = 0;                   // >= 0
  // Bytes each device may hold (TF's LogicalDeviceConfiguration.memory_limit, which counts MiB),
  // >= 1; -1: TESSEL_DEVICE_MEMORY_LIMIT, else host_memory_limit() / num_cpu_devices.
  int64_t memory_limit = -1;
  // Number of GPU devices, 0..visible_gpu_count() (the first N visible GPUs); -1:
  // TESSEL_GPU_DEVICES, else every visible GPU.
  int num_gpu_devices = -1;
  // Simulated GPU devices, 0..kMaxCpuDevices, replacing the real ones when above 0; -1:
  // TESSEL_SIMULATED_GPUS, else 0.
  int num_simulated_gpu_devices = -1;
  // The CUDA ordinal of each GPU device (GPU:i on gpu_ordinals[i]), each a visible GPU, at most
  // kMaxCpuDevices of them; an ordinal may repeat (devices sharing a GPU). Non-empty: takes the
  // place of num_gpu_devices (which must then be -1) and of TESSEL_GPU_DEVICES, may not be given
  // beside num_simulated_gpu_devices above 0, and is not replaced by TESSEL_SIMULATED_GPUS.
  std::vector<int> gpu_ordinals = {};
};

class Runtime {
 public:
  // Creates the devices and starts their streams. A bad option or TESSEL_CPU_DEVICES value (not
  // a positive integer up to kMaxCpuDevices, a bad job name, a negative replica or task, a
  // memory limit that is neither -1 nor positive, a malformed TESSEL_DEVICE_MEMORY_LIMIT, a GPU
  // count above the visible GPUs, a gpu_ordinals or TESSEL_GPU_DEVICES entry that is not a
  // visible ordinal, gpu_ordinals beside a num_gpu_devices other than -1):
  // kInvalidArgument naming the value.
  explicit Runtime(RuntimeOptions options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // The process-wide runtime, created on first call (thread-safe): default options, except job
  // and task, which are this client's (clients.h: "localhost" and 0 for a single process,
  // "worker" and the client id under mpirun or with TESSEL_CLIENT_ID), so that the devices of a
  // create_distributed_mesh are this runtime's. If that creation throws (a bad
  // TESSEL_CPU_DEVICES or client variable), the next call tries again.
  static Runtime& global();

  // The options with num_cpu_devices resolved to the actual count, memory_limit to the
  // devices' limit when they were made, and num_gpu_devices and gpu_ordinals to the GPU devices
  // made (for real GPUs: their ordinals).
  const RuntimeOptions& options() const { return options_; }
  // Unique among the Runtimes of this process, never reused (keys per-runtime state of higher
  // layers, such as the communicator groups of relayout).
  uint64_t id() const { return id_; }
  int num_devices() const { return static_cast<int>(devices_.size()); }
  // By position, 0 <= index < num_devices(); otherwise kOutOfRange naming index and count.
  Device& device(int index) const;
  // By name: a full name, or a partial one that names at least the type and id and whose parts
  // all match ("/device:CPU:1", "/cpu:1", "/task:0/device:CPU:1"). Malformed or without type
  // and id: kInvalidArgument; no such device here: kNotFound. Both quote the name.
  Device& device(std::string_view name) const;
  // Every CPU device, in index order.
  const std::vector<Device*>& devices() const { return device_ptrs_; }
  // Every GPU device, GPU:0 first (Device::index() is the position here).
  const std::vector<Device*>& gpu_devices() const { return gpu_device_ptrs_; }

  // The one-host topology of this runtime's devices: Topology::for_hosts(1, num_devices(), "CPU").
  Topology topology() const;

  // Waits for every device's stream (a GPU device's CUDA stream too). If work failed on some devices, throws the failure of the
  // lowest-indexed one (its code; "Stream: op '<op>' on <device> failed: ..."), after waiting for
  // and clearing the others, whose device and op the message lists.
  void synchronize();
  // As synchronize(), waiting at most `timeout` in all. Devices still busy then:
  // kDeadlineExceeded naming each with its running (or next) op and pending count. A failure
  // takes precedence over a timeout. A negative timeout: kInvalidArgument.
  void synchronize(std::chrono::milliseconds timeout);

  // Per-runtime state of a higher layer (comm's communicator groups and cluster): the object of
  // type T attached to this runtime, made by `make()` on the first call for T and the same object
  // on every later call. Attachments die with the Runtime, after its streams stop, so no state
  // keyed by a dead runtime outlives it (holders of the shared_ptr keep theirs alive).
  template <class T>
  std::shared_ptr<T> attachment(const std::function<std::shared_ptr<T>()>& make) const {
    std::lock_guard<std::mutex> lock(attachments_mu_);
    std::shared_ptr<void>& slot = attachments_[std::type_index(typeid(T))];
    if (!slot) slot = make();
    return std::static_pointer_cast<T>(slot);
  }

 private:
  RuntimeOptions options_;                        // as resolved
  uint64_t id_ = 0;
  std::vector<std::unique_ptr<Device>> devices_;  // owned, in index order
  std::vector<Device*> device_ptrs_;              // the same, for devices()
  std::vector<std::unique_ptr<Device>> gpu_devices_;  // owned, GPU:0 first
  std::vector<Device*> gpu_device_ptrs_;              // the same, for gpu_devices()
  mutable std::mutex attachments_mu_;
  mutable std::map<std::type_index, std::shared_ptr<void>> attachments_;  // see attachment()
};

}  // namespace tessel
