// Shard arithmetic: chunk semantics, which device holds which block, and the drawings.
#include <gtest/gtest.h>

#include "mesh/mesh_helpers.h"
#include "tessel/mesh/shard_map.h"
#include "tessel/mesh/shard_range.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

TEST(ShardRange, EvenAndUneven) {
  EXPECT_EQ(shard_range(8, 4, 3), (ShardRange{6, 2}));
  EXPECT_EQ(shard_range(10, 4, 0), (ShardRange{0, 3}));
  EXPECT_EQ(shard_range(10, 4, 3), (ShardRange{9, 1}));
  EXPECT_EQ(shard_range(2, 4, 3), (ShardRange{2, 0}));
  EXPECT_EQ(shard_range(0, 3, 1), (ShardRange{0, 0}));
  EXPECT_TESSEL_ERROR(shard_range(4, 0, 0), ErrorCode::kInvalidArgument, "shard count 0");
  EXPECT_TESSEL_ERROR(shard_range(4, 2, 2), ErrorCode::kOutOfRange, "shard index 2");
}

TEST(ShardRange, ShardsCoverEveryIndexExactlyOnce) {
  for (int64_t n = 0; n < 40; ++n) {
    for (int64_t shards = 1; shards < 12; ++shards) {
      int64_t next = 0;
      for (int64_t i = 0; i < shards; ++i) {
        const ShardRange r = shard_range(n, shards, i);
        EXPECT_EQ(r.offset, next);
        next += r.extent;
      }
      EXPECT_EQ(next, n);
    }
  }
}

TEST(ShardMap, BlocksOfTwoByTwo) {
  ShardMap map(Layout({"x", "y"}, testing::mesh_2x2()), Shape{8, 6});
  EXPECT_EQ(map.block(0), (ShardBlock{{0, 0}, {4, 3}, {0, 0}}));
  EXPECT_EQ(map.block(1), (ShardBlock{{0, 3}, {4, 3}, {0, 1}}));
  EXPECT_EQ(map.block(3), (ShardBlock{{4, 3}, {4, 3}, {1, 1}}));
  EXPECT_EQ(map.distinct_blocks().size(), 4u);
  EXPECT_TESSEL_ERROR(map.block(4), ErrorCode::kOutOfRange, "device offset 4");
}

TEST(ShardMap, ReplicatedDimsShareBlocks) {
  ShardMap map(Layout({"x", "unsharded"}, testing::mesh_2x2()), Shape{8, 6});
  auto distinct = map.distinct_blocks();
  ASSERT_EQ(distinct.size(), 2u);
  EXPECT_EQ(distinct[1].device_offsets, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(distinct[1].block.offsets, (std::vector<int64_t>{4, 0}));
}

TEST(ShardMap, UnevenBlocksCoverTheTensor) {
  ShardMap map(Layout({"x", "y"}, Mesh::from_string("|x=2,y=3|*CPU")), Shape{5, 4});
  int64_t total = 0;
  for (const auto& r : map.distinct_blocks()) total += r.block.extents[0] * r.block.extents[1];
  EXPECT_EQ(total, 20);
  EXPECT_EQ(map.block(5).extents, (std::vector<int64_t>{2, 0}));  // chunk 2 along y: [4:4)
}

TEST(ShardMap, RankMismatchAndEmptyLayout) {
  EXPECT_TESSEL_ERROR(ShardMap(Layout({"x"}, testing::mesh_2x2()), Shape{4, 4}),
                      ErrorCode::kInvalidArgument, "shape [4,4] has rank 2 but layout");
  EXPECT_TESSEL_ERROR(ShardMap(Layout(), Shape{}), ErrorCode::kInvalidArgument,
                      "the empty layout places no tensor");
}

TEST(ShardMap, VisualizeGrid) {
  std::string text = visualize(Layout({"x", "y"}, testing::mesh_2x2()), Shape{8, 6});
  EXPECT_EQ(text,
            "shape [8,6] as [x,y] over mesh |x=2,y=2|, device ids in each block\n"
            "        [0:3)   [3:6)  \n"
            "      +-------+-------+\n"
            "[0:4) |   0   |   1   |\n"
            "      +-------+-------+\n"
            "[4:8) |   2   |   3   |\n"
            "      +-------+-------+\n");
}

TEST(ShardMap, VisualizeRankOneReplicasAndPartial) {
  Layout l = Layout({"y"}, testing::mesh_2x2()).with_partial({{"x", ReduceOp::kSum}});
  std::string text = visualize(l, Shape{6});
  EXPECT_NE(text.find("|  0,2  |  1,3  |"), std::string::npos) << text;
  EXPECT_NE(text.find("pending sum over mesh dimension x"), std::string::npos) << text;
}

TEST(ShardMap, VisualizeTableForRankThree) {
  std::string text = visualize(Layout({"x", "unsharded", "y"}, testing::mesh_2x2()), Shape{4, 2, 3});
  EXPECT_NE(text.find("3                [2:4) x [0:2) x [2:3)"), std::string::npos) << text;
}

TEST(ShardMap, SingleDevice) {
  Layout l = Layout::single_device(Mesh::from_device("/job:localhost/task:0/device:CPU:0"));
  ShardMap map(l, Shape{3, 2});
  EXPECT_EQ(map.num_devices(), 1);
  EXPECT_EQ(map.block(0).extents, (std::vector<int64_t>{3, 2}));
}

}  // namespace
}  // namespace tessel
