// The reduction ops (ops_reduction.cpp): exact values, the sharding rules (plan_op: reduced
// sharded axes become Partial, unreduced axes keep their sharding, Partial inputs), random
// layouts against a single-device run, VJPs against finite differences (max: ties split
// equally, TF's rule), errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/relayout.h"
#include "testing/expect_error.h"
#include "testing/op_check.h"

namespace tessel {
namespace {

using testing::distribute;
using testing::expect_matches_single_device;
using testing::expect_vjp_matches_finite_differences;
using testing::OpFn;
using testing::random_host;
using testing::random_op_layout;

using testing::values;

void expect_near(const DTensor& t, const std::vector<double>& want, double tol = 1e-12) {
  const std::vector<double> got = values(t);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

DTensor put(const std::vector<double>& v, const Shape& shape, const Layout& layout, Runtime& rt,
            DType dtype = DType::kF64) {
  Tensor t = Tensor::from_vector<double>(v, shape);
  return copy_to_mesh(dtype == DType::kF64 ? t : t.astype(dtype), layout, rt);
}

Layout layout_of(const std::vector<std::string>& specs, const Mesh& mesh,
                 std::vector<PartialDim> partial = {}) {
  return Layout(specs, mesh).with_partial(std::move(partial));
}

std::vector<Mesh> meshes() {
  return {Mesh::create({{"x", 4}}), Mesh::create({{"x", 2}, {"y", 2}}), Mesh::create({{"x", 3}})};
}

// ---- exact values ----------------------------------------------------------------------------

TEST(ReductionValues, SumMeanMaxOfSmallMatrixInBothDtypes) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  for (DType dtype : {DType::kF32, DType::kF64}) {
    // [[1, 2, 3], [4, 5, 6]] with rows over x and columns over y (3 columns: 2 + 1).
    const DTensor x = put({1, 2, 3, 4, 5, 6}, {2, 3}, layout_of({"x", "y"}, mesh), rt, dtype);
    EXPECT_EQ(values(reduce_sum(x)), (std::vector<double>{21}));
    EXPECT_EQ(values(reduce_sum(x, {0})), (std::vector<double>{5, 7, 9}));
    EXPECT_EQ(values(reduce_sum(x, {1})), (std::vector<double>{6, 15}));
    EXPECT_EQ(values(reduce_sum(x, {-1}, true)), (std::vector<double>{6, 15}));
    EXPECT_EQ(reduce_sum(x, {-1}, true).shape(), (Shape{2, 1}));
    EXPECT_EQ(reduce_sum(x, {}, true).shape(), (Shape{1, 1}));
    EXPECT_EQ(reduce_sum(x).dtype(), dtype);
    EXPECT_EQ(values(reduce_mean(x, {0})), (std::vector<double>{2.5, 3.5, 4.5}));
    EXPECT_EQ(values(reduce_mean(x, {1})), (std::vector<double>{2, 5}));
    EXPECT_EQ(values(reduce_mean(x)), (std::vector<double>{3.5}));
    EXPECT_EQ(values(reduce_max(x, {0})), (std::vector<double>{4, 5, 6}));
    EXPECT_EQ(values(reduce_max(x, {1}, true)), (std::vector<double>{3, 6}));
    EXPECT_EQ(values(reduce_max(x)), (std::vector<double>{6}));
  }
}

TEST(ReductionValues, UnevenShardsWithEmptyBlocks) {
  Runtime rt({.num_cpu_devices = 4});
  // 2 rows over x=4: devices 2 and 3 hold empty blocks (sum 0, max -inf, neither counts).
  const Mesh mesh = Mesh::create({{"x", 4}});
  const DTensor x = put({-1, -2, -3, -4, -5, -6}, {2, 3}, layout_of({"x", "unsharded"}, mesh), rt);
  EXPECT_EQ(values(reduce_sum(x, {0})), (std::vector<double>{-5, -7, -9}));
  EXPECT_EQ(values(reduce_mean(x, {0})), (std::vector<double>{-2.5, -3.5, -4.5}));
  EXPECT_EQ(values(reduce_max(x, {0})), (std::vector<double>{-1, -2, -3}));
  EXPECT_EQ(values(reduce_max(x)), (std::vector<double>{-1}));
  // Rows kept: the output keeps the uneven sharding.
  const DTensor rows = reduce_sum(x, {1});
  EXPECT_EQ(rows.layout(), layout_of({"x"}, mesh));
  EXPECT_EQ(values(rows), (std::vector<double>{-6, -15}));
}

TEST(ReductionValues, EmptyReductionGivesIdentity) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  const DTensor x =
      copy_to_mesh(Tensor::zeros({0, 3}, DType::kF64), layout_of({"x", "unsharded"}, mesh), rt);
  EXPECT_EQ(values(reduce_sum(x, {0})), (std::vector<double>{0, 0, 0}));
  const std::vector<double> m = values(reduce_max(x, {0}));
  for (double v : m) EXPECT_EQ(v, -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(values(reduce_mean(x, {0}))[0]));  // 0 / 0, as TF
  EXPECT_EQ(reduce_sum(x, {1}).shape(), (Shape{0}));
}

TEST(ReductionValues, RankZeroInputIsUnchanged) {
  Runtime rt({.num_cpu_devices = 4});
  const DTensor x = put({2.5}, Shape{}, Layout::replicated(Mesh::create({{"x", 4}}), 0), rt);
  EXPECT_EQ(values(reduce_sum(x)), (std::vector<double>{2.5}));
  EXPECT_EQ(values(reduce_mean(x)), (std::vector<double>{2.5}));
  EXPECT_EQ(values(reduce_max(x)), (std::vector<double>{2.5}));
}

TEST(ReductionValues, PartialSumInputIsSummedOnce) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(3);
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Tensor host = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  const DTensor x =
      distribute(host, layout_of({"x", "unsharded"}, mesh, {{"y", ReduceOp::kSum}}), rt, rng);
  expect_near(reduce_sum(x), {21});
  expect_near(reduce_mean(x, {1}), {2, 5});
  expect_near(reduce_max(x, {1}), {3, 6});
}

TEST(ReductionValues, MaxOfPartialMaxStaysPendingAndSumReducesItFirst) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  // Four pending terms whose elementwise max is [4, 5].
  const Layout layout = layout_of({"unsharded"}, mesh, {{"x", ReduceOp::kMax}});
  std::vector<Tensor> terms;
  for (const std::vector<double>& v : std::vector<std::vector<double>>{{1, 5}, {3, 2}, {0, 0}, {4, 1}}) {
    terms.push_back(Tensor::from_vector<double>(v, {2}));
  }
  const DTensor x = pack(terms, layout, rt);
  const DTensor m = reduce_max(x);
  EXPECT_EQ(m.layout(), layout_of({}, mesh, {{"x", ReduceOp::kMax}}));
  EXPECT_EQ(values(m), (std::vector<double>{5}));
  EXPECT_EQ(values(reduce_sum(x)), (std::vector<double>{9}));
}

// ---- sharding rules --------------------------------------------------------------------------

TensorSpec spec(const Shape& shape, const Layout& layout) { return {shape, DType::kF32, layout}; }

OpAttrs axes_attrs(std::vector<int64_t> axes, bool keepdims = false) {
  OpAttrs a;
  a.axes = std::move(axes);
  a.keepdims = keepdims;
  return a;
}

TEST(ReductionRule, ShardedReducedAxisBecomesPartialSumForSumAndMean) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Layout in = layout_of({"x", "y"}, mesh);
  for (const char* op : {"reduce_sum", "reduce_mean"}) {
    const ShardingDecision d = plan_op(op, {spec({8, 6}, in)}, axes_attrs({0}));
    EXPECT_EQ(d.inputs[0], in) << op;
    EXPECT_EQ(d.output, layout_of({"y"}, mesh, {{"x", ReduceOp::kSum}})) << op;
  }
}

TEST(ReductionRule, ShardedReducedAxisBecomesPartialMaxForMax) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Layout in = layout_of({"x", "y"}, mesh);
  const ShardingDecision d = plan_op("reduce_max", {spec({8, 6}, in)}, axes_attrs({1}, true));
  EXPECT_EQ(d.inputs[0], in);
  EXPECT_EQ(d.output, layout_of({"x", "unsharded"}, mesh, {{"y", ReduceOp::kMax}}));
}

TEST(ReductionRule, UnreducedAxesKeepTheirShardingWithNoCommunication) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Layout in = layout_of({"x+y", "unsharded", "unsharded"}, mesh);
  const ShardingDecision d = plan_op("reduce_sum", {spec({8, 6, 4}, in)}, axes_attrs({1, 2}));
  EXPECT_EQ(d.inputs[0], in);
  EXPECT_EQ(d.output, layout_of({"x+y"}, mesh));
}

TEST(ReductionRule, RankZeroOutputOfShardedInputIsPartialOverItsMeshDims) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const ShardingDecision d = plan_op("reduce_sum", {spec({8, 6}, layout_of({"y", "x"}, mesh))}, {});
  EXPECT_EQ(d.output.rank(), 0);
  EXPECT_EQ(d.output.partial(),
            (std::vector<PartialDim>{{"x", ReduceOp::kSum}, {"y", ReduceOp::kSum}}));
}

TEST(ReductionRule, SumAndMeanKeepAPartialSumInput) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Layout in = layout_of({"x", "unsharded"}, mesh, {{"y", ReduceOp::kSum}});
  for (const char* op : {"reduce_sum", "reduce_mean"}) {
    const ShardingDecision d = plan_op(op, {spec({8, 6}, in)}, axes_attrs({0}));
    EXPECT_EQ(d.inputs[0], in) << op;
    EXPECT_EQ(d.output,
              layout_of({"unsharded"}, mesh, {{"x", ReduceOp::kSum}, {"y", ReduceOp::kSum}}));
  }
}

TEST(ReductionRule, MaxDemandsAPartialSumInputReduced) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Layout in = layout_of({"x", "unsharded"}, mesh, {{"y", ReduceOp::kSum}});
  const ShardingDecision d = plan_op("reduce_max", {spec({8, 6}, in)}, axes_attrs({1}));
  EXPECT_EQ(d.inputs[0], in.without_partial());
  EXPECT_EQ(d.output, layout_of({"x"}, mesh));
}

TEST(ReductionRule, MaxKeepsAPartialMaxInputAndSumReducesIt) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Layout in = layout_of({"x", "unsharded"}, mesh, {{"y", ReduceOp::kMax}});
  EXPECT_EQ(plan_op("reduce_max", {spec({8, 6}, in)}, axes_attrs({1})).inputs[0], in);
  EXPECT_EQ(plan_op("reduce_sum", {spec({8, 6}, in)}, axes_attrs({1})).inputs[0],
            in.without_partial());
}

TEST(ReductionRule, ReductionRunsNoCollective) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const DTensor x =
      copy_to_mesh(random_host({6, 5}, DType::kF64, 1), layout_of({"x", "y"}, mesh), rt);
  const int64_t before = relayout_stats().collectives;
  const DTensor s = reduce_sum(x, {0});
  const DTensor m = reduce_max(x, {1});
  const DTensor a = reduce_mean(x);
  rt.synchronize();
  EXPECT_EQ(relayout_stats().collectives, before);
  EXPECT_TRUE(s.layout().is_partial() && m.layout().is_partial() && a.layout().is_partial());
}

// ---- random layouts against a single device --------------------------------------------------

struct RandomCase {
  Shape shape;
  std::vector<int64_t> axes;
  bool keepdims;
};

RandomCase random_case(std::mt19937& rng) {
  const int rank = 1 + static_cast<int>(rng() % 3);
  std::vector<int64_t> dims;
  for (int d = 0; d < rank; ++d) dims.push_back(1 + static_cast<int64_t>(rng() % 7));
  std::vector<int64_t> axes;
  for (int d = 0; d < rank; ++d) {
    if (rng() % 2 == 0) axes.push_back(rng() % 2 == 0 ? d : d - rank);  // negative axes too
  }
  return {Shape(dims), axes, rng() % 2 == 0};
}

void check_random_layouts(const char* op, int cases) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(std::hash<std::string>{}(op) % 1000);
  int t = 0;
  for (int c = 0; c < cases; ++c) {
    for (const Mesh& mesh : meshes()) {
      const RandomCase rc = random_case(rng);
      const Layout layout = random_op_layout(mesh, rc.shape.rank(), rng, /*allow_partial=*/true);
      const OpFn fn = [&](const std::vector<DTensor>& in) {
        OpAttrs a = axes_attrs(rc.axes, rc.keepdims);
        return call_op(op, {in[0]}, a);
      };
      SCOPED_TRACE(
          fmt::format("{} axes [{}] keepdims {}", op, fmt::join(rc.axes, ","), rc.keepdims));
      expect_matches_single_device(fn, {random_host(rc.shape, DType::kF64, ++t)}, {layout}, rt,
                                   rng);
    }
  }
}

TEST(ReductionRandomLayouts, SumMatchesSingleDevice) { check_random_layouts("reduce_sum", 10); }
TEST(ReductionRandomLayouts, MeanMatchesSingleDevice) { check_random_layouts("reduce_mean", 10); }
TEST(ReductionRandomLayouts, MaxMatchesSingleDevice) { check_random_layouts("reduce_max", 10); }

TEST(ReductionRandomLayouts, ChainedReductionsOfPartialResultsMatchSingleDevice) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(11);
  for (int c = 0; c < 8; ++c) {
    for (const Mesh& mesh : meshes()) {
      const Layout layout = random_op_layout(mesh, 3, rng, true);
      const OpFn fn = [](const std::vector<DTensor>& in) {
        return reduce_max(reduce_mean(reduce_sum(in[0], {0}), {1}, true));
      };
      expect_matches_single_device(fn, {random_host({5, 3, 4}, DType::kF64, c)}, {layout}, rt, rng);
    }
  }
}

// ---- gradients -------------------------------------------------------------------------------

void check_vjp(const char* op, int cases) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(std::hash<std::string>{}(op) % 977);
  int t = 100;
  for (int c = 0; c < cases; ++c) {
    for (const Mesh& mesh : meshes()) {
      const RandomCase rc = random_case(rng);
      const Layout layout = random_op_layout(mesh, rc.shape.rank(), rng, true);
      const OpFn fn = [&](const std::vector<DTensor>& in) {
        return call_op(op, {in[0]}, axes_attrs(rc.axes, rc.keepdims));
      };
      SCOPED_TRACE(
          fmt::format("{} axes [{}] keepdims {}", op, fmt::join(rc.axes, ","), rc.keepdims));
      expect_vjp_matches_finite_differences(fn, {random_host(rc.shape, DType::kF64, ++t)}, {layout},
                                            rt, rng);
    }
  }
}

TEST(ReductionVjp, SumMatchesFiniteDifferences) { check_vjp("reduce_sum", 4); }
TEST(ReductionVjp, MeanMatchesFiniteDifferences) { check_vjp("reduce_mean", 4); }
TEST(ReductionVjp, MaxMatchesFiniteDifferences) { check_vjp("reduce_max", 4); }

TEST(ReductionVjp, SumGradientKeepsTheInputLayoutWithoutCommunication) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Layout layout = layout_of({"x", "y"}, mesh);
  const DTensor x = copy_to_mesh(random_host({4, 6}, DType::kF64, 2), layout, rt);
  GradientTape tape;
  tape.watch(x);
  const DTensor s = reduce_sum(x, {1});  // (x) Partial(y)
  const OpAttrs attrs = [] {
    OpAttrs a;
    a.axes = {1};
    a.shape = {4, 6};
    a.scale = 1.0;
    return a;
  }();
  OpAttrs with_layout = attrs;
  with_layout.layout = layout;
  // The broadcast keeps the gradient's rows and the input's column sharding: no relayout.
  EXPECT_EQ(
      plan_op("reduce_sum_grad", {{s.shape(), DType::kF64, layout_of({"x"}, mesh)}}, with_layout)
          .output,
      layout);
  const std::vector<DTensor> g = tape.gradient(s, {x});
  EXPECT_EQ(g[0].layout(), layout);
  EXPECT_EQ(values(g[0]), std::vector<double>(24, 1.0));
}

TEST(ReductionVjp, MeanGradientIsOneOverTheGlobalCount) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 3}});
  // 5 rows over x=3 (2, 2, 1): the count is the global 5, not a shard's.
  const DTensor x =
      copy_to_mesh(random_host({5, 2}, DType::kF64, 3), layout_of({"x", "unsharded"}, mesh), rt);
  const auto [value, grads] =
      value_and_grad([](const std::vector<DTensor>& p) { return reduce_mean(p[0], {0}); }, {x});
  expect_near(grads[0], std::vector<double>(10, 0.2));
}

TEST(ReductionVjp, MaxGradientSplitsEquallyAmongTiesAcrossShards) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  // Each maximum 3 on a different device: TF's rule gives each half of the gradient.
  const DTensor x = put({1, 3, 3, 2}, {4}, layout_of({"x"}, mesh), rt);
  const auto [value, grads] =
      value_and_grad([](const std::vector<DTensor>& p) { return reduce_max(p[0]); }, {x});
  EXPECT_EQ(values(value), (std::vector<double>{3}));
  EXPECT_EQ(values(grads[0]), (std::vector<double>{0, 0.5, 0.5, 0}));
  EXPECT_EQ(grads[0].layout(), x.layout());
  // Per row, keepdims: three-way tie in row 0, a single maximum in row 1.
  const DTensor m = put({5, 5, 5, 1, 7, 2}, {2, 3}, layout_of({"unsharded", "x"}, mesh), rt);
  const auto [v2, g2] = value_and_grad(
      [](const std::vector<DTensor>& p) { return reduce_max(p[0], {1}, true); }, {m});
  expect_near(g2[0], {1.0 / 3, 1.0 / 3, 1.0 / 3, 0, 1, 0});
}

// ---- errors ----------------------------------------------------------------------------------

TEST(ReductionErrors, AxisOutOfRangeNamesOpAxisAndShape) {
  Runtime rt({.num_cpu_devices = 4});
  const DTensor x = copy_to_mesh(random_host({2, 3}, DType::kF32, 1),
                                 Layout::replicated(Mesh::create({{"x", 4}}), 2), rt);
  EXPECT_TESSEL_ERROR(reduce_sum(x, {2}), ErrorCode::kInvalidArgument, "axis 2 is out of range");
  EXPECT_TESSEL_ERROR(reduce_mean(x, {-3}), ErrorCode::kInvalidArgument, "reduce_mean");
  EXPECT_TESSEL_ERROR(reduce_max(x, {5}), ErrorCode::kInvalidArgument, "[2,3]");
}

TEST(ReductionErrors, RepeatedAxisIsRejected) {
  Runtime rt({.num_cpu_devices = 4});
  const DTensor x = copy_to_mesh(random_host({2, 3}, DType::kF32, 1),
                                 Layout::replicated(Mesh::create({{"x", 4}}), 2), rt);
  EXPECT_TESSEL_ERROR(reduce_sum(x, {1, -1}), ErrorCode::kInvalidArgument, "listed twice");
}

TEST(ReductionErrors, IntegerInputHasNoKernel) {
  Runtime rt({.num_cpu_devices = 4});
  const DTensor x = copy_to_mesh(Tensor::zeros({2, 3}, DType::kI32),
                                 Layout::replicated(Mesh::create({{"x", 4}}), 2), rt);
  EXPECT_TESSEL_ERROR(reduce_sum(x), ErrorCode::kUnimplemented, "i32");
}

TEST(ReductionErrors, SumGradShapeMismatchIsRejected) {
  const Mesh mesh = Mesh::create({{"x", 4}});
  OpAttrs a;
  a.axes = {0};
  a.shape = {4, 3};
  EXPECT_TESSEL_ERROR(
      plan_op("reduce_sum_grad", {{Shape{4}, DType::kF64, Layout::replicated(mesh, 1)}}, a),
      ErrorCode::kInvalidArgument, "does not match the reduced shape");
}

}  // namespace
}  // namespace tessel
