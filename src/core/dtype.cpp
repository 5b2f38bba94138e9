#include "tessel/core/dtype.h"

#include <array>

#include "core/errors.h"

namespace tessel {
namespace {

struct DTypeInfo {
  DType dtype;
  size_t size;
  std::string_view name;        // tessel's short name
  std::string_view numpy_name;  // numpy's name, also accepted by dtype_from_name
};

constexpr std::array<DTypeInfo, 11> kDTypes = {{
    {DType::kF32, 4, "f32", "float32"},
    {DType::kF64, 8, "f64", "float64"},
    {DType::kBF16, 2, "bf16", "bfloat16"},
    {DType::kF16, 2, "f16", "float16"},
    {DType::kI32, 4, "i32", "int32"},
    {DType::kI64, 8, "i64", "int64"},
    {DType::kU8, 1, "u8", "uint8"},
    {DType::kBool, 1, "bool", "bool"},
    {DType::kU32, 4, "u32", "uint32"},
    {DType::kI8, 1, "i8", "int8"},
    {DType::kC128, 16, "c128", "complex128"},
}};

const DTypeInfo& info(DType dtype) {
  const auto index = static_cast<size_t>(dtype);
  if (index >= kDTypes.size()) {
    detail::throw_invalid("DType", "unknown dtype value {}", index);
  }
  return kDTypes[index];
}

}  // namespace

size_t dtype_size(DType dtype) { return info(dtype).size; }

std::string_view dtype_name(DType dtype) { return info(dtype).name; }

DType dtype_from_name(std::string_view name) {
  for (const DTypeInfo& d : kDTypes) {
    if (name == d.name || name == d.numpy_name) return d.dtype;
  }
  detail::throw_invalid("DType",
                        "unknown dtype name '{}' (expected one of f32, f64, bf16, f16, i32, i64, "
                        "u8, bool, u32, i8, c128 or numpy's float32, float64, bfloat16, float16, "
                        "int32, int64, uint8, uint32, int8, complex128)",
                        name);
}

bool is_complex(DType dtype) { return dtype == DType::kC128; }

bool is_floating(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF64 || dtype == DType::kBF16 ||
         dtype == DType::kF16;
}

}  // namespace tessel
