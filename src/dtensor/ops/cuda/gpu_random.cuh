// Internal, device code only: tensor_random.cpp's counter hash and unit_open_high, bit for bit
// (core/counter_random.h on the host): splitmix64's output function (Steele, Lea, Flood 2014) on
// the counter-th state of a stream started from the seed, and its top 53 bits as a double in
// [0, 1). Dropout (gpu_move.cu) and the fused attention's dropout (gpu_attention.cu) draw with it,
// so the GPU drops exactly the elements the CPU drops.
#pragma once

#include <cstdint>

namespace tessel::detail::gpu {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;  // splitmix64's Weyl increment

__device__ inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__device__ inline double uniform_at(uint64_t seed, uint64_t counter) {
  const uint64_t bits = mix64(mix64(seed + kGolden) + counter * kGolden);
  return static_cast<double>(bits >> 11) * 0x1p-53;
}

}  // namespace tessel::detail::gpu
