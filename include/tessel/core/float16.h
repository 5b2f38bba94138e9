// bfloat16 and float16 (IEEE binary16): 16-bit storage types with exact conversions.
//
// float -> 16 bits rounds to nearest, ties to even; values too large become +-Inf; NaN stays
// NaN (quiet, sign kept); float16 produces subnormals down to 2^-24. 16 bits -> float is exact.
//   bfloat16 b(1.00390625f);  // rounds to 1.0 (tie, even)
//   float f = float(b);
// Arithmetic is done by converting to float; these types only store.
//
// convert(src, dst, n): n values at once, bit for bit the scalar conversions above, with the
// CPU's vector instructions where it has them (F16C for float16, AVX2 / AVX-512 for bfloat16):
// the casts of mixed precision. One difference: widening a signaling f16 NaN gives a quiet one
// (sign and payload kept), as F16C does.
//
// Thread safety: value types.
#pragma once

#include <cstdint>

namespace tessel {

uint16_t float_to_bf16_bits(float value);
float bf16_bits_to_float(uint16_t bits);
uint16_t float_to_f16_bits(float value);
float f16_bits_to_float(uint16_t bits);

struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  explicit bfloat16(float value) : bits(float_to_bf16_bits(value)) {}
  static bfloat16 from_bits(uint16_t b) { bfloat16 r; r.bits = b; return r; }
  explicit operator float() const { return bf16_bits_to_float(bits); }
};

struct float16 {
  uint16_t bits = 0;
  float16() = default;
  explicit float16(float value) : bits(float_to_f16_bits(value)) {}
  static float16 from_bits(uint16_t b) { float16 r; r.bits = b; return r; }
  explicit operator float() const { return f16_bits_to_float(bits); }
};

static_assert(sizeof(bfloat16) == 2 && sizeof(float16) == 2);

void convert(const float* src, bfloat16* dst, int64_t n);
void convert(const bfloat16* src, float* dst, int64_t n);
void convert(const float* src, float16* dst, int64_t n);
void convert(const float16* src, float* dst, int64_t n);

}  // namespace tessel
