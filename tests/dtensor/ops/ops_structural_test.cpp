// The structural family (ops_structural.cpp): pad, cumsum, one_hot, top_k. Exact values, the
// sharding rules (plan_op; a sharded working axis has no rule), random layouts on meshes of 1, 2
// and 2x2 devices against a single-device run, VJPs against finite differences, errors; and
// this family's and the gather family's ops on GPU devices (host-staged: no GPU kernels).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/ops.h"
#include "testing/expect_error.h"
#include "testing/gpu_devices.h"
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
using Paddings = std::vector<std::pair<int64_t, int64_t>>;

std::vector<Mesh> meshes() { return testing::small_meshes(); }

using StructuralOps = testing::FallbackScopedTest;

// ---- exact values ------------------------------------------------------------------------------

TEST_F(StructuralOps, PadSurroundsWithTheConstant) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const DTensor x = put({1, 2, 3, 4, 5, 6}, {2, 3}, Layout({"x", "unsharded"}, mesh), rt);
  const DTensor p = pad(x, {{0, 0}, {1, 2}}, -1);
  EXPECT_EQ(p.shape(), (Shape{2, 6}));
  EXPECT_EQ(p.layout(), Layout({"x", "unsharded"}, mesh));  // the unpadded dim stays sharded
  EXPECT_EQ(values(p), (std::vector<double>{-1, 1, 2, 3, -1, -1, -1, 4, 5, 6, -1, -1}));
  EXPECT_EQ(values(pad(x, {{1, 0}, {0, 0}})), (std::vector<double>{0, 0, 0, 1, 2, 3, 4, 5, 6}));
  // Any dtype; a scalar pads to itself.
  const DTensor ids = put_ints({7}, {1}, Layout::replicated(mesh, 1), rt);
  EXPECT_EQ(to_host(pad(ids, {{2, 1}}, 9)).to_vector<int64_t>(),
            (std::vector<int64_t>{9, 9, 7, 9}));
  EXPECT_EQ(values(pad(put({3}, {}, Layout::replicated(mesh, 0), rt), {})),
            (std::vector<double>{3}));
}

TEST_F(StructuralOps, CumsumInclusiveExclusiveForwardAndReverse) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const DTensor x = put({1, 2, 3, 4, 5, 6}, {2, 3}, Layout({"x", "unsharded"}, mesh), rt);
  EXPECT_EQ(values(cumsum(x, 1)), (std::vector<double>{1, 3, 6, 4, 9, 15}));
  EXPECT_EQ(values(cumsum(x, -1, true)), (std::vector<double>{0, 1, 3, 0, 4, 9}));
  EXPECT_EQ(values(cumsum(x, 1, false, true)), (std::vector<double>{6, 5, 3, 15, 11, 6}));
  EXPECT_EQ(values(cumsum(x, 1, true, true)), (std::vector<double>{5, 3, 0, 11, 6, 0}));
  EXPECT_EQ(cumsum(x, 1).layout(), Layout({"x", "unsharded"}, mesh));
  const DTensor ints = put_ints({1, 2, 3}, {3}, Layout::replicated(mesh, 1), rt);
  EXPECT_EQ(to_host(cumsum(ints)).to_vector<int64_t>(), (std::vector<int64_t>{1, 3, 6}));
}

TEST_F(StructuralOps, CumsumKeepsAPartialSumPartial) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}});
  const Layout partial = Layout::replicated(mesh, 1).with_partial({{"x", ReduceOp::kSum}});
  const DTensor p =
      pack({Tensor::from_vector<double>({1, 2}, {2}), Tensor::from_vector<double>({3, -1}, {2})},
           partial, rt);
  const DTensor c = cumsum(p);
  EXPECT_EQ(c.layout(), partial);
  EXPECT_EQ(values(c), (std::vector<double>{4, 5}));
}

TEST_F(StructuralOps, OneHotPutsTheNewAxisAnywhere) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const DTensor ids = put_ints({2, 0, -1, 5}, {4}, Layout({"x"}, mesh), rt);
  const DTensor h = one_hot(ids, 3);
  EXPECT_EQ(h.shape(), (Shape{4, 3}));
  EXPECT_EQ(h.dtype(), DType::kF32);
  EXPECT_EQ(h.layout(), Layout({"x", "unsharded"}, mesh));
  // Out of range (-1, 5): off everywhere, as TF.
  EXPECT_EQ(values(h), (std::vector<double>{0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0}));
  const DTensor first = one_hot(ids, 3, 5, -2, 0, DType::kI64);
  EXPECT_EQ(first.shape(), (Shape{3, 4}));
  EXPECT_EQ(first.layout(), Layout({"unsharded", "x"}, mesh));
  EXPECT_EQ(to_host(first).to_vector<int64_t>(),
            (std::vector<int64_t>{-2, 5, -2, -2, -2, -2, -2, -2, 5, -2, -2, -2}));
  const DTensor two_d = put_ints({1, 0}, {1, 2}, Layout({"unsharded", "y"}, mesh), rt);
  const DTensor mask = one_hot(two_d, 2, 1, 0, 1, DType::kBool);
  EXPECT_EQ(mask.shape(), (Shape{1, 2, 2}));
  EXPECT_EQ(mask.layout(), Layout({"unsharded", "unsharded", "y"}, mesh));
  EXPECT_EQ(values(mask), (std::vector<double>{0, 1, 1, 0}));
}

TEST_F(StructuralOps, TopKIsSortedWithTheLowerIndexFirstOnTies) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const DTensor x = put({3, 1, 3, 2, NAN, 0, -1, 5}, {2, 4}, Layout({"x", "y"}, mesh), rt);
  const TopK t = top_k(x, 3);
  EXPECT_EQ(t.indices.dtype(), DType::kI64);
  EXPECT_EQ(t.values.layout(), Layout({"x", "unsharded"}, mesh));
  EXPECT_EQ(t.indices.layout(), Layout({"x", "unsharded"}, mesh));
  EXPECT_EQ(to_host(t.indices).to_vector<int64_t>(), (std::vector<int64_t>{0, 2, 3, 0, 3, 1}));
  const std::vector<double> v = values(t.values);
  EXPECT_EQ(std::vector<double>(v.begin(), v.begin() + 3), (std::vector<double>{3, 3, 2}));
  EXPECT_TRUE(std::isnan(v[3]));
  EXPECT_EQ(std::vector<double>(v.begin() + 4, v.end()), (std::vector<double>{5, 0}));
  // k 0 and k = the whole axis; integers.
  EXPECT_EQ(top_k(x, 0).values.shape(), (Shape{2, 0}));
  const DTensor ints = put_ints({4, 9, 4, 1}, {4}, Layout({"x"}, mesh), rt);
  const TopK all = top_k(ints, 4);
  EXPECT_EQ(to_host(all.values).to_vector<int64_t>(), (std::vector<int64_t>{9, 4, 4, 1}));
  EXPECT_EQ(to_host(all.indices).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 2, 3}));
}

// ---- sharding rules ----------------------------------------------------------------------------

TEST_F(StructuralOps, RulesKeepUntouchedAxesAndRefuseAShardedWorkingAxis) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Layout both({"x", "y"}, mesh);
  OpAttrs pad_cols;
  pad_cols.begin = {0, 1};
  pad_cols.shape = {4, 7};
  OpAttrs sum_cols;
  sum_cols.axis = 1;
  OpAttrs k2;
  k2.top_k = 2;
  // Not strict: only the working axis is gathered.
  EXPECT_EQ(plan_op("pad", {spec({4, 6}, both)}, pad_cols).output,
            Layout({"x", "unsharded"}, mesh));
  EXPECT_EQ(plan_op("cumsum", {spec({4, 6}, both)}, sum_cols).output,
            Layout({"x", "unsharded"}, mesh));
  EXPECT_EQ(plan_op("top_k", {spec({4, 6}, both)}, k2).output, Layout({"x", "unsharded"}, mesh));
  // Partials: zero padding and cumsum keep a sum; a non-zero constant and top_k reduce it.
  const Layout rows_partial =
      Layout({"x", "unsharded"}, mesh).with_partial({{"y", ReduceOp::kSum}});
  EXPECT_EQ(plan_op("pad", {spec({4, 6}, rows_partial)}, pad_cols).output, rows_partial);
  EXPECT_EQ(plan_op("cumsum", {spec({4, 6}, rows_partial)}, sum_cols).output, rows_partial);
  pad_cols.value = 1.0;
  EXPECT_EQ(plan_op("pad", {spec({4, 6}, rows_partial)}, pad_cols).output,
            Layout({"x", "unsharded"}, mesh));
  EXPECT_EQ(plan_op("top_k", {spec({4, 6}, rows_partial)}, k2).output,
            Layout({"x", "unsharded"}, mesh));
  OpAttrs depth;
  depth.depth = 5;
  EXPECT_EQ(plan_op("one_hot", {spec({4, 6}, both, DType::kI64)}, depth).output,
            Layout({"x", "y", "unsharded"}, mesh));
  set_sharding_fallback_strict(true);
  for (const auto& [op, attrs] : std::vector<std::pair<const char*, OpAttrs>>{
           {"pad", pad_cols}, {"cumsum", sum_cols}, {"top_k", k2}}) {
    EXPECT_TESSEL_ERROR(plan_op(op, {spec({4, 6}, both)}, attrs), ErrorCode::kUnimplemented,
                        "axis 1 of x, which the op works along, is sharded");
  }
}

// ---- random layouts against a single device ---------------------------------------------------

TEST_F(StructuralOps, PadCumsumAndTopKOverRandomLayouts) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(61);
  const std::vector<Shape> shapes = {{5, 3}, {7}, {2, 3, 5}, {1, 4}, {0, 3}};
  for (const Mesh& mesh : meshes()) {
    for (const Shape& shape : shapes) {
      const int rank = shape.rank();
      Paddings paddings;
      for (int d = 0; d < rank; ++d) {
        paddings.emplace_back(static_cast<int64_t>(rng() % 3), static_cast<int64_t>(rng() % 2));
      }
      const int64_t axis = static_cast<int64_t>(rng() % static_cast<uint64_t>(rank));
      const bool exclusive = rng() % 2 == 1;
      const bool reverse = rng() % 2 == 1;
      const int64_t k = static_cast<int64_t>(rng() % static_cast<uint64_t>(shape[rank - 1] + 1));
      const double constant = rng() % 2 == 0 ? 0.0 : 1.5;
      const std::vector<std::pair<std::string, OpFn>> ops = {
          {"pad", [&](const Inputs& in) { return pad(in[0], paddings, constant); }},
          {"cumsum", [&](const Inputs& in) { return cumsum(in[0], axis, exclusive, reverse); }},
          {"top_k values", [&](const Inputs& in) { return top_k(in[0], k).values; }},
          {"top_k indices", [&](const Inputs& in) { return top_k(in[0], k).indices; }},
      };
      for (const auto& [name, fn] : ops) {
        SCOPED_TRACE(name + " " + shape.to_string());
        // No Partial for top_k: a reduced Partial is exact only to ~1 ulp, which can reorder ties.
        const bool partial = name.rfind("top_k", 0) != 0;
        expect_matches_single_device(fn, {random_host(shape, DType::kF64, rng())},
                                     {random_op_layout(mesh, rank, rng, partial)}, rt, rng, 1e-12);
      }
    }
  }
}

TEST_F(StructuralOps, OneHotOverRandomLayouts) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(62);
  for (const Mesh& mesh : meshes()) {
    for (const Shape& shape : std::vector<Shape>{{5}, {3, 4}, {}, {2, 0}}) {
      std::vector<int64_t> ids(static_cast<size_t>(shape.num_elements()));
      for (int64_t& i : ids) i = static_cast<int64_t>(rng() % 6) - 1;  // -1 and 4: off rows
      const int64_t axis = static_cast<int64_t>(rng() % static_cast<uint64_t>(shape.rank() + 1));
      expect_matches_single_device(
          [axis](const Inputs& in) { return one_hot(in[0], 4, 2.5, -1, axis, DType::kF64); },
          {Tensor::from_vector<int64_t>(ids, shape)}, {random_op_layout(mesh, shape.rank(), rng)},
          rt, rng, 0);
    }
  }
}

// ---- VJPs ---------------------------------------------------------------------------------------

TEST_F(StructuralOps, GradientsMatchFiniteDifferences) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(63);
  for (const Mesh& mesh : meshes()) {
    const Layout layout = random_op_layout(mesh, 2, rng, true);
    const Tensor x = random_host({4, 3}, DType::kF64, rng());
    expect_vjp_matches_finite_differences(
        [](const Inputs& in) {
          return pad(in[0], {{1, 2}, {0, 1}}, 0.5);
        },
        {x}, {layout}, rt, rng);
    for (bool exclusive : {false, true}) {
      for (bool reverse : {false, true}) {
        for (int64_t axis : {0, 1}) {
          expect_vjp_matches_finite_differences(
              [=](const Inputs& in) { return cumsum(in[0], axis, exclusive, reverse); }, {x},
              {layout}, rt, rng);
        }
      }
    }
    // Distinct values: the order does not change within the finite differences' step.
    expect_vjp_matches_finite_differences([](const Inputs& in) { return top_k(in[0], 2).values; },
                                          {x}, {layout}, rt, rng);
  }
}

// ---- errors -------------------------------------------------------------------------------------

TEST_F(StructuralOps, BadInputsNameTheOpAndTheValue) {
  Runtime rt({.num_cpu_devices = 2});
  const Mesh mesh = Mesh::create({{"x", 2}});
  const DTensor x = put({1, 2, 3, 4, 5, 6}, {2, 3}, Layout({"x", "unsharded"}, mesh), rt);
  const DTensor ids = put_ints({0, 1}, {2}, Layout({"x"}, mesh), rt);
  EXPECT_TESSEL_ERROR(pad(x, {{0, 0}, {-1, 2}}), ErrorCode::kInvalidArgument,
                      "pad: paddings[1] = (-1, 2) is negative (x has shape [2,3])");
  EXPECT_TESSEL_ERROR(pad(x, {{0, -4}, {0, 0}}), ErrorCode::kInvalidArgument,
                      "paddings[0] = (0, -4) is negative");
  EXPECT_TESSEL_ERROR(pad(x, {{1, 1}}), ErrorCode::kInvalidArgument,
                      "pad: paddings has 1 pairs for x of rank 2 (shape [2,3])");
  EXPECT_TESSEL_ERROR(cumsum(x, 2), ErrorCode::kInvalidArgument,
                      "cumsum: axis 2 is out of range for rank 2");
  EXPECT_TESSEL_ERROR(cumsum(put({1}, {}, Layout::replicated(mesh, 0), rt)),
                      ErrorCode::kInvalidArgument, "axis 0 is out of range for rank 0");
  EXPECT_TESSEL_ERROR(cumsum(one_hot(ids, 2, 1, 0, -1, DType::kBool)), ErrorCode::kUnimplemented,
                      "cumsum: no kernel for dtype bool");
  EXPECT_TESSEL_ERROR(one_hot(x, 3), ErrorCode::kInvalidArgument,
                      "one_hot: indices must be i32 or i64, got f64");
  EXPECT_TESSEL_ERROR(one_hot(ids, -1), ErrorCode::kInvalidArgument, "depth must be set and >= 0");
  EXPECT_TESSEL_ERROR(one_hot(ids, 3, 0.5, 0, -1, DType::kI32), ErrorCode::kInvalidArgument,
                      "one_hot: on_value 0.5 is not a value of i32");
  EXPECT_TESSEL_ERROR(one_hot(ids, 3, 1, 0, 3), ErrorCode::kInvalidArgument,
                      "one_hot: axis 3 is out of range for rank 2");
  EXPECT_TESSEL_ERROR(top_k(x, 4), ErrorCode::kInvalidArgument,
                      "top_k: k 4 is larger than the last axis (3 elements) of input [2,3]");
  EXPECT_TESSEL_ERROR(top_k(x, -1), ErrorCode::kInvalidArgument, "top_k: k -1 is negative");
  EXPECT_TESSEL_ERROR(top_k(put({1}, {}, Layout::replicated(mesh, 0), rt)),
                      ErrorCode::kInvalidArgument, "top_k: the input must have rank >= 1");
}

// ---- on GPU devices -----------------------------------------------------------------------------

// Every op of both families on a 2x2 mesh of GPU devices (simulated where none is visible) runs
// host-staged and gives the CPU mesh's result to the bit, gradients included.
TEST(IndexingAndStructuralOpsOnGpuDevices, RunHostStagedAndMatchTheCpu) {
  Runtime rt(testing::options_with_gpu_devices(4, 4));
  const Mesh cpu = Mesh::create({{"x", 2}, {"y", 2}});
  const Mesh gpu = Mesh::create({{"x", 2}, {"y", 2}}, "GPU");
  const Tensor x = random_host({6, 5}, DType::kF64, 71);
  const Tensor ids = Tensor::from_vector<int64_t>({4, -1, 0, 2, 4, 1}, Shape{6});
  const Tensor along = Tensor::from_vector<int64_t>({0, 4, 2, 1, 3, 3}, Shape{6, 1});
  const std::vector<std::pair<std::string, OpFn>> ops = {
      {"gather", [](const Inputs& in) { return gather(in[0], in[1], 1); }},
      {"take_along_axis", [](const Inputs& in) { return take_along_axis(in[0], in[2], 1); }},
      {"scatter_add", [](const Inputs& in) { return scatter_add(in[0], in[1], in[0], 0); }},
      {"pad", [](const Inputs& in) { return pad(in[0], {{1, 0}, {2, 2}}, 0.5); }},
      {"cumsum", [](const Inputs& in) { return cumsum(in[0], 0, true, true); }},
      {"one_hot", [](const Inputs& in) { return one_hot(in[1], 5); }},
      {"top_k", [](const Inputs& in) { return top_k(in[0], 3).indices; }},
  };
  const auto run = [&](const Mesh& mesh, const OpFn& fn) {
    const Inputs in = {copy_to_mesh(x, Layout({"x", "unsharded"}, mesh), rt),
                       copy_to_mesh(ids, Layout({"y"}, mesh), rt),
                       copy_to_mesh(along, Layout({"x", "unsharded"}, mesh), rt)};
    const auto [value, grads] = value_and_grad(
        [&](const Inputs& p) { return reduce_sum(cast(fn({p[0], in[1], in[2]}), DType::kF64)); },
        {in[0]});
    return std::make_pair(to_host(fn(in)), to_host(grads[0]));
  };
  for (const auto& [name, fn] : ops) {
    const std::map<std::string, int64_t> before = host_staged_kernel_calls();
    const auto [want, want_grad] = run(cpu, fn);
    const auto [got, got_grad] = run(gpu, fn);
    EXPECT_EQ(got.dtype(), want.dtype()) << name;
    EXPECT_EQ(testing::max_abs_diff(got, want), 0) << name;
    EXPECT_EQ(testing::max_abs_diff(got_grad, want_grad), 0) << name;
    const auto calls = [](const std::map<std::string, int64_t>& m, const std::string& op) {
      const auto it = m.find(op);
      return it == m.end() ? int64_t{0} : it->second;
    };
    EXPECT_GT(calls(host_staged_kernel_calls(), name), calls(before, name)) << name;
  }
}

}  // namespace
}  // namespace tessel
