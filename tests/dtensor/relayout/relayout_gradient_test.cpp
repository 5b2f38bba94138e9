// The gradient of relayout (seed 74: TF registers Relayout's gradient as relayout_like): the
// gradient reaching relayout's input comes back in the input's layout, with the values of the
// gradient that reached the output, for every pair of layouts of a 2x2 mesh (sharded,
// replicated, uneven shards, Partial sums) and a loss on either side.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/relayout.h"
#include "testing/op_check.h"

namespace tessel {
namespace {

TEST(Seed74, RelayoutGradientIsRelayoutLikeTheInput) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  std::mt19937 rng(74);
  const Shape shape{5, 3};  // 5 rows over 2 devices: uneven shards
  const Tensor x = testing::random_host(shape, DType::kF64, 1);
  const Tensor w = testing::random_host(shape, DType::kF64, 2);
  for (int trial = 0; trial < 24; ++trial) {
    const Layout from = testing::random_op_layout(mesh, 2, rng, /*partial=*/true);
    const Layout to = testing::random_op_layout(mesh, 2, rng, /*partial=*/true);
    SCOPED_TRACE(from.to_string() + " -> " + to.to_string());
    const DTensor input = copy_to_mesh(x, from, rt);
    const DTensor weights = copy_to_mesh(w, Layout::replicated(mesh, 2), rt);
    const auto [loss, grads] = value_and_grad(
        [&](const std::vector<DTensor>& p) {
          return reduce_sum(multiply(relayout(p[0], to), weights));
        },
        {input});
    // d sum(relayout(x) * w) / dx = w, laid out exactly as x was (relayout_like): a Partial
    // input's gradient is Partial over the same mesh dimensions, its terms summing to w.
    EXPECT_EQ(grads[0].layout(), from);
    EXPECT_EQ(testing::values(grads[0]), w.to_doubles());
    double want = 0;
    const std::vector<double> xv = x.to_doubles(), wv = w.to_doubles();
    for (size_t i = 0; i < xv.size(); ++i) want += xv[i] * wv[i];
    EXPECT_NEAR(testing::values(loss)[0], want, 1e-12);
  }
}

TEST(Seed74, RelayoutLikeTakesTheOtherTensorsLayout) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Tensor v = testing::random_host(Shape{4, 6}, DType::kF32, 3);
  const DTensor a = copy_to_mesh(v, Layout({"x", "y"}, mesh), rt);
  const DTensor like = copy_to_mesh(v, Layout({"unsharded", "x"}, mesh), rt);
  const DTensor moved = relayout_like(a, like);
  EXPECT_EQ(moved.layout(), like.layout());
  EXPECT_EQ(testing::values(moved), v.to_doubles());
}

}  // namespace
}  // namespace tessel
