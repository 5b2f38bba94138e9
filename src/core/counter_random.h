// Internal: the counter-based generator behind Tensor::random_uniform / random_normal and
// dropout. Element i of a random tensor is a pure function of (seed, global flat index i), so a
// kernel that needs one element's draw (the fused attention's dropout) computes it alone and gets
// the value the whole tensor would hold there.
#pragma once

#include <cmath>
#include <cstdint>

namespace tessel::detail {

inline constexpr uint64_t kCounterGolden = 0x9E3779B97F4A7C15ull;  // splitmix64's Weyl increment

// splitmix64's output function (Steele, Lea, Flood 2014).
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The start state of the stream of `seed`: counter_hash(seed, c) is
// mix64(counter_stream(seed) + c * kCounterGolden), so a loop over counters derives it once.
inline uint64_t counter_stream(uint64_t seed) { return mix64(seed + kCounterGolden); }

// The counter-th output of a splitmix64 stream whose start state is derived from the seed.
inline uint64_t counter_hash(uint64_t seed, uint64_t counter) {
  return mix64(counter_stream(seed) + counter * kCounterGolden);
}

// Uniform in [0, 1) with 53 random bits.
inline double unit_open_high(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1p-53; }
// Uniform in (0, 1], safe for log().
inline double unit_open_low(uint64_t bits) {
  return static_cast<double>((bits >> 11) + 1) * 0x1p-53;
}

// unit_open_high(bits) >= rate exactly when (bits >> 11) >= keep_threshold(rate), rate in [0, 1):
// the uniform is (bits >> 11) * 2^-53 and rate * 2^53 is exact, so dropout's test can be done on
// integers (vector lanes).
inline uint64_t keep_threshold(double rate) {
  return static_cast<uint64_t>(std::ceil(std::ldexp(rate, 53)));
}

// random_uniform's value at global flat index i (low 0, high 1, a floating dtype): dropout keeps
// element i when this is >= its rate.
inline double uniform_at(uint64_t seed, uint64_t i) {
  return unit_open_high(counter_hash(seed, i));
}

}  // namespace tessel::detail
