// Internal: the building blocks of the vectorised float32 CPU loops (cpu_vector_math.cpp,
// cpu_row_math.cpp): the target-clones attribute that compiles a loop once per vector ISA, and
// branch-free approximations of erf and exp that the compiler vectorises inside such loops (their
// accuracy: cpu_vector_math.h).
#pragma once

#include <cstdint>
#include <cstring>

#include "core/vector_clones.h"  // TESSEL_VECTOR_CLONES

#define TESSEL_INLINE inline __attribute__((always_inline))

namespace tessel::detail::vec {

// erf(x) ~ x P(x^2) / Q(x^2) on [-4, 4], clamped outside. The coefficients were fitted for this
// file by weighted least squares on relative error (max 8e-8 in double; 4e-7 absolute once
// evaluated in float32); Q has no zero on [0, 16].
TESSEL_INLINE float erf_approx(float x) {
  x = x < -4.0f ? -4.0f : x;
  x = x > 4.0f ? 4.0f : x;
  const float t = x * x;
  float p = 1.9253908689620403e-08f;
  p = p * t - 1.935248519657762e-06f;
  p = p * t + 1.442889479221776e-04f;
  p = p * t + 3.857854986563325e-03f;
  p = p * t + 5.109527334570885e-02f;
  p = p * t + 2.0396248996257782e-01f;
  p = p * t + 1.1283791065216064f;
  float q = 9.896568953990936e-04f;
  q = q * t + 1.4684637077152729e-02f;
  q = q * t + 1.1665422469377518e-01f;
  q = q * t + 5.140886902809143e-01f;
  q = q * t + 1.0f;
  // Beyond 3.92 float32's erf is exactly +-1: return that, so that 1 + erf(-big) is 0 (gelu of a
  // large negative x is 0, and of -inf NaN, as with libm).
  const float r = x * p / q;
  return t >= 15.3664f ? (x > 0.0f ? 1.0f : -1.0f) : r;
}

// exp(x) = 2^k exp(r), k = round(x / ln 2), r = x - k ln 2 in [-ln2/2, ln2/2] (ln 2 in two parts
// so that k ln 2 is exact), exp(r) by its Taylor polynomial to r^7 (relative error < 1e-7 there).
TESSEL_INLINE float exp_approx(float x_in) {
  float x = x_in < -87.0f ? -87.0f : x_in;
  x = x > 88.0f ? 88.0f : x;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float k = (x * 1.44269504088896341f + kRound) - kRound;
  const float r = (x - k * 0.693145751953125f) - k * 1.428606765330187e-06f;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;  // 2^k as a float's bits
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x_in < -87.0f ? 0.0f : p * scale;  // exp(-87) is float32's smallest normal
}

}  // namespace tessel::detail::vec
