// Collective groups of a mesh (TF's group assignment) and the communicator pool.
#include <gtest/gtest.h>

#include "tessel/comm/mesh_groups.h"
#include "testing/expect_error.h"
#include "testing/run_ranks.h"

namespace tessel {
namespace {

using Groups = std::vector<std::vector<int64_t>>;

TEST(MeshGroups, TwoByTwoMatchesTensorFlow) {
  Mesh m = Mesh::from_string("|x=2,y=2|*CPU");
  EXPECT_EQ(collective_groups(m, {"x"}), (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(collective_groups(m, {"y"}), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(collective_groups(m, {"x", "y"}), (Groups{{0, 1, 2, 3}}));
  EXPECT_EQ(collective_groups(m, {}), (Groups{{0}, {1}, {2}, {3}}));
}

TEST(MeshGroups, ThreeByTwoReducesOffsetsOfEqualKeptCoordinates) {
  Mesh m = Mesh::from_string("|x=3,y=2|*CPU");
  EXPECT_EQ(collective_groups(m, {"x"}), (Groups{{0, 2, 4}, {1, 3, 5}}));
  GroupPosition p = group_position(m, {"x"}, 3);
  EXPECT_EQ(p.group, 1);
  EXPECT_EQ(p.rank, 1);
  EXPECT_EQ(p.members, (std::vector<int64_t>{1, 3, 5}));
}

TEST(MeshGroups, BadDimensions) {
  Mesh m = Mesh::from_string("|x=2,y=2|*CPU");
  EXPECT_TESSEL_ERROR(collective_groups(m, {"z"}), ErrorCode::kInvalidArgument,
                      "mesh dimension z is not in mesh |x,y|");
  EXPECT_TESSEL_ERROR(collective_groups(m, {"x", "x"}), ErrorCode::kInvalidArgument,
                      "listed twice");
  EXPECT_TESSEL_ERROR(group_position(m, {"x"}, 4), ErrorCode::kInvalidArgument, "offset 4");
}

TEST(MeshGroups, PoolCreatesEachGroupOnceAndReducesWithinIt) {
  Mesh m = Mesh::from_string("|x=2,y=2|*CPU");
  CommunicatorPool pool;
  auto errors = testing::run_ranks(4, [&](int offset) {
    Communicator& comm = pool.get(m, {"x"}, offset);
    Tensor t = Tensor::full({3}, DType::kF32, offset);
    CollectiveOptions o;
    o.timeout = std::chrono::seconds(10);
    comm.all_reduce(t, t, ReduceOp::kSum, o);
    const float want = offset % 2 == 0 ? 0 + 2 : 1 + 3;  // groups {0,2} and {1,3}
    if (t.to_vector<float>() != std::vector<float>(3, want)) throw std::runtime_error("wrong sum");
    if (&pool.get(m, {"x"}, offset) != &comm) throw std::runtime_error("not cached");
  });
  EXPECT_EQ(testing::first_error(errors), "");
  EXPECT_EQ(pool.num_groups(), 2u);
  EXPECT_EQ(pool.get(m, {"x"}, 1).members(),
            (std::vector<std::string>{"/job:localhost/task:0/device:CPU:1",
                                      "/job:localhost/task:0/device:CPU:3"}));
}

}  // namespace
}  // namespace tessel
