// Device: name, stream and accounting allocator.
#include "tessel/runtime/device.h"

#include <utility>

#include "core/errors.h"

namespace tessel {

Device::Device(DeviceName name, int index)
    : name_(name.to_string()), parsed_name_(std::move(name)), index_(index) {
  if (!parsed_name_.is_fully_specified()) {
    detail::throw_invalid("Device", "device name '{}' is not fully specified", name_);
  }
  if (index_ < 0) detail::throw_invalid("Device", "negative index {} for {}", index_, name_);
  allocator_ = std::make_shared<TrackingAllocator>(host_allocator(), name_);
  stream_ = std::make_unique<Stream>(name_);
}

Device::~Device() = default;

Tensor Device::allocate(const Shape& shape, DType dtype, bool zero_fill) {
  return Tensor::empty(shape, dtype, allocator_.get(), zero_fill);
}

}  // namespace tessel
