// DType: the element types a tensor may hold.
//
//   DType::kF32 (float), kF64 (double), kBF16 (tessel::bfloat16), kF16 (tessel::float16),
//   kI32, kI64, kU8, kBool (stored as one byte, 0 or 1), kU32, kI8 and kC128
//   (std::complex<double>: real and imaginary part, 16 bytes), the last three the types TF's
//   scoped allocator and cross-device ops also take.
// Names are the short forms "f32", "bf16", "c128", ...; dtype_from_name also accepts numpy's
// ("float32", "bfloat16", "int64", "uint8", "bool", "uint32", "int8", "complex128").
// Every dtype's size divides 64, the scoped allocator's alignment. complex128 has no order:
// MAX and MIN reductions of it are kInvalidArgument; SUM, MEAN and PROD work.
//
// Thread safety: all functions are pure.
#pragma once

#include <cstddef>
#include <complex>
#include <cstdint>
#include <string_view>

#include "tessel/core/float16.h"

namespace tessel {

// New dtypes are appended: the values are stable.
enum class DType : uint8_t { kF32, kF64, kBF16, kF16, kI32, kI64, kU8, kBool, kU32, kI8, kC128 };

// Bytes per element: 4, 8, 2, 2, 4, 8, 1, 1, 4, 1, 16.
size_t dtype_size(DType dtype);
// "f32", "f64", "bf16", "f16", "i32", "i64", "u8", "bool", "u32", "i8", "c128".
std::string_view dtype_name(DType dtype);
// Inverse of dtype_name, plus numpy's names. Unknown name: Error kInvalidArgument naming it.
DType dtype_from_name(std::string_view name);
// f32, f64, bf16, f16.
bool is_floating(DType dtype);
// c128.
bool is_complex(DType dtype);

// The DType of a C++ element type: dtype_of<float> == DType::kF32.
template <typename T>
struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kF32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kF64; };
template <> struct DTypeOf<bfloat16> { static constexpr DType value = DType::kBF16; };
template <> struct DTypeOf<float16> { static constexpr DType value = DType::kF16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kI32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kI64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kU8; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::kBool; };
template <> struct DTypeOf<uint32_t> { static constexpr DType value = DType::kU32; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::kI8; };
template <> struct DTypeOf<std::complex<double>> { static constexpr DType value = DType::kC128; };
template <typename T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

}  // namespace tessel
