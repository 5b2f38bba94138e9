// Internals shared by the tensor_*.cpp files: the storage block, dtype dispatch, element
// conversion and strided iteration. Not a public header.
#pragma once

#include <complex>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/errors.h"
#include "tessel/core/allocator.h"
#include "tessel/core/tensor.h"

namespace tessel {

// One 64-byte-aligned block from an Allocator, freed (deallocate) when the last Tensor viewing
// it goes away.
struct Tensor::Storage {
  // Takes `nbytes` from `allocator` (host_allocator() when null); zero-fills when `zero` is set.
  // Allocator errors propagate; a misaligned block: kInternal.
  Storage(size_t nbytes, bool zero, Allocator* allocator);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* ptr = nullptr;               // aligned to kTensorAlignment
  size_t nbytes = 0;                 // bytes requested (deallocate gets the same)
  Allocator* allocator = nullptr;    // where ptr came from; never null
  MemorySpace space;                 // allocator->memory_space(), asked once
  std::shared_ptr<Allocator> owner;  // shares the allocator's ownership when it has one
};

namespace detail {

inline constexpr size_t kTensorAlignment = kAllocatorAlignment;

// Calls fn(std::type_identity<T>{}) with T the C++ element type of `dtype` (bool for kBool,
// which is stored as one byte holding 0 or 1).
template <typename F>
decltype(auto) visit_dtype(DType dtype, F&& fn) {
  static_assert(sizeof(bool) == 1, "kBool storage assumes a one-byte bool");
  switch (dtype) {
    case DType::kF32:
      return fn(std::type_identity<float>{});
    case DType::kF64:
      return fn(std::type_identity<double>{});
    case DType::kBF16:
      return fn(std::type_identity<bfloat16>{});
    case DType::kF16:
      return fn(std::type_identity<float16>{});
    case DType::kI32:
      return fn(std::type_identity<int32_t>{});
    case DType::kI64:
      return fn(std::type_identity<int64_t>{});
    case DType::kU8:
      return fn(std::type_identity<uint8_t>{});
    case DType::kBool:
      return fn(std::type_identity<bool>{});
    case DType::kU32:
      return fn(std::type_identity<uint32_t>{});
    case DType::kI8:
      return fn(std::type_identity<int8_t>{});
    case DType::kC128:
      return fn(std::type_identity<std::complex<double>>{});
  }
  throw_error(ErrorCode::kInternal, "Tensor", "unknown dtype value {}", static_cast<int>(dtype));
}

template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;
template <typename T>
inline constexpr bool is_complex_v = std::is_same_v<T, std::complex<double>>;

// The float nearest x rounded to odd: truncate toward zero, set the last bit if inexact.
// Rounding that result to a 16-bit format (RNE) equals rounding x directly, so there is
// no double-rounding error on the way from double or int64 to bf16/f16.
inline float round_to_odd_float(double x) {
  float f = static_cast<float>(x);
  if (std::isnan(x) || static_cast<double>(f) == x) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 1u);
}

inline float round_to_odd_float(int64_t x) {
  uint64_t m = x < 0 ? uint64_t{0} - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
  int shift = 0;
  if (m >= (uint64_t{1} << 24)) {
    shift = std::bit_width(m) - 24;
    const bool inexact = (m & ((uint64_t{1} << shift) - 1)) != 0;
    m = (m >> shift) | (inexact ? 1u : 0u);
  }
  const float f = std::ldexp(static_cast<float>(m), shift);
  return x < 0 ? -f : f;
}

// Floating -> integer: truncates toward zero like a C++ cast; NaN gives 0 and values beyond
// the integer's range saturate (where a C++ cast would be undefined).
template <typename D, typename S>
D saturate_cast(S s) {
  if (std::isnan(s)) return D{0};
  using Lim = std::numeric_limits<D>;
  const S upper = std::ldexp(S{1}, Lim::digits);  // 2^31, 2^63, 2^8: one past the max
  const S t = std::trunc(s);
  if (t >= upper) return Lim::max();
  if (t < (Lim::is_signed ? -upper : S{0})) return Lim::min();
  return static_cast<D>(t);
}

// Converts one element from S to D with tessel's rules (see Tensor::astype).
template <typename D, typename S>
D convert(S s) {
  if constexpr (std::is_same_v<D, S>) {
    return s;
  } else if constexpr (is_complex_v<S>) {
    return convert<D>(s.real());  // numpy's rule: the imaginary part is dropped
  } else if constexpr (is_complex_v<D>) {
    return D(convert<double>(s), 0.0);
  } else if constexpr (is_half_v<S>) {
    return convert<D>(static_cast<float>(s));
  } else if constexpr (is_half_v<D>) {
    if constexpr (std::is_same_v<S, float>) {
      return D(s);
    } else if constexpr (std::is_same_v<S, double>) {
      return D(round_to_odd_float(s));
    } else {
      return D(round_to_odd_float(static_cast<int64_t>(s)));
    }
  } else if constexpr (std::is_same_v<D, bool>) {
    return s != S{0};  // NaN -> true, as in C++
  } else if constexpr (std::is_floating_point_v<D> || !std::is_floating_point_v<S>) {
    return static_cast<D>(s);  // int -> int wraps modulo 2^n (C++20), int -> float rounds
  } else {
    return saturate_cast<D>(s);
  }
}

// Calls fn(offset_a, offset_b) for every element of `dims` in row-major order, where the
// offsets walk two strided views with the given element strides and base offsets.
template <typename F>
void for_each_offset2(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides_a,
                      int64_t base_a, const std::vector<int64_t>& strides_b, int64_t base_b,
                      F&& fn) {
  const size_t rank = dims.size();
  for (int64_t d : dims) {
    if (d == 0) return;
  }
  if (rank == 0) {
    fn(base_a, base_b);
    return;
  }
  std::vector<int64_t> index(rank, 0);
  const int64_t inner = dims[rank - 1];
  const int64_t step_a = strides_a[rank - 1];
  const int64_t step_b = strides_b[rank - 1];
  int64_t a = base_a;
  int64_t b = base_b;
  while (true) {
    for (int64_t i = 0; i < inner; ++i) fn(a + i * step_a, b + i * step_b);
    // Advance the outer dimensions like an odometer.
    size_t d = rank - 1;
    while (true) {
      if (d == 0) return;
      --d;
      ++index[d];
      a += strides_a[d];
      b += strides_b[d];
      if (index[d] < dims[d]) break;
      a -= strides_a[d] * dims[d];
      b -= strides_b[d] * dims[d];
      index[d] = 0;
    }
  }
}

// Calls fn(offset) for every element of one strided view in row-major order.
template <typename F>
void for_each_offset(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                     int64_t base, F&& fn) {
  for_each_offset2(dims, strides, base, strides, 0, [&](int64_t a, int64_t) { fn(a); });
}

}  // namespace detail
}  // namespace tessel
