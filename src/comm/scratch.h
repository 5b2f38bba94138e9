// Internal: temporary memory of one collective call, from the communicator's scratch allocator
// (a device's accounting allocator, so that per-device memory statistics include it).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tessel/core/allocator.h"

namespace tessel::detail {

class ScratchBuffer {
 public:
  // `allocator` null: the host allocator. Zero bytes allocate nothing.
  ScratchBuffer(Allocator* allocator, size_t bytes)
      : allocator_(allocator ? allocator : host_allocator()), bytes_(bytes),
        data_(bytes ? static_cast<uint8_t*>(allocator_->allocate(bytes)) : nullptr) {}
  ~ScratchBuffer() {
    if (data_) allocator_->deallocate(data_, bytes_);
  }
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;

  uint8_t* data() { return data_; }
  size_t size() const { return bytes_; }

 private:
  Allocator* allocator_;
  size_t bytes_;
  uint8_t* data_;
};

}  // namespace tessel::detail
