// Tensor: an n-dimensional array in host memory; a cheap handle to reference-counted storage.
//
// Storage is one 64-byte-aligned allocation, row-major, from an Allocator (host_allocator()
// unless a factory is given one; see allocator.h for who keeps the allocator alive). Copying a
// Tensor copies the handle: both refer to the same elements. Views (slice, block, reshape) share
// the storage and may be strided; clone() and contiguous() copy.
//
//   Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
//   Tensor col = t.slice(1, 1, 2);           // shape [2,1], shares t's storage
//   col.fill(0);                              // t is now [[1,0,3],[4,0,6]]
//   std::vector<float> v = t.to_vector<float>();
//
// Errors: a dtype that does not match the requested C++ type, a shape whose element count does
// not match the data, a slice out of bounds: Error (kInvalidArgument / kOutOfRange) naming the
// values. Any call that needs the elements of a null tensor: kFailedPrecondition
// "Tensor: <call> on a null tensor".
//
// Element conversions (astype, fill, full, at, to_doubles) follow C++ casts where those are
// defined: float -> int truncates toward zero, int -> int wraps modulo 2^n, x -> bool is
// x != 0 (NaN -> true). Where a C++ cast is undefined tessel saturates: NaN -> 0 and values
// beyond an integer type's range clamp to its min/max. Conversions to bf16/f16 round to nearest
// even from every source type (no double rounding via float).
//
// Thread safety: the handle is safe to copy across threads; concurrent writes to the same
// elements are the caller's to order.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include "tessel/core/dtype.h"
#include "tessel/core/memory_space.h"
#include "tessel/core/shape.h"

namespace tessel {

class Allocator;

class Tensor {
 public:
  // A null tensor: defined() is false; every other call fails with kFailedPrecondition.
  Tensor() = default;

  // Factories.
  static Tensor zeros(const Shape& shape, DType dtype);
  // A fresh contiguous tensor from `allocator` (host_allocator() when null). With zero_fill
  // (the default) every byte is zero: empty(shape, dtype, allocator) is zeros() from that
  // allocator (zeros is not overloaded, so &Tensor::zeros stays unambiguous). With
  // zero_fill = false the elements are whatever the allocator returned, for outputs written in
  // full before being read (it saves a pass over memory); kBool is always zero-filled (other
  // bytes are not bools). Allocator errors propagate with their code (kResourceExhausted when
  // out of memory or over a memory limit, with the shape and dtype added); an allocator
  // returning memory not aligned to 64 bytes: kInternal.
  static Tensor empty(const Shape& shape, DType dtype, Allocator* allocator = nullptr,
                      bool zero_fill = true);
  static Tensor full(const Shape& shape, DType dtype, double value);
  // The elements of `values` in row-major order; values.size() must equal the element count.
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);
  // A copy of `num_bytes` raw bytes, which must equal the shape's element count * dtype size
  // (kInvalidArgument naming both otherwise). kBool bytes are normalised to 0/1.
  static Tensor from_bytes(const void* data, size_t num_bytes, const Shape& shape, DType dtype);
  // Deterministic pseudo-random values: element i (row-major flat index) depends only on
  // (seed, i) through a counter-based hash (splitmix64), so the same seed gives the same tensor
  // on every machine and any block can be generated on its own (see *_block below).
  // Floating dtypes get low + (high - low) * u, u uniform in [0, 1), rounded to the dtype;
  // integer dtypes get integers in [ceil(low), ceil(high)) (non-empty, inside the dtype, at most
  // 2^53 values); kBool gets true with probability 1/2 (low/high ignored). low > high, a
  // non-finite bound or a bad integer range: kInvalidArgument.
  static Tensor random_uniform(const Shape& shape, DType dtype, uint64_t seed, double low = 0.0,
                               double high = 1.0);
  // Normal(mean, stddev) by Box-Muller; floating dtypes only (kInvalidArgument otherwise, and for
  // stddev < 0 or non-finite parameters).
  static Tensor random_normal(const Shape& shape, DType dtype, uint64_t seed, double mean = 0.0,
                              double stddev = 1.0);
  // The block [offsets, offsets + extents) of random_uniform(global_shape, ...), generated
  // without materialising the rest: equal element for element to
  // random_uniform(global_shape, dtype, seed, low, high).block(offsets, extents).
  // Offsets/extents of the wrong length: kInvalidArgument; a block outside the shape: kOutOfRange.
  static Tensor random_uniform_block(const Shape& global_shape, const std::vector<int64_t>& offsets,
                                     const std::vector<int64_t>& extents, DType dtype,
                                     uint64_t seed, double low = 0.0, double high = 1.0);
  // As random_uniform_block, for random_normal.
  static Tensor random_normal_block(const Shape& global_shape, const std::vector<int64_t>& offsets,
                                    const std::vector<int64_t>& extents, DType dtype, uint64_t seed,
                                    double mean = 0.0, double stddev = 1.0);

  // Queries.
  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return geometry_ ? geometry_->shape : kScalarShape; }
  DType dtype() const { return dtype_; }
  int rank() const { return shape().rank(); }
  int64_t num_elements() const { return shape().num_elements(); }
  size_t nbytes() const { return static_cast<size_t>(num_elements()) * dtype_size(dtype_); }
  // Element strides of this view (row-major strides for a contiguous tensor).
  const std::vector<int64_t>& strides() const {
    return geometry_ ? geometry_->strides : kScalarStrides;
  }
  // Element offset of this view's first element into its storage (0 for a fresh tensor).
  int64_t storage_offset() const { return offset_; }
  bool is_contiguous() const;
  // True when both tensors view the same allocation.
  bool shares_storage_with(const Tensor& other) const { return storage_ == other.storage_; }
  // The allocator the storage came from (host_allocator() by default); null for a null tensor.
  Allocator* allocator() const;

  // Where the storage lives (memory_space.h): host, or a GPU's memory for tensors allocated
  // from a GPU device.
  MemorySpace memory_space() const;
  bool is_host() const { return memory_space().is_host(); }
  // Address of the first element of this view, in host memory: a tensor in device memory gives
  // kFailedPrecondition naming its space (copy it with to_host(); device code uses data_ptr()).
  // Typed access also checks the dtype.
  void* data();
  const void* data() const;
  // Address of the first element in whatever memory space holds it: for device kernels,
  // collectives and copies, which know the space (memory_space()). Never dereference it on the
  // CPU unless is_host().
  void* data_ptr();
  const void* data_ptr() const;
  template <typename T>
  T* data();
  template <typename T>
  const T* data() const;

  // Element at a multi-index, converted to double (bool -> 0/1). One index per dimension
  // (kInvalidArgument otherwise); an index outside [0, dim): kOutOfRange.
  double at(const std::vector<int64_t>& index) const;
  // Copies out in row-major order; T must match dtype().
  template <typename T>
  std::vector<T> to_vector() const;
  // Copies out in row-major order, converting every element to double.
  std::vector<double> to_doubles() const;

  // Views (share storage).
  // Elements [start, stop) along `axis`; negative axis counts from the end. Needs
  // 0 <= start <= stop <= dim and a valid axis (kOutOfRange otherwise).
  Tensor slice(int axis, int64_t start, int64_t stop) const;
  // The block with the given per-dimension offsets and extents (one entry per dimension).
  Tensor block(const std::vector<int64_t>& offsets, const std::vector<int64_t>& extents) const;
  // Same elements, new shape. A different element count: kInvalidArgument; a non-contiguous
  // view: kFailedPrecondition (call contiguous() first).
  Tensor reshape(const Shape& shape) const;

  // Copies.
  // clone and contiguous copy in the tensor's own memory space (device tensors: contiguous
  // views only, else kUnimplemented); astype and the element writes below need host memory.
  Tensor clone() const;              // contiguous deep copy
  Tensor contiguous() const;         // *this if already contiguous, else a contiguous copy
  // *this when in host memory, else a contiguous host copy. at, to_vector, to_doubles and
  // to_string read device tensors through it.
  Tensor to_host() const;
  Tensor astype(DType dtype) const;  // converted copy (see "Element conversions" above)

  // Writes.
  // Sets every element of this view (strided views included) to `value` converted to dtype().
  void fill(double value);
  // Copies src's elements into this view (either may be strided; overlapping views are safe);
  // shapes and dtypes must be equal (kInvalidArgument naming both otherwise). Between memory
  // spaces (host <-> device, device <-> device) a strided host view goes through a contiguous
  // host copy; a strided device view is kUnimplemented naming the spaces.
  void copy_from(const Tensor& src);

  // numpy-like text: "Tensor(shape=[2,3], dtype=f32,\n[[1, 2, 3],\n [4, 5, 6]])".
  // Rank 0 prints the value ("Tensor(shape=[], dtype=f32,\n2.5)"); floats print like %g,
  // bool as true/false. Tensors of more than 1000 elements are summarised: a dimension longer
  // than 2 * edge_items shows its first and last `edge_items` entries around "...".
  // A null tensor prints "Tensor(null)". edge_items < 1: kInvalidArgument.
  std::string to_string(int edge_items = 3) const;

 private:
  struct Storage;
  void check_defined(const char* what) const;
  void check_dtype(DType requested, const char* what) const;
  // check_defined, then kFailedPrecondition unless the storage is host memory.
  void check_host(const char* what) const;
  // copy_from when either side is device memory (same shape and dtype already checked).
  void copy_across_spaces(const Tensor& src);
  uint8_t* base() const;

  // A view's extents and element strides. Immutable and shared between copies, so that copying
  // a Tensor copies no vectors: dispatch copies every block a kernel reads into its input list.
  struct Geometry {
    Shape shape;
    std::vector<int64_t> strides;
  };
  // The row-major geometry of `shape`; recently made ones are reused (per thread).
  static std::shared_ptr<const Geometry> contiguous_geometry(const Shape& shape);
  inline static const Shape kScalarShape{};
  inline static const std::vector<int64_t> kScalarStrides{};

  std::shared_ptr<Storage> storage_;            // the allocation; null for a null tensor
  std::shared_ptr<const Geometry> geometry_;    // null for a null tensor (shape [])
  int64_t offset_ = 0;                          // element offset of this view into the storage
  DType dtype_ = DType::kF32;

  static Tensor allocate(const Shape& shape, DType dtype, Allocator* allocator = nullptr,
                         bool zero_fill = true);
  friend class TensorTestAccess;
};

// numpy.allclose: |a - b| <= atol + rtol * |b| for every element. Shapes must match
// (kInvalidArgument otherwise); dtypes may differ (compared as double). NaN equals NaN only
// with equal_nan; an infinity is close only to the same infinity. A null tensor:
// kFailedPrecondition.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8,
              bool equal_nan = false);

std::ostream& operator<<(std::ostream& os, const Tensor& tensor);

// ---- template definitions -------------------------------------------------------------------

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> bytes(values.begin(), values.end());
    return from_bytes(bytes.data(), bytes.size(), shape, DType::kBool);
  } else {
    return from_bytes(values.data(), values.size() * sizeof(T), shape, dtype_of<T>);
  }
}

template <typename T>
T* Tensor::data() {
  check_dtype(dtype_of<T>, "data");
  return static_cast<T*>(data());
}

template <typename T>
const T* Tensor::data() const {
  check_dtype(dtype_of<T>, "data");
  return static_cast<const T*>(data());
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  check_dtype(dtype_of<T>, "to_vector");
  Tensor c = to_host().contiguous();
  const auto* p =
      static_cast<const std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>*>(c.data());
  return std::vector<T>(p, p + num_elements());
}

}  // namespace tessel
