#include "tessel/core/float16.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace tessel {
namespace {

uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }

bool is_bf16_nan(uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x007F) != 0; }
bool is_f16_nan(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x03FF) != 0; }

// GCC's _Float16 conversion is the reference for float -> f16 (correctly rounded, RNE).
uint16_t reference_f16_bits(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof(bits));
  return bits;
}

float reference_f16_to_float(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, sizeof(bits));
  return static_cast<float>(h);
}

// Compares tessel's float -> f16 against _Float16 for one float (NaN only needs to stay NaN).
void expect_f16_matches_reference(float f) {
  const uint16_t got = float_to_f16_bits(f);
  if (std::isnan(f)) {
    EXPECT_TRUE(is_f16_nan(got)) << std::hex << bits_of(f);
    EXPECT_EQ(got & 0x8000, (bits_of(f) >> 16) & 0x8000) << "NaN sign";
    return;
  }
  EXPECT_EQ(got, reference_f16_bits(f))
      << "float bits 0x" << std::hex << bits_of(f) << " (" << f << ")";
}

TEST(BFloat16, ExhaustiveRoundTripIsIdentity) {
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float f = bf16_bits_to_float(bits);
    ASSERT_EQ(bits_of(f), b << 16) << "bf16 -> float must be exact";
    const uint16_t back = float_to_bf16_bits(f);
    if (is_bf16_nan(bits)) {
      ASSERT_TRUE(is_bf16_nan(back)) << std::hex << b;
      ASSERT_EQ(back & 0x8000, bits & 0x8000) << std::hex << b;
    } else {
      ASSERT_EQ(back, bits) << std::hex << b;
    }
  }
}

TEST(BFloat16, RoundsToNearestEvenOnTies) {
  EXPECT_EQ(float(bfloat16(1.00390625f)), 1.0f);       // 1 + 2^-8: tie, 1.0 is even
  EXPECT_EQ(float(bfloat16(1.01171875f)), 1.015625f);  // 1 + 3*2^-8: tie, rounds up to even
  EXPECT_EQ(float(bfloat16(std::nextafter(1.00390625f, 2.0f))), 1.0078125f);  // above the tie
  EXPECT_EQ(float(bfloat16(-1.00390625f)), -1.0f);
  EXPECT_EQ(float(bfloat16(1.0f)), 1.0f);
  EXPECT_EQ(float(bfloat16(3.0f)), 3.0f);
}

TEST(BFloat16, OverflowGoesToInfinity) {
  const float max = std::numeric_limits<float>::max();
  EXPECT_EQ(float_to_bf16_bits(max), 0x7F80);  // rounds past the largest bf16
  EXPECT_EQ(float_to_bf16_bits(-max), 0xFF80);
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(float_to_bf16_bits(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(float_to_bf16_bits(std::bit_cast<float>(0x7F7F7FFFu)), 0x7F7F);  // below the tie
}

TEST(BFloat16, NaNStaysQuietNaNWithSign) {
  for (uint32_t nan : {0x7FC00000u, 0x7F800001u, 0x7F80FFFFu, 0xFF800001u, 0xFFFFFFFFu}) {
    const uint16_t b = float_to_bf16_bits(std::bit_cast<float>(nan));
    EXPECT_TRUE(is_bf16_nan(b)) << std::hex << nan;
    EXPECT_NE(b & 0x0040, 0) << "quiet bit";
    EXPECT_EQ(b & 0x8000, (nan >> 16) & 0x8000) << "sign";
  }
}

TEST(BFloat16, ZerosAndSubnormals) {
  EXPECT_EQ(float_to_bf16_bits(0.0f), 0x0000);
  EXPECT_EQ(float_to_bf16_bits(-0.0f), 0x8000);
  const float min_sub = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(float_to_bf16_bits(min_sub), 0x0000);  // far below half a bf16 subnormal ulp
  EXPECT_EQ(float_to_bf16_bits(std::bit_cast<float>(0x00010000u)), 0x0001);  // bf16 subnormal
  EXPECT_EQ(float_to_bf16_bits(std::bit_cast<float>(0x00018000u)), 0x0002);  // tie -> even
  EXPECT_EQ(float_to_bf16_bits(std::bit_cast<float>(0x00008000u)), 0x0000);  // tie -> even 0
}

TEST(Float16, ExhaustiveRoundTripIsIdentity) {
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float f = f16_bits_to_float(bits);
    const uint16_t back = float_to_f16_bits(f);
    if (is_f16_nan(bits)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      ASSERT_TRUE(is_f16_nan(back)) << std::hex << b;
      ASSERT_EQ(back & 0x8000, bits & 0x8000) << std::hex << b;
    } else {
      ASSERT_EQ(bits_of(f), bits_of(reference_f16_to_float(bits))) << "f16 -> float, " << b;
      ASSERT_EQ(back, bits) << std::hex << b;
    }
  }
}

TEST(Float16, MatchesFloat16CastOnEveryBoundaryAndMidpoint) {
  // Every finite f16 value, every midpoint between neighbours, and one float ulp either side.
  for (uint32_t b = 0; b < 0x7C00; ++b) {
    for (float sign : {1.0f, -1.0f}) {
      const double lo = f16_bits_to_float(static_cast<uint16_t>(b));
      const double hi = b + 1 == 0x7C00 ? 65536.0 : f16_bits_to_float(static_cast<uint16_t>(b + 1));
      const auto mid = static_cast<float>((lo + hi) / 2);  // exact in float
      for (float f :
           {static_cast<float>(lo), mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
        expect_f16_matches_reference(sign * f);
      }
    }
  }
}

TEST(Float16, MatchesFloat16CastOnRandomFloats) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<uint32_t> any_bits;
  std::uniform_int_distribution<uint32_t> exponent(100, 145);  // around the f16 range
  for (int i = 0; i < 1 << 20; ++i) {
    expect_f16_matches_reference(std::bit_cast<float>(any_bits(rng)));
    const uint32_t near = (any_bits(rng) & 0x807FFFFFu) | (exponent(rng) << 23);
    expect_f16_matches_reference(std::bit_cast<float>(near));
  }
}

TEST(Float16, OverflowBoundaryIs65520) {
  EXPECT_EQ(float_to_f16_bits(65504.0f), 0x7BFF);  // largest finite
  EXPECT_EQ(float_to_f16_bits(65519.996f), 0x7BFF);
  EXPECT_EQ(float_to_f16_bits(65520.0f), 0x7C00);  // tie with the (even) Inf
  EXPECT_EQ(float_to_f16_bits(-65520.0f), 0xFC00);
  EXPECT_EQ(float_to_f16_bits(1e10f), 0x7C00);
  EXPECT_EQ(float_to_f16_bits(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(float_to_f16_bits(-std::numeric_limits<float>::infinity()), 0xFC00);
}

TEST(Float16, SubnormalsRoundToNearestEven) {
  EXPECT_EQ(float_to_f16_bits(0x1p-24f), 0x0001);         // smallest subnormal
  EXPECT_EQ(float_to_f16_bits(0x1p-25f), 0x0000);         // tie between 0 and 2^-24 -> 0
  EXPECT_EQ(float_to_f16_bits(0x1.000002p-25f), 0x0001);  // just above the tie
  EXPECT_EQ(float_to_f16_bits(0x3p-25f), 0x0002);         // 1.5 * 2^-24: tie -> even 2
  EXPECT_EQ(float_to_f16_bits(0x5p-25f), 0x0002);         // 2.5 * 2^-24: tie -> even 2
  EXPECT_EQ(float_to_f16_bits(0x1p-14f), 0x0400);         // smallest normal
  EXPECT_EQ(float_to_f16_bits(0x1.ff8p-15f), 0x03FF);     // largest subnormal
  EXPECT_EQ(float_to_f16_bits(0x1.ffcp-15f), 0x0400);     // tie rounds up into the normals
  EXPECT_EQ(float_to_f16_bits(-0x1p-24f), 0x8001);
  EXPECT_EQ(float_to_f16_bits(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(float_to_f16_bits(-0.0f), 0x8000);
  EXPECT_EQ(f16_bits_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(f16_bits_to_float(0x83FF), -0x1.ff8p-15f);
}

TEST(Float16, NaNStaysQuietNaNWithSign) {
  for (uint32_t nan : {0x7FC00000u, 0x7F800001u, 0x7F801FFFu, 0xFF800001u, 0xFFFFFFFFu}) {
    const uint16_t h = float_to_f16_bits(std::bit_cast<float>(nan));
    EXPECT_TRUE(is_f16_nan(h)) << std::hex << nan;
    EXPECT_NE(h & 0x0200, 0) << "quiet bit";
    EXPECT_EQ(h & 0x8000, (nan >> 16) & 0x8000) << "sign";
  }
}

TEST(Float16, RoundsToNearestEvenOnNormalTies) {
  EXPECT_EQ(float(float16(1.0f + 0x1p-11f)), 1.0f);            // tie -> even (1.0)
  EXPECT_EQ(float(float16(1.0f + 0x3p-11f)), 1.0f + 0x1p-9f);  // tie -> even (up)
  EXPECT_EQ(float(float16(0.1f)), 0.0999755859375f);
  EXPECT_EQ(float16(2.0f).bits, 0x4000);
  EXPECT_EQ(float16::from_bits(0x3C00).bits, 0x3C00);
}

// The bulk convert() (vector instructions where the CPU has them) gives the scalar conversions'
// bits: every 16-bit pattern widened, and floats around every f16 / bf16 boundary, their
// midpoints, the overflow edge, subnormals, NaNs and random ones narrowed (lengths that leave a
// scalar tail after the vector loop).
std::vector<float> narrowing_cases() {
  std::vector<float> v;
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = f16_bits_to_float(static_cast<uint16_t>(h));
    const float g = bf16_bits_to_float(static_cast<uint16_t>(h));
    for (float x : {f, g}) {
      v.push_back(x);
      v.push_back(std::nextafter(x, INFINITY));
      v.push_back(std::nextafter(x, -INFINITY));
    }
    // The midpoint to the next f16 (a tie).
    v.push_back(std::bit_cast<float>(std::bit_cast<uint32_t>(f) + 0x1000u));
  }
  std::mt19937 gen(7);
  for (int i = 0; i < 100000; ++i) v.push_back(std::bit_cast<float>(static_cast<uint32_t>(gen())));
  v.push_back(65519.99f);
  v.push_back(65520.0f);
  v.push_back(-std::numeric_limits<float>::quiet_NaN());
  v.push_back(7.0f);  // odd total lengths leave a tail after the 8-wide loop
  return v;
}

TEST(Float16, BulkConvertIsTheScalarConversionBitForBit) {
  const std::vector<float> in = narrowing_cases();
  std::vector<float16> out(in.size());
  convert(in.data(), out.data(), static_cast<int64_t>(in.size()));
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(out[i].bits, float_to_f16_bits(in[i])) << "f32 -> f16 of " << in[i] << " at " << i;
  }
  std::vector<float16> all(0x10000 + 3);
  for (size_t h = 0; h < all.size(); ++h) all[h].bits = static_cast<uint16_t>(h);
  std::vector<float> wide(all.size());
  convert(all.data(), wide.data(), static_cast<int64_t>(all.size()));
  for (size_t h = 0; h < all.size(); ++h) {
    uint32_t want = std::bit_cast<uint32_t>(f16_bits_to_float(all[h].bits));
    // F16C quiets a signaling NaN as it widens it (sign and payload kept); float16.h says so.
    if (std::isnan(wide[h])) want |= 0x00400000u;
    ASSERT_EQ(std::bit_cast<uint32_t>(wide[h]), want) << "f16 -> f32 of bits " << all[h].bits;
  }
}

TEST(BFloat16, BulkConvertIsTheScalarConversionBitForBit) {
  const std::vector<float> in = narrowing_cases();
  std::vector<bfloat16> out(in.size());
  convert(in.data(), out.data(), static_cast<int64_t>(in.size()));
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(out[i].bits, float_to_bf16_bits(in[i])) << "f32 -> bf16 of " << in[i] << " at " << i;
  }
  std::vector<bfloat16> all(0x10000 + 5);
  for (size_t h = 0; h < all.size(); ++h) all[h].bits = static_cast<uint16_t>(h);
  std::vector<float> wide(all.size());
  convert(all.data(), wide.data(), static_cast<int64_t>(all.size()));
  for (size_t h = 0; h < all.size(); ++h) {
    ASSERT_EQ(std::bit_cast<uint32_t>(wide[h]),
              std::bit_cast<uint32_t>(bf16_bits_to_float(all[h].bits)));
  }
}

}  // namespace
}  // namespace tessel
