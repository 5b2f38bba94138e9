// TF's ring order of a grid of chips (device_assignment.py's _open_ring_2d and _ring_3d), used by
// DeviceAssignment::build's 3-D ring tiling.
#include <array>
#include <vector>

#include "core/errors.h"
#include "tessel/replicate/device_assignment.h"

namespace tessel {
namespace {

using Chip = std::array<int, 3>;

// The ring through an x by y grid (both even and > 1) at height z, without chip (0, 0): along
// row pairs (out on the even row, back on the odd one), then down column 0.
std::vector<Chip> open_ring_2d(int x_size, int y_size, int z) {
  std::vector<Chip> ring;
  for (int i = 0; i < y_size / 2; ++i) {
    for (int j = 1; j < x_size; ++j) ring.push_back({j, 2 * i, z});
    for (int j = x_size - 1; j > 0; --j) ring.push_back({j, 2 * i + 1, z});
  }
  for (int i = y_size - 1; i > 0; --i) ring.push_back({0, i, z});
  return ring;
}

bool odd_and_above_one(int n) { return n > 1 && n % 2 != 0; }

}  // namespace

std::vector<std::array<int, 3>> ring_3d(int x_size, int y_size, int z_size) {
  if (x_size < 1 || y_size < 1 || z_size < 1) {
    detail::throw_invalid("DeviceAssignment", "ring_3d: sizes must be >= 1; got ({}, {}, {})",
                          x_size, y_size, z_size);
  }
  std::vector<Chip> ring;
  // Two dimensions of size 1: a line.
  if (x_size == 1 && y_size == 1) {
    for (int i = 0; i < z_size; ++i) ring.push_back({0, 0, i});
    return ring;
  }
  if (x_size == 1 && z_size == 1) {
    for (int i = 0; i < y_size; ++i) ring.push_back({0, i, 0});
    return ring;
  }
  if (y_size == 1 && z_size == 1) {
    for (int i = 0; i < x_size; ++i) ring.push_back({i, 0, 0});
    return ring;
  }
  // An odd dimension: TF does not build a ring, it walks the grid x-fastest.
  if (odd_and_above_one(x_size) || odd_and_above_one(y_size) || odd_and_above_one(z_size)) {
    for (int z = 0; z < z_size; ++z) {
      for (int y = 0; y < y_size; ++y) {
        for (int x = 0; x < x_size; ++x) ring.push_back({x, y, z});
      }
    }
    return ring;
  }
  ring.push_back({0, 0, 0});
  // One dimension of size 1: a flat ring in the other two.
  if (z_size == 1) {
    for (const auto& c : open_ring_2d(x_size, y_size, 0)) ring.push_back(c);
    return ring;
  }
  if (y_size == 1) {
    for (const auto& c : open_ring_2d(x_size, z_size, 0)) ring.push_back({c[0], c[2], c[1]});
    return ring;
  }
  if (x_size == 1) {
    for (const auto& c : open_ring_2d(y_size, z_size, 0)) ring.push_back({c[2], c[0], c[1]});
    return ring;
  }
  // All even and > 1: one open ring per z level, alternately reversed, back down the (0, 0) column.
  for (int z = 0; z < z_size; ++z) {
    auto level = open_ring_2d(x_size, y_size, z);
    if (z % 2 == 0) {
      ring.insert(ring.end(), level.begin(), level.end());
    } else {
      ring.insert(ring.end(), level.rbegin(), level.rend());
    }
  }
  for (int z = z_size - 1; z > 0; --z) ring.push_back({0, 0, z});
  return ring;
}

}  // namespace tessel
