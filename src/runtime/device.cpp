// Device: name, stream and accounting allocator.
#include "tessel/runtime/device.h"

#include <utility>

#include "core/errors.h"
#include "runtime/gpu_context.h"
#include "runtime/simulated_gpu.h"
#include "tessel/core/host_memory.h"
#include "tessel/core/parallel.h"

namespace tessel {

namespace {

// Ends a refusal's message: where the limit comes from.
constexpr const char* kLimitHint =
    "; set it with RuntimeOptions::memory_limit (Python: Runtime(memory_limit=...)), "
    "Device::set_memory_limit or TESSEL_DEVICE_MEMORY_LIMIT (docs/memory.md)";

}  // namespace

void Device::check_identity() const {
  if (!parsed_name_.is_fully_specified()) {
    detail::throw_invalid("Device", "device name '{}' is not fully specified", name_);
  }
  if (index_ < 0) detail::throw_invalid("Device", "negative index {} for {}", index_, name_);
}

Device::Device(DeviceName name, int index, int64_t memory_limit)
    : name_(name.to_string()), parsed_name_(std::move(name)), index_(index) {
  check_identity();
  if (memory_limit != -1 && memory_limit < 1) {
    detail::throw_invalid("Device", "memory limit of {} must be -1 or at least 1 byte, got {}",
                          name_, memory_limit);
  }
  allocator_ = std::make_shared<TrackingAllocator>(host_allocator(), name_);
  allocator_->set_limit(memory_limit == -1 ? host_memory_limit() : memory_limit, kLimitHint);
  core_share_ = std::make_unique<detail::CpuCoreShare>();
  stream_ = std::make_unique<Stream>(name_);
}

Device::Device(DeviceName name, int index, std::shared_ptr<detail::GpuContext> gpu,
               int64_t memory_limit)
    : name_(name.to_string()), parsed_name_(std::move(name)), index_(index), gpu_(std::move(gpu)) {
  check_identity();
  if (memory_limit != -1 && memory_limit < 1) {
    detail::throw_invalid("Device", "memory limit of {} must be -1 or at least 1 byte, got {}",
                          name_, memory_limit);
  }
  allocator_ = std::make_shared<TrackingAllocator>(gpu_->memory, name_);
  allocator_->set_limit(memory_limit == -1 ? gpu_->total_bytes : memory_limit,
                        "; set it with Device::set_memory_limit");
  stream_ = std::make_unique<Stream>(name_);
}

std::unique_ptr<Device> Device::make_simulated_gpu(DeviceName name, int index,
                                                   int64_t memory_limit) {
  if (memory_limit < 1) {
    detail::throw_invalid("Device", "memory limit of simulated GPU {} must be at least 1 byte, got {}",
                          name.to_string(), memory_limit);
  }
  return std::unique_ptr<Device>(new Device(
      std::move(name), index, detail::make_simulated_gpu_context(index, memory_limit), -1));
}

int Device::gpu_ordinal() const { return gpu_ ? gpu_->ordinal : -1; }

bool Device::is_simulated_gpu() const { return gpu_ && gpu_->simulated; }

void* Device::cuda_stream() const { return gpu_ ? gpu_->stream : nullptr; }

void Device::set_memory_limit(int64_t bytes) {
  if (bytes < 1) {
    detail::throw_invalid("Device", "memory limit of {} must be at least 1 byte, got {}", name_,
                          bytes);
  }
  allocator_->set_limit(bytes, kLimitHint);
}

Device::~Device() = default;

Tensor Device::allocate(const Shape& shape, DType dtype, bool zero_fill) {
  return Tensor::empty(shape, dtype, allocator_.get(), zero_fill);
}

}  // namespace tessel
