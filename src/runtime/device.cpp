// Device: name, stream and accounting allocator.
#include "tessel/runtime/device.h"

#include <utility>

#include "core/errors.h"
#include "tessel/core/host_memory.h"

namespace tessel {

namespace {

// Ends a refusal's message: where the limit comes from.
constexpr const char* kLimitHint =
    "; set it with RuntimeOptions::memory_limit (Python: Runtime(memory_limit=...)), "
    "Device::set_memory_limit or TESSEL_DEVICE_MEMORY_LIMIT (docs/memory.md)";

}  // namespace

Device::Device(DeviceName name, int index, int64_t memory_limit)
    : name_(name.to_string()), parsed_name_(std::move(name)), index_(index) {
  if (!parsed_name_.is_fully_specified()) {
    detail::throw_invalid("Device", "device name '{}' is not fully specified", name_);
  }
  if (index_ < 0) detail::throw_invalid("Device", "negative index {} for {}", index_, name_);
  if (memory_limit != -1 && memory_limit < 1) {
    detail::throw_invalid("Device", "memory limit of {} must be -1 or at least 1 byte, got {}",
                          name_, memory_limit);
  }
  allocator_ = std::make_shared<TrackingAllocator>(host_allocator(), name_);
  allocator_->set_limit(memory_limit == -1 ? host_memory_limit() : memory_limit, kLimitHint);
  stream_ = std::make_unique<Stream>(name_);
}

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
