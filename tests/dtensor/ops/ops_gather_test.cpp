// The gather family (ops_gather.cpp): gather, take_along_axis, scatter_add. Exact values, the
// sharding rules (plan_op; a sharded working axis has no rule), random layouts on meshes of 1, 2
// and 2x2 devices against a single-device run, VJPs against finite differences, errors.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/ops.h"
#include "testing/expect_error.h"
#include "testing/op_check.h"

namespace tessel {
namespace {

using testing::expect_matches_single_device;
using testing::expect_vjp_matches_finite_differences;
using testing::OpFn;
using testing::put;
using testing::put_ints;
using testing::random_host;
using testing::random_op_layout;
using testing::spec;
using testing::values;

using Inputs = std::vector<DTensor>;

std::vector<Mesh> meshes() { return testing::small_meshes(); }

// i64 indices of `shape`, each in [-n, n) (negative ones count from the end).
Tensor random_indices(const Shape& shape, int64_t n, std::mt19937& rng) {
  std::vector<int64_t> v(static_cast<size_t>(shape.num_elements()));
  for (int64_t& i : v) i = static_cast<int64_t>(rng() % static_cast<uint64_t>(2 * n)) - n;
  return Tensor::from_vector<int64_t>(v, shape);
}

using GatherOps = testing::FallbackScopedTest;

// ---- exact values ------------------------------------------------------------------------------

TEST_F(GatherOps, GatherTakesSlicesAlongAnyAxisWithNegativeIndices) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  // p[i][j] = 10 i + j, [3, 4].
  const DTensor p = put({0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23}, {3, 4},
                        Layout({"unsharded", "y"}, mesh), rt);
  const DTensor rows = put_ints({2, -3, 2}, {3}, Layout({"x"}, mesh), rt);
  DTensor g = gather(p, rows);
  EXPECT_EQ(g.shape(), (Shape{3, 4}));
  EXPECT_EQ(g.layout(), Layout({"x", "y"}, mesh));
  EXPECT_EQ(values(g), (std::vector<double>{20, 21, 22, 23, 0, 1, 2, 3, 20, 21, 22, 23}));
  // Axis 1 with a 2-D index: [3, 2, 2].
  const DTensor cols = put_ints({3, 0, -1, 1}, {2, 2}, Layout::replicated(mesh, 2), rt);
  g = gather(relayout(p, Layout({"x", "unsharded"}, mesh)), cols, 1);
  EXPECT_EQ(g.shape(), (Shape{3, 2, 2}));
  EXPECT_EQ(g.layout(), Layout({"x", "unsharded", "unsharded"}, mesh));
  EXPECT_EQ(values(g), (std::vector<double>{3, 0, 3, 1, 13, 10, 13, 11, 23, 20, 23, 21}));
  // Any dtype: i64 params.
  const DTensor ints = put_ints({5, 6, 7}, {3}, Layout::replicated(mesh, 1), rt);
  EXPECT_EQ(to_host(gather(ints, rows)).to_vector<int64_t>(), (std::vector<int64_t>{7, 5, 7}));
}

TEST_F(GatherOps, TakeAlongAxisPicksOneElementPerIndex) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const DTensor a = put({0, 1, 2, 10, 11, 12}, {2, 3}, Layout({"x", "unsharded"}, mesh), rt);
  const DTensor idx = put_ints({2, 0, 1, -1}, {2, 2}, Layout({"x", "y"}, mesh), rt);
  const DTensor t = take_along_axis(a, idx, 1);
  EXPECT_EQ(t.layout(), Layout({"x", "y"}, mesh));
  EXPECT_EQ(values(t), (std::vector<double>{2, 0, 11, 12}));
  const DTensor down = put_ints({1, 0, 1}, {1, 3}, Layout::replicated(mesh, 2), rt);
  EXPECT_EQ(values(take_along_axis(a, down, 0)), (std::vector<double>{10, 1, 12}));
}

TEST_F(GatherOps, ScatterAddAddsRepeatedIndicesIntoTheBase) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const DTensor base = put({1, 1, 1, 1, 1, 1, 1, 1}, {4, 2}, Layout({"unsharded", "y"}, mesh), rt);
  const DTensor idx = put_ints({3, 0, 3, -1}, {4}, Layout({"x"}, mesh), rt);
  const DTensor upd = put({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2}, Layout({"x", "y"}, mesh), rt);
  const DTensor s = scatter_add(base, idx, upd);
  // Each x shard adds its own updates: Partial(sum) over x until reduced.
  EXPECT_EQ(s.layout(), Layout({"unsharded", "y"}, mesh).with_partial({{"x", ReduceOp::kSum}}));
  EXPECT_EQ(values(s), (std::vector<double>{4, 5, 1, 1, 1, 1, 1 + 1 + 5 + 7, 1 + 2 + 6 + 8}));
  // Integers, along axis 1.
  const DTensor counts = put_ints({0, 0, 0}, {1, 3}, Layout::replicated(mesh, 2), rt);
  const DTensor ones4 = put_ints({1, 1, 1, 1}, {1, 4}, Layout::replicated(mesh, 2), rt);
  const DTensor hits =
      scatter_add(counts, put_ints({2, 0, 2, 2}, {4}, Layout({"x"}, mesh), rt), ones4, 1);
  EXPECT_EQ(to_host(hits).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 3}));
}

// ---- sharding rules ----------------------------------------------------------------------------

TEST_F(GatherOps, GatherKeepsParamsShardingAndTheIndicesBatchSharding) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Layout params({"unsharded", "y"}, mesh);
  ShardingDecision d =
      plan_op("gather",
              {spec({10, 4}, params), spec({8, 3}, Layout({"x", "unsharded"}, mesh), DType::kI64)});
  EXPECT_EQ(d.inputs[0], params);
  EXPECT_EQ(d.inputs[1], Layout({"x", "unsharded"}, mesh));
  EXPECT_EQ(d.output, Layout({"x", "unsharded", "y"}, mesh));
  // Indices over a mesh dim params uses (sharded or Partial) are gathered there; params stays
  // Partial (a gather only selects).
  const Layout partial = params.with_partial({{"x", ReduceOp::kMax}});
  d = plan_op("gather", {spec({10, 4}, partial), spec({8}, Layout({"x"}, mesh), DType::kI64)});
  EXPECT_EQ(d.inputs[0], partial);
  EXPECT_EQ(d.inputs[1], Layout::replicated(mesh, 1));
  EXPECT_EQ(d.output, Layout({"unsharded", "y"}, mesh).with_partial({{"x", ReduceOp::kMax}}));
  // Along axis 1 the leading dim keeps its sharding.
  d = plan_op("gather",
              {spec({10, 4}, Layout({"x", "unsharded"}, mesh)),
               spec({5}, Layout({"y"}, mesh), DType::kI32)},
              [] {
                OpAttrs a;
                a.axis = 1;
                return a;
              }());
  EXPECT_EQ(d.output, Layout({"x", "y"}, mesh));
}

TEST_F(GatherOps, AShardedWorkingAxisHasNoRuleAndFallsBack) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Layout rows({"x", "y"}, mesh);
  const TensorSpec ids = spec({3}, Layout({"y"}, mesh), DType::kI64);
  OpAttrs axis1;
  axis1.axis = 1;
  // Not strict: the rows are gathered, the columns stay sharded.
  EXPECT_EQ(plan_op("gather", {spec({6, 4}, rows), ids}).inputs[0],
            Layout({"unsharded", "y"}, mesh));
  set_sharding_fallback_strict(true);
  EXPECT_TESSEL_ERROR(plan_op("gather", {spec({6, 4}, rows), ids}), ErrorCode::kUnimplemented,
                      "axis 0 of params, which the op works along, is sharded");
  EXPECT_TESSEL_ERROR(
      plan_op("take_along_axis", {spec({6, 4}, rows), spec({6, 2}, rows, DType::kI64)}, axis1),
      ErrorCode::kUnimplemented, "axis 1 of arr");
  EXPECT_TESSEL_ERROR(plan_op("scatter_add", {spec({6, 4}, rows), ids, spec({3, 4}, rows)}),
                      ErrorCode::kUnimplemented, "axis 0 of base");
}

TEST_F(GatherOps, TakeAlongAxisFillsUnshardedDimsFromTheIndices) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  OpAttrs axis1;
  axis1.axis = 1;
  const ShardingDecision d =
      plan_op("take_along_axis",
              {spec({6, 5}, Layout::replicated(mesh, 2).with_partial({{"y", ReduceOp::kSum}})),
               spec({6, 3}, Layout({"x", "y"}, mesh), DType::kI64)},
              axis1);
  // arr's Partial over y keeps y from the indices' axis; x comes from the indices.
  EXPECT_EQ(d.inputs[0], Layout({"x", "unsharded"}, mesh).with_partial({{"y", ReduceOp::kSum}}));
  EXPECT_EQ(d.inputs[1], Layout({"x", "unsharded"}, mesh));
  EXPECT_EQ(d.output, Layout({"x", "unsharded"}, mesh).with_partial({{"y", ReduceOp::kSum}}));
}

TEST_F(GatherOps, ScatterAddIsPartialOverTheIndicesMeshDims) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  // The gradient of a gather of [10, 4] in (unsharded, y) by ids [8] in (x): no relayout at all.
  const ShardingDecision d =
      plan_op("scatter_add", {spec({10, 4}, Layout({"unsharded", "y"}, mesh)),
                              spec({8}, Layout({"x"}, mesh), DType::kI64),
                              spec({8, 4}, Layout({"x", "y"}, mesh))});
  EXPECT_EQ(d.inputs[0], Layout({"unsharded", "y"}, mesh));
  EXPECT_EQ(d.inputs[1], Layout({"x"}, mesh));
  EXPECT_EQ(d.inputs[2], Layout({"x", "y"}, mesh));
  EXPECT_EQ(d.output, Layout({"unsharded", "y"}, mesh).with_partial({{"x", ReduceOp::kSum}}));
  // A pending sum of the updates over a free mesh dim stays pending; a Partial base is reduced.
  const ShardingDecision p =
      plan_op("scatter_add",
              {spec({10, 4}, Layout::replicated(mesh, 2).with_partial({{"y", ReduceOp::kSum}})),
               spec({8}, Layout::replicated(mesh, 1), DType::kI64),
               spec({8, 4}, Layout::replicated(mesh, 2).with_partial({{"x", ReduceOp::kSum}}))});
  EXPECT_EQ(p.inputs[0], Layout::replicated(mesh, 2));
  EXPECT_EQ(p.inputs[2], Layout::replicated(mesh, 2).with_partial({{"x", ReduceOp::kSum}}));
  EXPECT_EQ(p.output, Layout::replicated(mesh, 2).with_partial({{"x", ReduceOp::kSum}}));
}

// ---- random layouts against a single device ---------------------------------------------------

// Each case: (data shape, indices shape, axis).
struct Case {
  Shape data;
  Shape indices;
  int64_t axis;
};

TEST_F(GatherOps, GatherAndTakeAlongAxisOverRandomLayouts) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(51);
  using ByAxis = DTensor (*)(const DTensor&, const DTensor&, int64_t);
  const std::vector<std::pair<ByAxis, std::vector<Case>>> ops = {
      {&gather,
       {{{7, 3}, {5}, 0},
        {{7, 3}, {2, 3}, 1},
        {{4, 5, 3}, {6}, 1},
        {{5}, {}, 0},
        {{3, 5}, {4, 2}, -1},
        {{2, 3, 4}, {3}, 2},
        {{6, 2}, {0}, 0}}},
      {&take_along_axis,
       {{{7, 3}, {4, 3}, 0},
        {{7, 3}, {7, 5}, 1},
        {{4, 5, 3}, {4, 2, 3}, 1},
        {{5}, {9}, 0},
        {{3, 5}, {3, 1}, -1},
        {{2, 3, 4}, {2, 3, 0}, 2}}},
  };
  for (const auto& [op, cases] : ops) {
    for (const Mesh& mesh : meshes()) {
      for (const Case& c : cases) {
        const OpFn fn = [&](const Inputs& in) { return op(in[0], in[1], c.axis); };
        const int64_t n = c.data[static_cast<int>(c.axis < 0 ? c.axis + c.data.rank() : c.axis)];
        expect_matches_single_device(
            fn, {random_host(c.data, DType::kF64, rng()), random_indices(c.indices, n, rng)},
            {random_op_layout(mesh, c.data.rank(), rng, true),
             random_op_layout(mesh, c.indices.rank(), rng)},
            rt, rng, 1e-12);
      }
    }
  }
}

TEST_F(GatherOps, ScatterAddOverRandomLayouts) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(53);
  const std::vector<Case> cases = {{{7, 3}, {9}, 0}, {{7, 3}, {2, 3}, 1},  {{4, 5, 3}, {6}, 1},
                                   {{5}, {}, 0},     {{3, 5}, {4, 2}, -1}, {{6, 2}, {0}, 0}};
  for (const Mesh& mesh : meshes()) {
    for (const Case& c : cases) {
      const int64_t axis = c.axis < 0 ? c.axis + c.data.rank() : c.axis;
      const OpFn fn = [&](const Inputs& in) { return scatter_add(in[0], in[1], in[2], c.axis); };
      std::vector<int64_t> dims(c.data.dims().begin(), c.data.dims().begin() + axis);
      dims.insert(dims.end(), c.indices.dims().begin(), c.indices.dims().end());
      dims.insert(dims.end(), c.data.dims().begin() + axis + 1, c.data.dims().end());
      const Shape updates(dims);
      expect_matches_single_device(fn,
                                   {random_host(c.data, DType::kF64, rng()),
                                    random_indices(c.indices, c.data[static_cast<int>(axis)], rng),
                                    random_host(updates, DType::kF64, rng())},
                                   {random_op_layout(mesh, c.data.rank(), rng, true),
                                    random_op_layout(mesh, c.indices.rank(), rng),
                                    random_op_layout(mesh, updates.rank(), rng, true)},
                                   rt, rng, 1e-12);
    }
  }
}

// ---- VJPs ---------------------------------------------------------------------------------------

TEST_F(GatherOps, GradientsMatchFiniteDifferences) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(54);
  for (const Mesh& mesh : meshes()) {
    // gather along each axis (repeated indices: their gradients add up).
    for (int64_t axis : {0, 1}) {
      const Tensor idx = Tensor::from_vector<int64_t>({1, -1, 1, 0}, Shape{2, 2});
      expect_vjp_matches_finite_differences(
          [axis](const Inputs& in) { return gather(in[0], in[1], axis); },
          {random_host({3, 4}, DType::kF64, rng()), idx},
          {random_op_layout(mesh, 2, rng, true), random_op_layout(mesh, 2, rng)}, rt, rng);
    }
    expect_vjp_matches_finite_differences(
        [](const Inputs& in) { return take_along_axis(in[0], in[1], 1); },
        {random_host({3, 4}, DType::kF64, rng()), random_indices({3, 5}, 4, rng)},
        {random_op_layout(mesh, 2, rng, true), random_op_layout(mesh, 2, rng)}, rt, rng);
    // scatter_add into both base and updates.
    expect_vjp_matches_finite_differences(
        [](const Inputs& in) { return scatter_add(in[0], in[1], in[2], 0); },
        {random_host({4, 3}, DType::kF64, rng()), Tensor::from_vector<int64_t>({2, 0, 2}, Shape{3}),
         random_host({3, 3}, DType::kF64, rng())},
        {random_op_layout(mesh, 2, rng, true), random_op_layout(mesh, 1, rng),
         random_op_layout(mesh, 2, rng, true)},
        rt, rng);
  }
}

// ---- errors -------------------------------------------------------------------------------------

TEST_F(GatherOps, BadInputsNameTheOpAndTheValue) {
  Runtime rt({.num_cpu_devices = 2});
  const Mesh mesh = Mesh::create({{"x", 2}});
  const DTensor p = put({1, 2, 3, 4, 5, 6}, {2, 3}, Layout({"x", "unsharded"}, mesh), rt);
  const DTensor bad = put_ints({0, 3}, {2}, Layout({"x"}, mesh), rt);
  EXPECT_TESSEL_ERROR(values(gather(p, bad, 1)), ErrorCode::kInvalidArgument,
                      "gather: index 3 is not in [-3, 3) (axis 1 has 3 elements)");
  EXPECT_TESSEL_ERROR(values(gather(p, put_ints({-3}, {1}, Layout({"x"}, mesh), rt))),
                      ErrorCode::kInvalidArgument, "index -3 is not in [-2, 2)");
  EXPECT_TESSEL_ERROR(
      values(take_along_axis(p, put_ints({0, 5}, {2, 1}, Layout::replicated(mesh, 2), rt), 1)),
      ErrorCode::kInvalidArgument, "take_along_axis: index 5 is not in [-3, 3)");
  EXPECT_TESSEL_ERROR(values(scatter_add(p, put_ints({2}, {1}, Layout::replicated(mesh, 1), rt),
                                         put({1, 1, 1}, {1, 3}, Layout::replicated(mesh, 2), rt))),
                      ErrorCode::kInvalidArgument, "scatter_add: index 2 is not in [-2, 2)");
  EXPECT_TESSEL_ERROR(gather(p, bad, 2), ErrorCode::kInvalidArgument,
                      "gather: axis 2 is out of range for rank 2");
  EXPECT_TESSEL_ERROR(gather(p, p), ErrorCode::kInvalidArgument,
                      "gather: indices must be i32 or i64, got f64");
  EXPECT_TESSEL_ERROR(take_along_axis(p, bad, 1), ErrorCode::kInvalidArgument,
                      "indices of shape [2] must have the rank and the shape of [2,3]");
  EXPECT_TESSEL_ERROR(scatter_add(p, bad, put({1, 2, 3}, {1, 3}, Layout::replicated(mesh, 2), rt)),
                      ErrorCode::kInvalidArgument,
                      "updates have shape [1,3]; base [2,3] and indices [2] along axis 0 need "
                      "[2,3]");
  EXPECT_TESSEL_ERROR(scatter_add(p, bad, cast(p, DType::kF32)), ErrorCode::kInvalidArgument,
                      "updates are f32, base is f64");
}

}  // namespace
}  // namespace tessel
