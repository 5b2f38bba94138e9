// DTensor ops and relayouts called from several threads at once on the same mesh (the runtime's
// shared communicator groups): every call gives the right values within its own timeout (+10 %).
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/relayout.h"
#include "testing/concurrent_calls.h"

namespace tessel {
namespace {

using testing::bound_seconds;
using testing::longest_of_concurrent_calls;

TEST(DTensorConcurrency, RelayoutsAndOpsFromSeveralThreadsOnOneMeshFinishWithinTheirTimeout) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const RelayoutOptions options{std::chrono::milliseconds(2000)};
  const std::vector<Layout> layouts = {Layout({"x", "y"}, mesh), Layout({"y", "unsharded"}, mesh),
                                       Layout({"unsharded", "x"}, mesh),
                                       Layout::replicated(mesh, 2)};
  const double longest = longest_of_concurrent_calls(4, 5, [&](int t, int i) {
    const Tensor a = Tensor::random_uniform({8, 6}, DType::kF32, 100 * t + i);
    const Tensor ones = Tensor::full({6, 4}, DType::kF32, 1.0);
    DTensor x = copy_to_mesh(a, Layout::replicated(mesh, 2), rt);
    for (const Layout& l : layouts) x = relayout(x, l, options);
    // Sharded contraction: a Partial(sum) product, reduced by the relayout to replicated.
    const DTensor w = copy_to_mesh(ones, Layout({"x", "unsharded"}, mesh), rt);
    const DTensor y = relayout(matmul(relayout(x, Layout({"unsharded", "x"}, mesh), options), w),
                               Layout::replicated(mesh, 2), options);
    ASSERT_EQ(to_host(x).to_vector<float>(), a.to_vector<float>());
    const std::vector<float> v = a.to_vector<float>();
    const std::vector<float> got = to_host(y).to_vector<float>();
    for (int r = 0; r < 8; ++r) {
      float row = 0;
      for (int k = 0; k < 6; ++k) row += v[static_cast<size_t>(r * 6 + k)];
      for (int c = 0; c < 4; ++c) ASSERT_NEAR(got[static_cast<size_t>(r * 4 + c)], row, 1e-4);
    }
  });
  EXPECT_LT(longest, bound_seconds(std::chrono::milliseconds(2000)));
}

}  // namespace
}  // namespace tessel
