// cpu_vector_math.h against double-precision libm: the bounds its header states, on a dense grid
// and at the edges (zero, the clamps, infinities, NaN), on every split of the work.
#include "dtensor/ops/cpu_vector_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tessel/core/parallel.h"

namespace tessel::detail {
namespace {

std::vector<float> grid(float lo, float hi, int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = lo + (hi - lo) * i / (n - 1);
  return x;
}

double gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_grad(double x) {
  return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
}

TEST(CpuVectorMath, ErfAndGeluWithinTheirBounds) {
  for (int threads : {1, 2}) {
    set_intra_op_threads(threads);
    const auto x = grid(-10, 10, 200001);
    std::vector<float> e(x.size()), g(x.size()), dg(x.size()), ones(x.size(), 1.0f);
    vec::erf(x.data(), e.data(), static_cast<int64_t>(x.size()));
    vec::gelu_erf(x.data(), g.data(), static_cast<int64_t>(x.size()));
    vec::gelu_erf_grad(ones.data(), x.data(), dg.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      const double v = x[i];
      ASSERT_NEAR(e[i], std::erf(v), 4e-7) << "erf(" << v << ")";
      ASSERT_NEAR(g[i], gelu(v), 2e-6 * std::max(1.0, std::fabs(v))) << "gelu(" << v << ")";
      ASSERT_NEAR(dg[i], gelu_grad(v), 1e-6) << "gelu'(" << v << ")";
    }
  }
  set_intra_op_threads(0);
}

TEST(CpuVectorMath, ExpWithinItsBoundAndAtTheEdges) {
  const auto x = grid(-87, 88, 300001);
  std::vector<float> y(x.size());
  vec::exp(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    ASSERT_NEAR(y[i] / want, 1.0, 2e-7) << "exp(" << x[i] << ")";
  }
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> edge = {0.0f, -0.0f, -inf, -100.0f, std::nanf("")};
  std::vector<float> out(edge.size());
  vec::exp(edge.data(), out.data(), static_cast<int64_t>(edge.size()));
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 1.0f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[3], 0.0f);
  EXPECT_TRUE(std::isnan(out[4]));
  std::vector<float> gelu_edge = {inf, -inf, std::nanf("")}, gout(3);
  vec::gelu_erf(gelu_edge.data(), gout.data(), 3);
  EXPECT_EQ(gout[0], inf);
  EXPECT_TRUE(std::isnan(gout[1]) || gout[1] == 0.0f);  // -inf * 0
  EXPECT_TRUE(std::isnan(gout[2]));
}

TEST(CpuVectorMath, SiluAndItsGradientWithinTheirBounds) {
  for (int threads : {1, 2}) {
    set_intra_op_threads(threads);
    const auto x = grid(-100, 100, 200001);
    std::vector<float> y(x.size()), dy(x.size()), ones(x.size(), 1.0f);
    vec::silu(x.data(), y.data(), static_cast<int64_t>(x.size()));
    vec::silu_grad(ones.data(), x.data(), dy.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      const double v = x[i], s = 1 / (1 + std::exp(-v));
      ASSERT_NEAR(y[i], v * s, 4e-7 * std::max(1.0, std::fabs(v))) << "silu(" << v << ")";
      ASSERT_NEAR(dy[i], s * (1 + v * (1 - s)), 1e-6) << "silu'(" << v << ")";
    }
  }
  set_intra_op_threads(0);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> edge = {inf, -inf, std::nanf(""), 0.0f}, out(4);
  vec::silu(edge.data(), out.data(), 4);
  EXPECT_EQ(out[0], inf);
  EXPECT_TRUE(std::isnan(out[1]));  // -inf * sigmoid(-inf) = -inf * 0, as libm's
  EXPECT_TRUE(std::isnan(out[2]));
  EXPECT_EQ(out[3], 0.0f);
}

}  // namespace
}  // namespace tessel::detail
