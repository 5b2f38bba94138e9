// plan_relayout: the steps, their groups and their byte counts for every kind of transition.
#include <gtest/gtest.h>

#include "tessel/dtensor/relayout_plan.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

Mesh mesh_x4() { return Mesh::create({{"x", 4}}); }
Mesh mesh_2x2() { return Mesh::create({{"x", 2}, {"y", 2}}); }
Layout lay(const std::string& specs, const Mesh& mesh, std::vector<PartialDim> partial = {}) {
  std::vector<ShardingSpec> s;
  size_t start = 0;
  while (start <= specs.size()) {
    const size_t end = std::min(specs.find(',', start), specs.size());
    s.push_back(ShardingSpec::parse(specs.substr(start, end - start)));
    start = end + 1;
  }
  return Layout::create(LayoutType::kStatic, s, mesh, std::move(partial));
}

std::vector<std::string> kinds(const RelayoutPlan& plan) {
  std::vector<std::string> out;
  for (const RelayoutStep& s : plan.steps) out.push_back(s.kind_name());
  return out;
}

TEST(RelayoutPlan, SameLayoutHasNoSteps) {
  const Layout l = lay("x,unsharded", mesh_x4());
  EXPECT_TRUE(plan_relayout(Shape{8, 8}, l, l).steps.empty());
}

TEST(RelayoutPlan, ShardedToReplicatedIsOneAllGather) {
  const RelayoutPlan plan =
      plan_relayout(Shape{8, 4}, lay("x,unsharded", mesh_x4()), lay("unsharded,unsharded", mesh_x4()));
  ASSERT_EQ(kinds(plan), std::vector<std::string>{"all_gather"});
  EXPECT_EQ(plan.steps[0].mesh_dims, std::vector<std::string>{"x"});
  EXPECT_EQ(plan.steps[0].tensor_dims, std::vector<int>{0});
  // Each device sends its 2x4 f32 block to 3 peers; it ends up holding the whole 8x4.
  EXPECT_EQ(plan.steps[0].bytes_per_device, 3 * 2 * 4 * 4);
  EXPECT_EQ(plan.steps[0].peak_bytes, 8 * 4 * 4);
}

TEST(RelayoutPlan, Seed74_BR_74_06_ReplicatedToShardedIsALocalSliceWithoutCommunication) {
  const RelayoutPlan plan =
      plan_relayout(Shape{8, 4}, lay("unsharded,unsharded", mesh_x4()), lay("x,unsharded", mesh_x4()));
  ASSERT_EQ(kinds(plan), std::vector<std::string>{"local_slice"});
  EXPECT_EQ(plan.bytes_per_device(), 0);
  EXPECT_EQ(plan.peak_bytes(), 2 * 4 * 4);
}

TEST(RelayoutPlan, ShardedDimensionMovesWithOneAllToAll) {
  const RelayoutPlan plan = plan_relayout(Shape{4096, 4096}, lay("x,unsharded", mesh_x4()),
                                          lay("unsharded,x", mesh_x4()));
  ASSERT_EQ(kinds(plan), std::vector<std::string>{"all_to_all"});
  EXPECT_EQ(plan.steps[0].tensor_dims, (std::vector<int>{0, 1}));
  // Each device keeps a quarter of its 16 MiB shard and sends the other three quarters.
  EXPECT_EQ(plan.bytes_per_device(), 12 << 20);
  EXPECT_EQ(plan.peak_bytes(), 16 << 20);
  EXPECT_NE(plan.to_string().find("1. all_to_all over x on dims 0->1: 12.0 MiB sent per device"),
            std::string::npos)
      << plan;
}

TEST(RelayoutPlan, SwappedMeshDimensionsMoveOnlyTheOffDiagonalBlocks) {
  const RelayoutPlan plan =
      plan_relayout(Shape{4, 4}, lay("x,y", mesh_2x2()), lay("y,x", mesh_2x2()));
  ASSERT_EQ(kinds(plan), std::vector<std::string>{"send_recv"});
  int moved = 0;
  for (const RelayoutTransfer& t : plan.steps[0].transfers) moved += t.from != t.to;
  EXPECT_EQ(moved, 2);                               // (0,1) <-> (1,0); the diagonal stays
  EXPECT_EQ(plan.bytes_per_device(), 2 * 2 * 4);     // one 2x2 f32 block
}

TEST(RelayoutPlan, PartialToReplicatedIsOneAllReduce) {
  const RelayoutPlan plan = plan_relayout(
      Shape{8}, lay("unsharded", mesh_x4(), {{"x", ReduceOp::kSum}}), lay("unsharded", mesh_x4()));
  ASSERT_EQ(kinds(plan), std::vector<std::string>{"all_reduce"});
  EXPECT_EQ(plan.steps[0].mesh_dims, std::vector<std::string>{"x"});
}

TEST(RelayoutPlan, PartialToShardedIsOneReduceScatter) {
  const RelayoutPlan plan = plan_relayout(
      Shape{8, 2}, lay("unsharded,unsharded", mesh_x4(), {{"x", ReduceOp::kSum}}),
      lay("x,unsharded", mesh_x4()));
  ASSERT_EQ(kinds(plan), std::vector<std::string>{"reduce_scatter"});
  EXPECT_EQ(plan.steps[0].tensor_dims, std::vector<int>{0});
  EXPECT_EQ(plan.peak_bytes(), 2 * 2 * 4);
}

TEST(RelayoutPlan, ReplicatedToPartialIsLocal) {
  const RelayoutPlan plan = plan_relayout(Shape{8}, lay("unsharded", mesh_x4()),
                                          lay("unsharded", mesh_x4(), {{"x", ReduceOp::kSum}}));
  ASSERT_EQ(kinds(plan), std::vector<std::string>{"local_partial"});
  EXPECT_EQ(plan.bytes_per_device(), 0);
}

TEST(RelayoutPlan, MatchKeepsTheSourceSpec) {
  const RelayoutPlan plan = plan_relayout(Shape{4, 4}, lay("x,y", mesh_2x2()),
                                          lay("match,unsharded", mesh_2x2()));
  EXPECT_EQ(plan.to, lay("x,unsharded", mesh_2x2()));
  ASSERT_EQ(kinds(plan), std::vector<std::string>{"all_gather"});
  EXPECT_EQ(plan.steps[0].mesh_dims, std::vector<std::string>{"y"});
}

TEST(RelayoutPlan, MatchOnADimensionTheTargetUsesElsewhereIsAnError) {
  EXPECT_TESSEL_ERROR(plan_relayout(Shape{4, 4}, lay("x,unsharded", mesh_2x2()),
                                    lay("match,x", mesh_2x2())),
                      ErrorCode::kInvalidArgument, "cannot resolve 'match' on axis 0");
}

TEST(RelayoutPlan, SeveralMeshDimensionsOnOneTensorDimension) {
  const Mesh m = mesh_2x2();
  RelayoutPlan plan = plan_relayout(Shape{8, 2}, lay("x+y,unsharded", m), lay("unsharded,unsharded", m));
  ASSERT_EQ(kinds(plan), std::vector<std::string>{"all_gather"});
  EXPECT_EQ(plan.steps[0].mesh_dims, (std::vector<std::string>{"x", "y"}));
  plan = plan_relayout(Shape{8, 2}, lay("x+y,unsharded", m), lay("x,unsharded", m));
  ASSERT_EQ(kinds(plan), std::vector<std::string>{"all_gather"});
  EXPECT_EQ(plan.steps[0].mesh_dims, std::vector<std::string>{"y"});
  plan = plan_relayout(Shape{8, 2}, lay("x,unsharded", m), lay("x+y,unsharded", m));
  ASSERT_EQ(kinds(plan), std::vector<std::string>{"local_slice"});
}

TEST(RelayoutPlan, UnevenShardsThatDoNotNestMoveBySendRecv) {
  // 10 rows: x+y gives 3,3,3,1 rows; x alone 5,5. Gathering y inside each x group cannot make
  // x's rows (row 5 lives in the other group), so the blocks move directly.
  const Mesh m = mesh_2x2();
  const RelayoutPlan plan =
      plan_relayout(Shape{10, 1}, lay("x+y,unsharded", m), lay("x,unsharded", m));
  ASSERT_EQ(kinds(plan), std::vector<std::string>{"send_recv"});
}

TEST(RelayoutPlan, UnevenAllGatherKeepsEveryRow) {
  const RelayoutPlan plan = plan_relayout(Shape{10}, lay("x", mesh_x4()), lay("unsharded", mesh_x4()));
  ASSERT_EQ(kinds(plan), std::vector<std::string>{"all_gather"});
  EXPECT_EQ(plan.steps[0].bytes_per_device, 3 * 3 * 4);  // a 3-row shard to 3 peers
}

TEST(RelayoutPlan, AnotherMeshIsOneSendRecvOfTheBlocksThatMove) {
  const Mesh four = mesh_x4();
  const Mesh two = Mesh::create_on_devices({{"x", 2}}, {"CPU:2", "CPU:3"});
  const RelayoutPlan plan = plan_relayout(Shape{8}, lay("x", four), lay("x", two));
  ASSERT_EQ(kinds(plan), std::vector<std::string>{"send_recv"});
  // CPU:2 needs rows 0-3 (held by CPU:0, CPU:1), CPU:3 rows 4-7 (CPU:2, CPU:3: one stays).
  EXPECT_EQ(plan.steps[0].participants.size(), 4u);
  int moved = 0;
  for (const RelayoutTransfer& t : plan.steps[0].transfers) moved += t.from != t.to;
  EXPECT_EQ(moved, 3);
}

TEST(RelayoutPlan, DifferentRankIsAnError) {
  EXPECT_TESSEL_ERROR(plan_relayout(Shape{8, 8}, lay("x,unsharded", mesh_x4()), lay("x", mesh_x4())),
                      ErrorCode::kInvalidArgument,
                      "Attempted to relayout to a different global shape");
}

TEST(RelayoutPlan, AnySpecIsAnError) {
  EXPECT_TESSEL_ERROR(
      plan_relayout(Shape{8}, lay("x", mesh_x4()), lay("any", mesh_x4())),
      ErrorCode::kInvalidArgument, "has a 'any' spec");
}

TEST(RelayoutPlan, ChangingThePendingReductionIsAnError) {
  EXPECT_TESSEL_ERROR(plan_relayout(Shape{8}, lay("unsharded", mesh_x4(), {{"x", ReduceOp::kSum}}),
                                    lay("unsharded", mesh_x4(), {{"x", ReduceOp::kMax}})),
                      ErrorCode::kInvalidArgument, "cannot turn a pending sum over x");
}

TEST(RelayoutPlan, GathersEveryDimensionInOneStep) {
  const RelayoutPlan plan =
      plan_relayout(Shape{8, 8}, lay("x,y", mesh_2x2()), lay("unsharded,unsharded", mesh_2x2()));
  ASSERT_EQ(kinds(plan), std::vector<std::string>{"all_gather"});
  EXPECT_EQ(plan.steps[0].mesh_dims, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(plan.steps[0].tensor_dims, (std::vector<int>{0, 1}));
}

TEST(RelayoutPlan, LaterStepsCountTheirHeldInput) {
  // all_gather over x (-> 8x8 on every device), then local_partial into a new 8x8: the second
  // step holds both.
  const RelayoutPlan plan = plan_relayout(Shape{8, 8}, lay("x,unsharded", mesh_2x2()),
                                          lay("unsharded,unsharded", mesh_2x2(), {{"y", ReduceOp::kSum}}));
  ASSERT_EQ(kinds(plan), (std::vector<std::string>{"all_gather", "local_partial"}));
  EXPECT_EQ(plan.steps[1].peak_bytes, 2 * 8 * 8 * 4);
}

TEST(RelayoutPlan, PrintsOneLinePerStep) {
  const RelayoutPlan plan = plan_relayout(Shape{4, 4}, lay("x,unsharded", mesh_2x2()),
                                          lay("y,x", mesh_2x2()));
  const std::string text = plan.to_string();
  EXPECT_EQ(static_cast<size_t>(std::count(text.begin(), text.end(), '\n')), plan.steps.size());
  EXPECT_EQ(text.rfind("relayout [4,4] f32: x,unsharded -> y,x on |x=2|y=2|", 0), 0u) << text;
}

}  // namespace
}  // namespace tessel
