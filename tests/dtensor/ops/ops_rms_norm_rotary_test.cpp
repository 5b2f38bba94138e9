// rms_norm and rotary_embedding (ops.h), the Llama's normalisation and position embedding: exact
// values against formulas written here, each op against a single-device run over random layouts
// (Partial and uneven shards included) and its VJP against finite differences, the float32
// kernels against float64, the sharding rules, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "tessel/core/error.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/op_registry.h"
#include "testing/expect_error.h"
#include "testing/op_check.h"

namespace tessel {
namespace {

using testing::expect_matches_single_device;
using testing::expect_vjp_matches_finite_differences;
using testing::op_test_meshes;
using testing::random_host;
using testing::random_op_layout;
using testing::values;

// x [..., T, H, D] rotated by hand, in double.
std::vector<double> rotated(const Tensor& x, double theta) {
  const Shape& s = x.shape();
  const int r = s.rank();
  const int64_t d = s[r - 1], heads = s[r - 2], positions = s[r - 3], half = d / 2;
  const std::vector<double> v = x.to_doubles();
  std::vector<double> y(v.size());
  for (int64_t row = 0; row < x.num_elements() / d; ++row) {
    const int64_t t = (row / heads) % positions;
    for (int64_t j = 0; j < half; ++j) {
      const double a = static_cast<double>(t) * std::pow(theta, -2.0 * j / static_cast<double>(d));
      const size_t i1 = static_cast<size_t>(row * d + j), i2 = i1 + static_cast<size_t>(half);
      y[i1] = v[i1] * std::cos(a) - v[i2] * std::sin(a);
      y[i2] = v[i2] * std::cos(a) + v[i1] * std::sin(a);
    }
  }
  return y;
}

TEST(RmsNorm, ExactValues) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Tensor x = Tensor::from_vector<double>({1, 2, 3, 4, -1, 0, 0, 1}, Shape{2, 4});
  const std::vector<double> wv = {1, 2, 0.5, 1};
  const DTensor w =
      copy_to_mesh(Tensor::from_vector<double>(wv, Shape{4}), Layout::replicated(mesh, 1), rt);
  const std::vector<double> got =
      values(rms_norm(copy_to_mesh(x, Layout({"x", "y"}, mesh), rt), w, 1e-5));
  for (int r = 0; r < 2; ++r) {
    double squares = 0;
    for (int c = 0; c < 4; ++c) squares += std::pow(x.data<double>()[r * 4 + c], 2) / 4;
    for (int c = 0; c < 4; ++c) {
      const double want = x.data<double>()[r * 4 + c] / std::sqrt(squares + 1e-5) * wv[c];
      EXPECT_NEAR(got[static_cast<size_t>(r * 4 + c)], want, 1e-12);
    }
  }
}

TEST(RmsNorm, MatchesSingleDeviceAndFiniteDifferences) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(41);
  const std::vector<Mesh> meshes = op_test_meshes();
  const auto fn = [](const std::vector<DTensor>& in) { return rms_norm(in[0], in[1], 1e-5); };
  for (int t = 0; t < 9; ++t) {
    const Mesh& mesh = meshes[static_cast<size_t>(t) % meshes.size()];
    const Tensor x = random_host(Shape{3, 2, 5}, DType::kF64, 700 + t);
    const Tensor w = random_host(Shape{5}, DType::kF64, 800 + t);
    const std::vector<Layout> layouts = {random_op_layout(mesh, 3, rng, true),
                                         random_op_layout(mesh, 1, rng, true)};
    expect_matches_single_device(fn, {x, w}, layouts, rt, rng, 1e-12);
    if (t < 3) expect_vjp_matches_finite_differences(fn, {x, w}, layouts, rt, rng);
  }
}

TEST(RmsNorm, Float32KernelsAgreeWithFloat64) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Tensor x = random_host(Shape{6, 5, 40}, DType::kF64, 900);  // rows of 40: vector lanes
  const Tensor w = random_host(Shape{40}, DType::kF64, 901);
  const Tensor g = random_host(Shape{6, 5, 40}, DType::kF64, 902);
  const auto run = [&](DType dtype) {
    const Layout rows({"x", "y", "unsharded"}, mesh);
    const std::vector<DTensor> p = {copy_to_mesh(x.astype(dtype), rows, rt),
                                    copy_to_mesh(w.astype(dtype), Layout::replicated(mesh, 1), rt)};
    const DTensor weights = copy_to_mesh(g.astype(dtype), rows, rt);
    auto [y, grads] = value_and_grad(
        [&](const std::vector<DTensor>& q) {
          return reduce_sum(multiply(rms_norm(q[0], q[1], 1e-6), weights));
        },
        p);
    return std::vector<Tensor>{to_host(rms_norm(p[0], p[1], 1e-6)), to_host(grads[0]),
                               to_host(grads[1])};
  };
  const std::vector<Tensor> f32 = run(DType::kF32), f64 = run(DType::kF64);
  for (size_t i = 0; i < f32.size(); ++i) {
    const std::vector<double> a = f32[i].to_doubles(), b = f64[i].to_doubles();
    double scale = 0;
    for (double v : b) scale = std::max(scale, std::abs(v));
    for (size_t k = 0; k < a.size(); ++k) ASSERT_NEAR(a[k], b[k], 2e-6 * scale) << i << " " << k;
  }
}

TEST(RmsNorm, WeightGradientIsPartialOverTheRowDimsAndTheLastAxisWhole) {
  const Mesh mesh = Mesh::create({{"batch", 2}, {"seq", 2}});
  const Layout rows({"batch", "seq", "unsharded"}, mesh);
  const ShardingDecision w = plan_op("rms_norm_weight_grad", {{Shape{4, 6, 8}, DType::kF32, rows},
                                                              {Shape{4, 6, 8}, DType::kF32, rows},
                                                              {Shape{4, 6, 2}, DType::kF64, rows}});
  // The statistics' arity is checked: plan_op of two inputs names the op and the count.
  EXPECT_THROW(plan_op("rms_norm_weight_grad", {{Shape{4, 6, 8}, DType::kF32, rows},
                                                {Shape{4, 6, 8}, DType::kF32, rows}}),
               Error);
  EXPECT_EQ(w.output.partial().size(), 2u);
  const ShardingDecision d = plan_op(
      "rms_norm", {{Shape{4, 6, 8}, DType::kF32, Layout({"batch", "unsharded", "seq"}, mesh)},
                   {Shape{8}, DType::kF32, Layout({"seq"}, mesh)}});
  EXPECT_EQ(d.inputs[0], Layout({"batch", "unsharded", "unsharded"}, mesh));
  EXPECT_EQ(d.inputs[1], Layout::replicated(mesh, 1));
  EXPECT_EQ(d.output, d.inputs[0]);
}

TEST(RmsNorm, BadInputsNameTheOpAndTheValue) {
  Runtime rt({.num_cpu_devices = 1});
  const Mesh mesh = Mesh::create({{"x", 1}});
  const DTensor x =
      copy_to_mesh(random_host(Shape{2, 4}, DType::kF32, 1), Layout::replicated(mesh, 2), rt);
  const DTensor w =
      copy_to_mesh(random_host(Shape{4}, DType::kF32, 2), Layout::replicated(mesh, 1), rt);
  const DTensor w3 =
      copy_to_mesh(random_host(Shape{3}, DType::kF32, 2), Layout::replicated(mesh, 1), rt);
  EXPECT_TESSEL_ERROR(rms_norm(x, w3), ErrorCode::kInvalidArgument, "rms_norm: input 1 must be");
  EXPECT_TESSEL_ERROR(rms_norm(x, w, -1e-6), ErrorCode::kInvalidArgument,
                      "rms_norm: epsilon must be a finite number >= 0, got -1e-06");
}

TEST(RotaryEmbedding, ExactValuesOnShardedPositionsAndHeads) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Tensor x = random_host(Shape{2, 5, 2, 6}, DType::kF64, 11);  // 5 positions: 3/2 shards
  for (double theta : {10000.0, 3.0}) {
    const std::vector<double> got = values(rotary_embedding(
        copy_to_mesh(x, Layout({"unsharded", "x", "y", "unsharded"}, mesh), rt), theta));
    const std::vector<double> want = rotated(x, theta);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-14) << i;
  }
  // Position 0 is not rotated; every pair keeps its length.
  const std::vector<double> y =
      values(rotary_embedding(copy_to_mesh(x, Layout::replicated(mesh, 4), rt)));
  const std::vector<double> v = x.to_doubles();
  for (size_t j = 0; j < 12; ++j) EXPECT_DOUBLE_EQ(y[j], v[j]);
  for (size_t row = 0; row < v.size() / 6; ++row) {
    for (size_t j = 0; j < 3; ++j) {
      const size_t a = row * 6 + j, b = a + 3;
      EXPECT_NEAR(std::hypot(y[a], y[b]), std::hypot(v[a], v[b]), 1e-14);
    }
  }
}

TEST(RotaryEmbedding, MatchesSingleDeviceAndFiniteDifferences) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(42);
  const std::vector<Mesh> meshes = op_test_meshes();
  const auto fn = [](const std::vector<DTensor>& in) { return rotary_embedding(in[0], 100.0); };
  for (int t = 0; t < 9; ++t) {
    const Mesh& mesh = meshes[static_cast<size_t>(t) % meshes.size()];
    const Tensor x = random_host(t % 2 ? Shape{2, 5, 3, 4} : Shape{7, 2, 6}, DType::kF64, 1000 + t);
    const Layout layout = random_op_layout(mesh, x.shape().rank(), rng, true);
    expect_matches_single_device(fn, {x}, {layout}, rt, rng, 1e-13);
    if (t < 3) expect_vjp_matches_finite_differences(fn, {x}, {layout}, rt, rng);
  }
}

TEST(RotaryEmbedding, Float32AgreesWithFloat64AndTheRuleKeepsPositionsSharded) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Tensor x = random_host(Shape{2, 64, 2, 32}, DType::kF64, 12);
  const Layout l({"unsharded", "x", "y", "unsharded"}, mesh);
  const std::vector<double> a =
      values(rotary_embedding(copy_to_mesh(x.astype(DType::kF32), l, rt)));
  const std::vector<double> want = rotated(x, 10000.0);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], want[i], 1e-6) << i;
  OpAttrs attrs;
  attrs.value = 10000.0;
  const Layout positions({"unsharded", "x", "unsharded", "unsharded"}, mesh);
  const ShardingDecision d = plan_op(
      "rotary_embedding",
      {{Shape{2, 64, 2, 32}, DType::kF32, Layout({"unsharded", "x", "unsharded", "y"}, mesh)}},
      attrs);
  EXPECT_EQ(d.inputs[0], positions);  // head_dim gathered, positions kept
  EXPECT_EQ(d.output, positions);
  const ShardingDecision p = plan_op(
      "rotary_embedding",
      {{Shape{2, 64, 2, 32}, DType::kF32, positions.with_partial({{"y", ReduceOp::kSum}})}}, attrs);
  EXPECT_EQ(p.inputs[0], positions);  // a Partial input reduced first
}

TEST(RotaryEmbedding, BadInputsNameTheOpAndTheValue) {
  Runtime rt({.num_cpu_devices = 1});
  const Mesh mesh = Mesh::create({{"x", 1}});
  const auto put = [&](const Shape& s) {
    return copy_to_mesh(random_host(s, DType::kF32, 3), Layout::replicated(mesh, s.rank()), rt);
  };
  EXPECT_TESSEL_ERROR(rotary_embedding(put(Shape{4, 6})), ErrorCode::kInvalidArgument,
                      "rotary_embedding: x must be [..., positions, heads, head_dim] with an even "
                      "head_dim, got [4,6]");
  EXPECT_TESSEL_ERROR(rotary_embedding(put(Shape{2, 4, 5})), ErrorCode::kInvalidArgument,
                      "got [2,4,5]");
  EXPECT_TESSEL_ERROR(rotary_embedding(put(Shape{2, 4, 6}), 0.0), ErrorCode::kInvalidArgument,
                      "theta must be a finite number > 0, got 0");
}

}  // namespace
}  // namespace tessel
