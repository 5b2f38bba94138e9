// DeviceAssignment::build's device order modes (TF's DeviceOrderMode AUTO, RING, MESH) and the
// 3-D ring tiling full replication uses (TF's device_assignment.py: _ring_3d, _open_ring_2d).
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <set>
#include <vector>

#include "tessel/mesh/topology.h"
#include "tessel/replicate/device_assignment.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

using Chip = std::array<int, 3>;
using CA = DeviceAssignment::CoreAssignment;

// The 4x4 ring drawn in TF's _open_ring_2d docstring: the chip at (x, y) is visited at step
// number[y][x].
constexpr int kRing4x4[4][4] = {{0, 1, 2, 3}, {15, 6, 5, 4}, {14, 7, 8, 9}, {13, 12, 11, 10}};

// A mesh of chips with `cores` cores each: shape [x, y, z, cores], one task per chip.
Topology chips(int x, int y, int z, int cores) {
  std::vector<std::vector<std::vector<int>>> coordinates;
  for (int k = 0; k < z; ++k) {
    for (int j = 0; j < y; ++j) {
      for (int i = 0; i < x; ++i) {
        auto& task = coordinates.emplace_back();
        for (int c = 0; c < cores; ++c) task.push_back({i, j, k, c});
      }
    }
  }
  return Topology({x, y, z, cores}, coordinates, "TPU");
}

int manhattan(const Chip& a, const Chip& b) {
  return std::abs(a[0] - b[0]) + std::abs(a[1] - b[1]) + std::abs(a[2] - b[2]);
}

TEST(DeviceOrder, Ring2dFollowsTfsDrawing) {
  const auto ring = ring_3d(4, 4, 1);
  ASSERT_EQ(ring.size(), 16u);
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 4; ++x) EXPECT_EQ(ring[kRing4x4[y][x]], (Chip{x, y, 0})) << x << "," << y;
  }
}

TEST(DeviceOrder, Ring3dIsAClosedRingThroughEveryChip) {
  // TF's 4x4x4 drawing: layer z == 1 starts at (0, 1) with 16 and ends with 63 at (0, 0).
  const auto ring = ring_3d(4, 4, 4);
  ASSERT_EQ(ring.size(), 64u);
  EXPECT_EQ(ring[16], (Chip{0, 1, 1}));
  EXPECT_EQ(ring[30], (Chip{1, 0, 1}));
  EXPECT_EQ(ring[63], (Chip{0, 0, 1}));
  EXPECT_EQ(ring[61], (Chip{0, 0, 3}));
  for (const auto& [x, y, z] : std::vector<std::array<int, 3>>{{4, 4, 4}, {2, 4, 1}, {2, 1, 4},
                                                               {1, 4, 2}, {2, 2, 2}}) {
    const auto r = ring_3d(x, y, z);
    EXPECT_EQ(std::set<Chip>(r.begin(), r.end()).size(), static_cast<size_t>(x * y * z));
    for (size_t i = 0; i < r.size(); ++i) {
      EXPECT_EQ(manhattan(r[i], r[(i + 1) % r.size()]), 1)
          << x << "x" << y << "x" << z << " step " << i;
    }
  }
}

TEST(DeviceOrder, RingOfALineOrAnOddGridIsTheGridInOrder) {
  EXPECT_EQ(ring_3d(1, 1, 3), (std::vector<Chip>{{0, 0, 0}, {0, 0, 1}, {0, 0, 2}}));
  EXPECT_EQ(ring_3d(3, 1, 1), (std::vector<Chip>{{0, 0, 0}, {1, 0, 0}, {2, 0, 0}}));
  // An odd dimension > 1: x fastest, then y, then z (TF logs "Odd dimension").
  EXPECT_EQ(ring_3d(2, 3, 1), (std::vector<Chip>{{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {1, 1, 0},
                                                 {0, 2, 0}, {1, 2, 0}}));
  EXPECT_TESSEL_ERROR(ring_3d(0, 1, 1), ErrorCode::kInvalidArgument, "sizes must be >= 1");
}

TEST(DeviceOrder, AutoUsesTheRingForFullReplicationOfWholeChips) {
  // 2x2 chips of 2 cores, one replica per chip: replica grid [2, 2, 1, 1]; the ring visits
  // (0,0) (1,0) (1,1) (0,1) where the mesh order visits (0,0) (1,0) (0,1) (1,1).
  const auto t = chips(2, 2, 1, 2);
  const auto ring = DeviceAssignment::build(t, {1, 1, 1, 2}, {}, 4);
  EXPECT_EQ(ring.core_assignment_nested(),
            (CA{{{0, 0, 0, 0}, {0, 0, 0, 1}},
                {{1, 0, 0, 0}, {1, 0, 0, 1}},
                {{1, 1, 0, 0}, {1, 1, 0, 1}},
                {{0, 1, 0, 0}, {0, 1, 0, 1}}}));
  EXPECT_EQ(DeviceAssignment::build(t, {1, 1, 1, 2}, {}, 4, DeviceOrderMode::kRing), ring);
  const auto mesh = DeviceAssignment::build(t, {1, 1, 1, 2}, {}, 4, DeviceOrderMode::kMesh);
  EXPECT_EQ(mesh.core_assignment_nested(),
            (CA{{{0, 0, 0, 0}, {0, 0, 0, 1}},
                {{1, 0, 0, 0}, {1, 0, 0, 1}},
                {{0, 1, 0, 0}, {0, 1, 0, 1}},
                {{1, 1, 0, 0}, {1, 1, 0, 1}}}));
}

TEST(DeviceOrder, RingTilesEachReplicasBlockInRingOrder) {
  // 4x2 chips of 2 cores, blocks of 2x2 chips: two replicas, each walking its block's ring
  // (0,0) (1,0) (1,1) (0,1), both cores of a chip in turn.
  const auto da = DeviceAssignment::build(chips(4, 2, 1, 2), {2, 2, 1, 2}, {}, 2);
  ASSERT_EQ(da.num_cores_per_replica(), 8);
  EXPECT_EQ(da.core_assignment_nested()[1],
            (std::vector<std::vector<int>>{{2, 0, 0, 0}, {2, 0, 0, 1}, {3, 0, 0, 0}, {3, 0, 0, 1},
                                           {3, 1, 0, 0}, {3, 1, 0, 1}, {2, 1, 0, 0}, {2, 1, 0, 1}}));
}

TEST(DeviceOrder, AutoFallsBackToTheMeshWhereTheRingDoesNotApply) {
  const auto t = chips(2, 2, 1, 2);
  // One core of two per replica, a stride, fewer replicas than fit: the mesh placement.
  for (const auto& [shape, stride, replicas] :
       std::vector<std::tuple<std::vector<int>, std::vector<int>, int>>{
           {{1, 1, 1, 1}, {}, 8}, {{1, 1, 1, 2}, {2, 1, 1, 1}, 2}, {{1, 1, 1, 2}, {}, 3}}) {
    EXPECT_EQ(DeviceAssignment::build(t, shape, stride, replicas),
              DeviceAssignment::build(t, shape, stride, replicas, DeviceOrderMode::kMesh));
  }
}

TEST(DeviceOrder, RingWhereTheTilingDoesNotApplyIsTfsError) {
  const auto t = chips(2, 2, 1, 2);
  const char* text =
      "device_order_mode=DeviceOrderMode.RING is not compatible with the 3D tiling current "
      "topology.  Try setting device_order_mode=DeviceOrderMode.AUTO";
  // Half a chip per replica, a stride, partial replication, a rank-3 topology.
  EXPECT_TESSEL_ERROR(DeviceAssignment::build(t, {1, 1, 1, 1}, {}, 8, DeviceOrderMode::kRing),
                      ErrorCode::kInvalidArgument, text);
  EXPECT_TESSEL_ERROR(
      DeviceAssignment::build(t, {1, 1, 1, 2}, {2, 1, 1, 1}, 2, DeviceOrderMode::kRing),
      ErrorCode::kInvalidArgument, text);
  EXPECT_TESSEL_ERROR(DeviceAssignment::build(t, {1, 1, 1, 2}, {}, 3, DeviceOrderMode::kRing),
                      ErrorCode::kInvalidArgument, text);
  const Topology rank3({2, 1, 1}, {{{0, 0, 0}}, {{1, 0, 0}}});
  EXPECT_TESSEL_ERROR(DeviceAssignment::build(rank3, {}, {}, 2, DeviceOrderMode::kRing),
                      ErrorCode::kInvalidArgument, text);
}

TEST(DeviceOrder, MissingDevicesUseTaskOrderInEveryMode) {
  // Task 1's one device sits at [1, 1, 0, 0]; [0, 1, 0, 0] and [1, 0, 0, 0] are missing.
  const Topology t({2, 2, 1, 1}, {{{0, 0, 0, 0}}, {{1, 1, 0, 0}}});
  const auto expected = CA{{{0, 0, 0, 0}}, {{1, 1, 0, 0}}};
  for (auto mode : {DeviceOrderMode::kAuto, DeviceOrderMode::kRing, DeviceOrderMode::kMesh}) {
    EXPECT_EQ(DeviceAssignment::build(t, {}, {}, 2, mode).core_assignment_nested(), expected);
  }
}

}  // namespace
}  // namespace tessel
