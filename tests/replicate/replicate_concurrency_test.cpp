// Replicas are controller threads dispatching DTensor ops on disjoint devices of one Runtime at
// the same time. These tests run the op and relayout paths from every replica at once (run them
// under ThreadSanitizer: build-tsan) and check that collective groups of different devices are
// never shared.
#include <gtest/gtest.h>

#include "replicate/replicate_testing.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/mesh/mesh.h"

namespace tessel {
namespace {

using testing::replicate_options;

TEST(ReplicateConcurrency, MeshesOverDifferentDevicesNeverShareCollectiveGroups) {
  // Relayout's groups are keyed by the mesh fingerprint: two replicas' meshes of equal shape
  // (and relayout's send_recv meshes, built from device names) must differ in it.
  const Mesh a = Mesh::create_on_devices({{"x", 2}}, {"CPU:0", "CPU:1"});
  const Mesh b = Mesh::create_on_devices({{"x", 2}}, {"CPU:2", "CPU:3"});
  EXPECT_NE(a.global_fingerprint(), b.global_fingerprint());
  EXPECT_EQ(a.global_fingerprint(),
            Mesh::create_on_devices({{"x", 2}}, {"CPU:0", "CPU:1"}, "named").global_fingerprint());
}

// Every replica relays its tensors through all the layouts of its 2-core mesh, many times, with
// ops between, and checks the values at the end: a group shared between replicas would mix
// their blocks (or race, under TSan).
TEST(ReplicateConcurrency, OpsAndRelayoutsInEveryReplicaAtOnce) {
  constexpr int kRounds = 20;
  std::vector<Tensor> inputs;
  for (int r = 0; r < 2; ++r) inputs.push_back(Tensor::random_uniform({7, 5}, DType::kF32, 10 + r));
  const auto outs = replicate(
      [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
        const Mesh& mesh = ctx.mesh();
        const std::vector<Layout> layouts = {
            Layout({"core", "unsharded"}, mesh), Layout({"unsharded", "core"}, mesh),
            Layout::replicated(mesh, 2),
            Layout::create(LayoutType::kStatic,
                           {ShardingSpec::unsharded(), ShardingSpec::unsharded()}, mesh,
                           {PartialDim{"core", ReduceOp::kSum}})};
        // The same cores in the other order: relayouts between the two meshes are send_recv
        // steps, whose groups relayout keys by a mesh of the participants' names.
        const std::vector<std::string> cores = mesh.local_devices();
        const Mesh flipped = Mesh::create_on_devices({{"flip", 2}}, {cores[1], cores[0]});
        const Layout flipped_rows({"flip", "unsharded"}, flipped);
        DTensor x = in[0];
        for (int i = 0; i < kRounds; ++i) {
          for (const Layout& l : layouts) x = relayout(x, l);
          x = relayout(relayout(x, flipped_rows), layouts[0]);
          x = add(multiply(x, 1.0), 0.0);
          x = transpose(transpose(x));
        }
        return std::vector<DTensor>{relayout(x, Layout::replicated(mesh, 2)), reduce_sum(x, {0})};
      },
      {inputs}, {}, {}, {}, replicate_options(2, 2));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(to_host(outs[r][0]).to_vector<float>(), inputs[r].to_vector<float>());
    const std::vector<float> v = inputs[r].to_vector<float>();
    const std::vector<float> sums = to_host(outs[r][1]).to_vector<float>();
    for (int j = 0; j < 5; ++j) {
      float s = 0;
      for (int i = 0; i < 7; ++i) s += v[static_cast<size_t>(i * 5 + j)];
      EXPECT_NEAR(sums[static_cast<size_t>(j)], s, 1e-4);
    }
  }
}

TEST(ReplicateConcurrency, ManyReplicateCallsInARow) {
  for (int i = 0; i < 20; ++i) {
    const auto outs = replicate(
        [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
          return std::vector<DTensor>{ctx.all_reduce(multiply(in[0], 2.0))};
        },
        {{testing::vec({1}), testing::vec({2}), testing::vec({3}), testing::vec({4})}}, {}, {}, {},
        replicate_options(4));
    for (const auto& out : outs) ASSERT_EQ(testing::host_values(out[0]), std::vector<float>{20});
  }
}

}  // namespace
}  // namespace tessel
