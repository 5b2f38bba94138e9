// MemorySpace: where an allocation's bytes live. Host memory is what the CPU reads and writes;
// device memory (a CUDA GPU's) is reached only through copies and device kernels.
//
// Every Allocator says which space its blocks are in (Allocator::memory_space(); host unless
// it says otherwise), and every Tensor knows its storage's (Tensor::memory_space()). Tensor's
// element access (data(), fill, astype, ...) needs host memory; copies (copy_from, clone,
// to_host) work between any two spaces through the DeviceMemoryOps the runtime registers when
// it makes its first GPU device (core cannot call CUDA itself: it sits below the runtime).
//
//   Tensor g = runtime.gpu_devices()[0]->allocate(Shape{4}, DType::kF32);
//   g.memory_space().to_string() == "cuda:0";
//   g.copy_from(Tensor::full({4}, DType::kF32, 1.0));   // host -> device
//   g.to_host().to_vector<float>();                     // {1, 1, 1, 1}
//   g.fill(2.0);   // kFailedPrecondition: fill needs host memory; the tensor is in cuda:0
#pragma once

#include <cstddef>
#include <string>

namespace tessel {

struct MemorySpace {
  // kSimulatedGpu: the memory of a simulated GPU device (runtime.h, TESSEL_SIMULATED_GPUS): host
  // memory underneath, treated as device memory everywhere, so that the GPU code paths (copies,
  // host staging, refusals) run and are tested on machines without a GPU.
  enum class Kind { kHost, kCudaDevice, kSimulatedGpu };
  Kind kind = Kind::kHost;
  int device_ordinal = -1;  // the GPU's ordinal (CUDA's, or the simulated one's); -1: the host

  static MemorySpace host() { return {}; }
  static MemorySpace cuda(int ordinal) { return {Kind::kCudaDevice, ordinal}; }
  static MemorySpace simulated_gpu(int ordinal) { return {Kind::kSimulatedGpu, ordinal}; }
  bool is_host() const { return kind == Kind::kHost; }
  // "host", "cuda:0", "simulated_gpu:0".
  std::string to_string() const;
  bool operator==(const MemorySpace&) const = default;
};

// Byte moves involving device memory, provided by the layer that owns the devices (runtime).
// Each call returns when the bytes are in place (ordered after the device's queued work).
class DeviceMemoryOps {
 public:
  virtual ~DeviceMemoryOps() = default;
  // `bytes` from src (in src_space) to dst (in dst_space); at least one is device memory.
  virtual void copy(void* dst, MemorySpace dst_space, const void* src, MemorySpace src_space,
                    size_t bytes) = 0;
  // Sets `bytes` bytes at p (device memory) to zero.
  virtual void zero(void* p, MemorySpace space, size_t bytes) = 0;
  // A strided copy within one device's memory (`space`): `rows` rows of `row_bytes` bytes, read
  // from src with `src_pitch` bytes between row starts and written to dst with `dst_pitch`.
  virtual void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                         size_t row_bytes, size_t rows, MemorySpace space) = 0;
};

// Installs the DeviceMemoryOps of one kind of device memory (the runtime does, once per kind;
// `ops` lives until exit).
void set_device_memory_ops(MemorySpace::Kind kind, DeviceMemoryOps* ops);
// The ops of `space`'s kind. None installed (no GPU support in this build, or no such device made
// yet): kFailedPrecondition naming `what` and the space, since no such memory can exist then.
DeviceMemoryOps& device_memory_ops(const char* what, MemorySpace space);

}  // namespace tessel
