// Bit-exact conversions between float and the two 16-bit float formats.
#include "tessel/core/float16.h"

#include <cpuid.h>
#include <immintrin.h>

#include <bit>

#include "core/vector_clones.h"

namespace tessel {
namespace {

constexpr uint32_t kF32SignMask = 0x80000000u;
constexpr uint32_t kF32AbsMask = 0x7FFFFFFFu;
constexpr uint32_t kF32Inf = 0x7F800000u;
// |x| >= 65520 rounds to Inf in f16: 65504 (max) + half an ulp (16), tie goes to the even Inf.
constexpr uint32_t kF32F16Overflow = 0x477FF000u;
// 2^-14, the smallest normal f16.
constexpr uint32_t kF32F16MinNormal = 0x38800000u;
// Biased float exponent of 2^-25: anything below is less than half the smallest f16 subnormal.
constexpr uint32_t kF32ExpHalfF16Subnormal = 102;

}  // namespace

uint16_t float_to_bf16_bits(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & kF32AbsMask) > kF32Inf) {
    // NaN: keep sign and high payload, force the quiet bit so it never reads as Inf.
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  // Round to nearest even on the 16 dropped bits; a carry into the exponent is correct,
  // including the step from the largest finite value to Inf.
  const uint32_t rounding_bias = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

float bf16_bits_to_float(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

uint16_t float_to_f16_bits(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint16_t>((bits & kF32SignMask) >> 16);
  const uint32_t abs = bits & kF32AbsMask;

  if (abs > kF32Inf) {
    // NaN: keep sign and the high payload bits, set the quiet bit.
    return static_cast<uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x03FFu));
  }
  if (abs >= kF32F16Overflow) return static_cast<uint16_t>(sign | 0x7C00u);  // Inf
  if (abs >= kF32F16MinNormal) {
    // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even.
    const uint32_t rebased = abs - ((127u - 15u) << 23);
    const uint32_t rounding_bias = 0x0FFFu + ((abs >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rebased + rounding_bias) >> 13));
  }

  // Subnormal or zero: the result is m * 2^-24 with m in [0, 1024].
  const uint32_t exponent = abs >> 23;
  if (exponent < kF32ExpHalfF16Subnormal) return sign;          // below 2^-25: rounds to zero
  const uint32_t mantissa = (abs & 0x007FFFFFu) | 0x00800000u;  // with the implicit one
  // value = mantissa * 2^(exponent - 150), so m = mantissa >> (126 - exponent), shift in [14, 24].
  const uint32_t shift = 126u - exponent;
  uint32_t m = mantissa >> shift;
  const uint32_t remainder = mantissa & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (remainder > half || (remainder == half && (m & 1u) != 0)) ++m;  // may carry to 2^-14
  return static_cast<uint16_t>(sign | m);
}

float f16_bits_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x03FFu;
  if (exponent == 0x1F) {
    return std::bit_cast<float>(sign | kF32Inf | (mantissa << 13));  // Inf or NaN
  }
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// ---- bulk conversions ------------------------------------------------------------------------

namespace {

// The scalar conversions written inline, for loops the compiler vectorizes in each clone.
TESSEL_VECTOR_CLONES void to_bf16_loop(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = std::bit_cast<uint32_t>(src[i]);
    const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
    const uint32_t nan = (bits >> 16) | 0x0040u;
    dst[i] = static_cast<uint16_t>((bits & kF32AbsMask) > kF32Inf ? nan : rounded);
  }
}

TESSEL_VECTOR_CLONES void from_bf16_loop(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(static_cast<uint32_t>(src[i]) << 16);
}

// F16C rounds to nearest even, makes subnormals, Inf past 65519.99 and quiet NaNs with the
// payload's high bits: the scalar rules above.
__attribute__((target("avx,f16c"))) void to_f16_f16c(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = float_to_f16_bits(src[i]);
}

__attribute__((target("avx,f16c"))) void from_f16_f16c(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = f16_bits_to_float(src[i]);
}

// cpuid's F16C bit (leaf 1, ecx), not __builtin_cpu_supports("f16c"), which clang does not know.
bool has_f16c() {
  static const bool yes = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
    __builtin_cpu_init();
    return (ecx & bit_F16C) != 0 && __builtin_cpu_supports("avx");
  }();
  return yes;
}

}  // namespace

void convert(const float* src, bfloat16* dst, int64_t n) {
  to_bf16_loop(src, reinterpret_cast<uint16_t*>(dst), n);
}

void convert(const bfloat16* src, float* dst, int64_t n) {
  from_bf16_loop(reinterpret_cast<const uint16_t*>(src), dst, n);
}

void convert(const float* src, float16* dst, int64_t n) {
  auto* out = reinterpret_cast<uint16_t*>(dst);
  if (has_f16c()) return to_f16_f16c(src, out, n);
  for (int64_t i = 0; i < n; ++i) out[i] = float_to_f16_bits(src[i]);
}

void convert(const float16* src, float* dst, int64_t n) {
  const auto* in = reinterpret_cast<const uint16_t*>(src);
  if (has_f16c()) return from_f16_f16c(in, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_bits_to_float(in[i]);
}

}  // namespace tessel
