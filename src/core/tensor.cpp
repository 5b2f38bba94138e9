// Tensor storage, factories, queries and views. Element copies live in tensor_copy.cpp.
#include "tessel/core/tensor.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

#include "core/tensor_impl.h"
#include "tessel/core/allocator.h"

namespace tessel {

Tensor::Storage::Storage(size_t size, bool zero, Allocator* from)
    : nbytes(size), allocator(from != nullptr ? from : host_allocator()) {
  owner = allocator->weak_from_this().lock();  // null unless a shared_ptr owns the allocator
  space = allocator->memory_space();
  ptr = allocator->allocate(nbytes);
  if (ptr == nullptr || reinterpret_cast<uintptr_t>(ptr) % detail::kTensorAlignment != 0) {
    const void* bad = ptr;
    if (ptr != nullptr) allocator->deallocate(ptr, nbytes);
    detail::throw_error(ErrorCode::kInternal, "Tensor",
                        "allocator '{}' returned {} for {} bytes, not {}-byte aligned",
                        allocator->name(), bad, nbytes, detail::kTensorAlignment);
  }
  if (zero && nbytes > 0) {
    if (space.is_host()) {
      std::memset(ptr, 0, nbytes);
    } else {
      device_memory_ops("zero-filling an allocation", space).zero(ptr, space, nbytes);
    }
  }
}

Tensor::Storage::~Storage() { allocator->deallocate(ptr, nbytes); }

std::shared_ptr<const Tensor::Geometry> Tensor::contiguous_geometry(const Shape& shape) {
  // The last few made on this thread, newest first: a loop of ops allocates blocks of a few
  // shapes over and over (an op on a mesh: one per device, often all equal), and reusing their
  // geometry saves two vectors and a block per allocation.
  constexpr size_t kRecent = 8;
  thread_local std::array<std::shared_ptr<const Geometry>, kRecent> recent;
  for (size_t i = 0; i < kRecent && recent[i] != nullptr; ++i) {
    if (recent[i]->shape == shape) {
      if (i > 0) std::swap(recent[i], recent[i - 1]);  // moves toward the front as it is used
      return recent[i > 0 ? i - 1 : 0];
    }
  }
  auto made = std::make_shared<const Geometry>(Geometry{shape, shape.strides()});
  std::move_backward(recent.begin(), recent.end() - 1, recent.end());
  recent[0] = made;
  return made;
}

Tensor Tensor::allocate(const Shape& shape, DType dtype, Allocator* allocator, bool zero_fill) {
  const size_t item = dtype_size(dtype);
  const auto count = static_cast<uint64_t>(shape.num_elements());
  if (count > std::numeric_limits<size_t>::max() / item - detail::kTensorAlignment) {
    detail::throw_invalid("Tensor", "{} elements of {} ({}) do not fit in memory", count,
                          dtype_name(dtype), shape.to_string());
  }
  Tensor t;
  // Zero-filled by default so that zeros() is free and no view can read uninitialised bytes;
  // empty(..., zero_fill = false) opts out. kBool is always filled: only 0 and 1 are bools.
  const bool zero = zero_fill || dtype == DType::kBool;
  try {
    t.storage_ = std::make_shared<Storage>(count * item, zero, allocator);
  } catch (const std::bad_alloc&) {
    detail::throw_error(ErrorCode::kResourceExhausted, "Tensor",
                        "cannot allocate {} bytes for {} {}", count * item, shape.to_string(),
                        dtype_name(dtype));
  } catch (const Error& e) {
    // Out of memory or over a limit: the same code, the request's shape and dtype added.
    if (e.code() != ErrorCode::kResourceExhausted && e.code() != ErrorCode::kUnavailable) throw;
    detail::throw_error(e.code(), "Tensor", "cannot allocate {} bytes for {} {}: {}", count * item,
                        shape.to_string(), dtype_name(dtype), e.what());
  }
  t.geometry_ = contiguous_geometry(shape);
  t.offset_ = 0;
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) { return allocate(shape, dtype); }

Tensor Tensor::empty(const Shape& shape, DType dtype, Allocator* allocator, bool zero_fill) {
  return allocate(shape, dtype, allocator, zero_fill);
}

Allocator* Tensor::allocator() const { return storage_ ? storage_->allocator : nullptr; }

Tensor Tensor::full(const Shape& shape, DType dtype, double value) {
  Tensor t = allocate(shape, dtype);
  t.fill(value);
  return t;
}

Tensor Tensor::from_bytes(const void* data, size_t num_bytes, const Shape& shape, DType dtype) {
  const auto expected = static_cast<uint64_t>(shape.num_elements()) * dtype_size(dtype);
  if (num_bytes != expected) {
    detail::throw_invalid("Tensor", "from_bytes got {} bytes but shape {} of {} needs {} bytes",
                          num_bytes, shape.to_string(), dtype_name(dtype), expected);
  }
  if (data == nullptr && num_bytes > 0) {
    detail::throw_invalid("Tensor", "from_bytes got a null pointer for {} bytes", num_bytes);
  }
  Tensor t = allocate(shape, dtype);
  if (num_bytes > 0) std::memcpy(t.base(), data, num_bytes);
  if (dtype == DType::kBool) {
    for (size_t i = 0; i < num_bytes; ++i) t.base()[i] = t.base()[i] != 0 ? 1 : 0;
  }
  return t;
}

void Tensor::check_defined(const char* what) const {
  if (!storage_) {
    detail::throw_error(ErrorCode::kFailedPrecondition, "Tensor", "{} on a null tensor", what);
  }
}

void Tensor::check_dtype(DType requested, const char* what) const {
  check_defined(what);
  if (requested != dtype_) {
    detail::throw_invalid("Tensor", "{}<{}> on a tensor of dtype {} (shape {})", what,
                          dtype_name(requested), dtype_name(dtype_), shape().to_string());
  }
}

uint8_t* Tensor::base() const { return static_cast<uint8_t*>(storage_->ptr); }

bool Tensor::is_contiguous() const {
  check_defined("is_contiguous");
  if (num_elements() == 0) return true;
  int64_t expected = 1;
  for (int d = rank() - 1; d >= 0; --d) {
    const auto i = static_cast<size_t>(d);
    if (shape()[d] != 1 && strides()[i] != expected) return false;
    expected *= shape()[d];
  }
  return true;
}

void Tensor::check_host(const char* what) const {
  check_defined(what);
  if (!storage_->space.is_host()) {
    detail::throw_error(ErrorCode::kFailedPrecondition, "Tensor",
                        "{} needs host memory, but this {} {} is in {} memory; copy it with "
                        "to_host() (or use data_ptr() in device code)",
                        what, shape().to_string(), dtype_name(dtype_), storage_->space.to_string());
  }
}

MemorySpace Tensor::memory_space() const {
  check_defined("memory_space");
  return storage_->space;
}

const void* Tensor::data_ptr() const {
  check_defined("data_ptr");
  return base() + offset_ * static_cast<int64_t>(dtype_size(dtype_));
}

// The mutable forms: the same address (a Tensor's constness is not its storage's).
void* Tensor::data_ptr() { return const_cast<void*>(std::as_const(*this).data_ptr()); }

const void* Tensor::data() const {
  check_host("data");
  return data_ptr();
}

void* Tensor::data() { return const_cast<void*>(std::as_const(*this).data()); }

Tensor Tensor::slice(int axis, int64_t start, int64_t stop) const {
  check_defined("slice");
  const int resolved = axis < 0 ? axis + rank() : axis;
  if (resolved < 0 || resolved >= rank()) {
    detail::throw_error(ErrorCode::kOutOfRange, "Tensor",
                        "slice axis {} is out of range for shape {}", axis, shape().to_string());
  }
  const int64_t extent = shape()[resolved];
  if (start < 0 || start > stop || stop > extent) {
    detail::throw_error(ErrorCode::kOutOfRange, "Tensor",
                        "slice [{}, {}) along axis {} is out of range for shape {}", start, stop,
                        axis, shape().to_string());
  }
  std::vector<int64_t> offsets(static_cast<size_t>(rank()), 0);
  std::vector<int64_t> extents = shape().dims();
  offsets[static_cast<size_t>(resolved)] = start;
  extents[static_cast<size_t>(resolved)] = stop - start;
  return block(offsets, extents);
}

Tensor Tensor::block(const std::vector<int64_t>& offsets,
                     const std::vector<int64_t>& extents) const {
  check_defined("block");
  const auto r = static_cast<size_t>(rank());
  if (offsets.size() != r || extents.size() != r) {
    detail::throw_invalid("Tensor",
                          "block needs {} offsets and extents for shape {}, got offsets [{}] and "
                          "extents [{}]",
                          r, shape().to_string(), fmt::join(offsets, ","), fmt::join(extents, ","));
  }
  Tensor view = *this;
  for (size_t i = 0; i < r; ++i) {
    const int64_t dim = shape().dims()[i];
    if (offsets[i] < 0 || extents[i] < 0 || offsets[i] > dim || extents[i] > dim - offsets[i]) {
      detail::throw_error(ErrorCode::kOutOfRange, "Tensor",
                          "block offsets [{}] extents [{}] exceed shape {} in dimension {}",
                          fmt::join(offsets, ","), fmt::join(extents, ","), shape().to_string(), i);
    }
    view.offset_ += offsets[i] * strides()[i];
  }
  view.geometry_ = std::make_shared<const Geometry>(Geometry{Shape(extents), strides()});
  return view;
}

Tensor Tensor::reshape(const Shape& shape) const {
  check_defined("reshape");
  if (shape.num_elements() != num_elements()) {
    detail::throw_invalid("Tensor", "cannot reshape {} ({} elements) to {} ({} elements)",
                          this->shape().to_string(), num_elements(), shape.to_string(),
                          shape.num_elements());
  }
  if (!is_contiguous()) {
    detail::throw_error(ErrorCode::kFailedPrecondition, "Tensor",
                        "reshape of a non-contiguous view (shape {}, strides [{}]) to {}; call "
                        "contiguous() first",
                        this->shape().to_string(), fmt::join(strides(), ","), shape.to_string());
  }
  Tensor view = *this;
  view.geometry_ = contiguous_geometry(shape);
  return view;
}

Tensor Tensor::contiguous() const {
  check_defined("contiguous");
  return is_contiguous() ? *this : clone();
}

}  // namespace tessel
