// The shape ops (ops.h): reshape, transpose, slice, concat — exact values, the sharding rules
// (reshape keeps whole dims and even merges / splits of a leading sharded dim, transpose permutes
// the specs, slice keeps full-range dims, concat gathers its axis; Partial kept by all of them)
// against single-device runs over random layouts, VJPs against finite differences, every error.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <string>

#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/ops.h"
#include "testing/expect_error.h"
#include "testing/op_check.h"

namespace tessel {
namespace {

using testing::expect_matches_single_device;
using testing::expect_vjp_matches_finite_differences;
using testing::random_host;
using testing::random_op_layout;

constexpr ErrorCode kInvalid = ErrorCode::kInvalidArgument;

std::vector<Mesh> test_meshes() {
  return {Mesh::create({{"x", 4}}), Mesh::create({{"x", 2}, {"y", 2}}), Mesh::create({{"x", 3}})};
}

Layout layout_of(const Mesh& mesh, const std::vector<std::string>& specs) {
  return Layout(specs, mesh);
}

Tensor iota(const Shape& shape, DType dtype = DType::kF64) {
  std::vector<double> v(static_cast<size_t>(shape.num_elements()));
  std::iota(v.begin(), v.end(), 0.0);
  return Tensor::from_vector<double>(v, shape).astype(dtype);
}

using testing::values;

// ---- reshape ------------------------------------------------------------------------------

TEST(ShapeOps, ReshapeExactValuesKeepRowMajorOrder) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const DTensor x = copy_to_mesh(iota(Shape{2, 3}), layout_of(mesh, {"x", "unsharded"}), rt);
  const DTensor r = reshape(x, Shape{3, 2});
  EXPECT_EQ(r.shape(), (Shape{3, 2}));
  EXPECT_EQ(values(r), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(values(reshape(x, Shape{6})), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(reshape(x, Shape{1, 6, 1}).shape(), (Shape{1, 6, 1}));
}

TEST(ShapeOps, ReshapeInfersOneMinusOneDimension) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  const DTensor x = copy_to_mesh(iota(Shape{4, 3}), layout_of(mesh, {"x", "unsharded"}), rt);
  OpAttrs attrs;
  attrs.shape = {2, -1};
  const DTensor r = call_op("reshape", {x}, attrs);
  EXPECT_EQ(r.shape(), (Shape{2, 6}));
  EXPECT_EQ(values(r), values(x));
}

TEST(ShapeOps, ReshapeRuleKeepsWholeDimsAndEvenMergesOfALeadingShardedDim) {
  const Mesh xy = Mesh::create({{"x", 2}, {"y", 2}});
  const Mesh x4 = Mesh::create({{"x", 4}});
  const Mesh x3 = Mesh::create({{"x", 3}});
  auto plan = [](const Shape& from, const Layout& layout, const Shape& to) {
    OpAttrs attrs;
    attrs.shape = to.dims();
    return plan_op("reshape", {{from, DType::kF32, layout}}, attrs);
  };
  // [8,3,4] -> [8,12]: dim 0 carried over whole keeps x; the merged [3,4] loses y.
  ShardingDecision d = plan(Shape{8, 3, 4}, layout_of(xy, {"x", "unsharded", "y"}), Shape{8, 12});
  EXPECT_EQ(d.inputs[0], layout_of(xy, {"x", "unsharded", "unsharded"}));
  EXPECT_EQ(d.output, layout_of(xy, {"x", "unsharded"}));
  // [8,3,4] -> [24,4]: merging a leading sharded dim whose shards divide evenly keeps it.
  d = plan(Shape{8, 3, 4}, layout_of(x4, {"x", "unsharded", "unsharded"}), Shape{24, 4});
  EXPECT_EQ(d.inputs[0], layout_of(x4, {"x", "unsharded", "unsharded"}));
  EXPECT_EQ(d.output, layout_of(x4, {"x", "unsharded"}));
  // ... and splitting it back too.
  d = plan(Shape{24, 4}, layout_of(x4, {"x", "unsharded"}), Shape{8, 3, 4});
  EXPECT_EQ(d.output, layout_of(x4, {"x", "unsharded", "unsharded"}));
  // [5,2] -> [10] over 4: chunks of 2 rows (4 elements) vs chunks of 3 elements: gathered.
  d = plan(Shape{5, 2}, layout_of(x4, {"x", "unsharded"}), Shape{10});
  EXPECT_EQ(d.inputs[0], layout_of(x4, {"unsharded", "unsharded"}));
  EXPECT_EQ(d.output, layout_of(x4, {"unsharded"}));
  // [6] -> [2,3] over 3: blocks of 2 elements vs rows of 3 (the third shard empty): gathered.
  d = plan(Shape{6}, layout_of(x3, {"x"}), Shape{2, 3});
  EXPECT_EQ(d.output, layout_of(x3, {"unsharded", "unsharded"}));
  // A size-1 dim dropped: the sharded last dim is carried over whole.
  d = plan(Shape{4, 1, 6}, layout_of(xy, {"x", "unsharded", "y"}), Shape{4, 6});
  EXPECT_EQ(d.inputs[0], layout_of(xy, {"x", "unsharded", "y"}));
  EXPECT_EQ(d.output, layout_of(xy, {"x", "y"}));
  // A non-leading sharded dim of a merged group: gathered.
  d = plan(Shape{4, 6}, layout_of(xy, {"unsharded", "y"}), Shape{24});
  EXPECT_EQ(d.inputs[0], layout_of(xy, {"unsharded", "unsharded"}));
  // Partial is kept (reshape is linear).
  const Layout partial = layout_of(xy, {"x", "unsharded"}).with_partial({{"y", ReduceOp::kSum}});
  d = plan(Shape{4, 6}, partial, Shape{4, 2, 3});
  EXPECT_EQ(d.inputs[0], partial);
  EXPECT_EQ(d.output,
            layout_of(xy, {"x", "unsharded", "unsharded"}).with_partial({{"y", ReduceOp::kSum}}));
}

TEST(ShapeOps, ReshapeMatchesSingleDeviceOverRandomLayouts) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(21);
  const std::vector<Mesh> meshes = test_meshes();
  const std::vector<std::pair<Shape, Shape>> cases = {
      {Shape{6, 4}, Shape{24}},      {Shape{6, 4}, Shape{2, 3, 4}}, {Shape{5, 3, 2}, Shape{15, 2}},
      {Shape{5, 3, 2}, Shape{5, 6}}, {Shape{4, 1, 6}, Shape{4, 6}}, {Shape{7}, Shape{7, 1}},
      {Shape{2, 6}, Shape{3, 4}},    {Shape{12}, Shape{3, 4}},      {Shape{0, 3}, Shape{3, 0}},
      {Shape{9, 2}, Shape{3, 3, 2}}, {Shape{8, 3}, Shape{24}},      {Shape{1, 1}, Shape{}}};
  for (int t = 0; t < 36; ++t) {
    const Mesh& mesh = meshes[static_cast<size_t>(t) % meshes.size()];
    const auto& [from, to] = cases[static_cast<size_t>(t) % cases.size()];
    const Tensor x = random_host(from, t % 2 ? DType::kF64 : DType::kF32, 100 + t);
    const Shape target = to;
    expect_matches_single_device(
        [target](const std::vector<DTensor>& in) { return reshape(in[0], target); }, {x},
        {random_op_layout(mesh, from.rank(), rng, true)}, rt, rng, 1e-6);
  }
}

TEST(ShapeOps, ReshapeVjpMatchesFiniteDifferences) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(22);
  const std::vector<Mesh> meshes = test_meshes();
  for (int t = 0; t < 6; ++t) {
    const Mesh& mesh = meshes[static_cast<size_t>(t) % meshes.size()];
    const Tensor x = random_host(Shape{4, 3}, DType::kF64, 200 + t);
    expect_vjp_matches_finite_differences(
        [](const std::vector<DTensor>& in) {
          return reshape(in[0], Shape{2, 6});
        },
        {x}, {random_op_layout(mesh, 2, rng, true)}, rt, rng);
  }
}

// ---- transpose ----------------------------------------------------------------------------

TEST(ShapeOps, TransposeExactValuesDefaultReversesAndNegativePermEntries) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const DTensor x = copy_to_mesh(iota(Shape{2, 3}), layout_of(mesh, {"x", "y"}), rt);
  const DTensor t = transpose(x);
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(values(t), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  const DTensor y =
      copy_to_mesh(iota(Shape{2, 3, 2}), layout_of(mesh, {"unsharded", "x", "y"}), rt);
  const DTensor p = transpose(y, {-1, 0, 1});  // [2,2,3]: p[k][i][j] = y[i][j][k]
  EXPECT_EQ(p.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(values(p), (std::vector<double>{0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11}));
  // Any dtype: the kernel moves bytes.
  const DTensor ints =
      copy_to_mesh(iota(Shape{2, 3}, DType::kI32), layout_of(mesh, {"x", "unsharded"}), rt);
  EXPECT_EQ(to_host(transpose(ints)).to_vector<int32_t>(),
            (std::vector<int32_t>{0, 3, 1, 4, 2, 5}));
}

TEST(ShapeOps, TransposeRulePermutesTheSpecsAndKeepsPartial) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Layout in =
      layout_of(mesh, {"x", "unsharded", "unsharded"}).with_partial({{"y", ReduceOp::kMax}});
  OpAttrs attrs;
  attrs.perm = {2, 0, 1};
  const ShardingDecision d = plan_op("transpose", {{Shape{4, 3, 5}, DType::kF32, in}}, attrs);
  EXPECT_EQ(d.inputs[0], in);
  EXPECT_EQ(d.output,
            layout_of(mesh, {"unsharded", "x", "unsharded"}).with_partial({{"y", ReduceOp::kMax}}));
}

TEST(ShapeOps, TransposeMatchesSingleDeviceOverRandomLayouts) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(23);
  const std::vector<Mesh> meshes = test_meshes();
  const std::vector<Shape> shapes = {Shape{3, 5, 2}, Shape{7, 2}, Shape{2, 3, 1, 5}, Shape{0, 4},
                                     Shape{5}};
  for (int t = 0; t < 30; ++t) {
    const Mesh& mesh = meshes[static_cast<size_t>(t) % meshes.size()];
    const Shape& shape = shapes[static_cast<size_t>(t) % shapes.size()];
    std::vector<int64_t> perm(static_cast<size_t>(shape.rank()));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    const Tensor x = random_host(shape, t % 3 == 0 ? DType::kF32 : DType::kF64, 300 + t);
    expect_matches_single_device(
        [perm](const std::vector<DTensor>& in) { return transpose(in[0], perm); }, {x},
        {random_op_layout(mesh, shape.rank(), rng, true)}, rt, rng, 1e-6);
  }
}

TEST(ShapeOps, TransposeVjpMatchesFiniteDifferences) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(24);
  const std::vector<Mesh> meshes = test_meshes();
  for (int t = 0; t < 6; ++t) {
    const Mesh& mesh = meshes[static_cast<size_t>(t) % meshes.size()];
    const Tensor x = random_host(Shape{2, 3, 2}, DType::kF64, 400 + t);
    expect_vjp_matches_finite_differences(
        [](const std::vector<DTensor>& in) {
          return transpose(in[0], {1, 2, 0});
        },
        {x}, {random_op_layout(mesh, 3, rng, true)}, rt, rng);
  }
}

// ---- slice --------------------------------------------------------------------------------

TEST(ShapeOps, SliceExactValuesWithSizeMinusOneToTheEnd) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const DTensor x = copy_to_mesh(iota(Shape{3, 4}), layout_of(mesh, {"x", "y"}), rt);
  const DTensor s = slice(x, {1, 1}, {2, -1});
  EXPECT_EQ(s.shape(), (Shape{2, 3}));
  EXPECT_EQ(values(s), (std::vector<double>{5, 6, 7, 9, 10, 11}));
  EXPECT_EQ(values(slice(x, {0, 2}, {-1, 1})), (std::vector<double>{2, 6, 10}));
  EXPECT_EQ(slice(x, {3, 0}, {0, 4}).shape(), (Shape{0, 4}));
}

// A slice whose blocks are contiguous ranges of the input's blocks (leading dims) is a view of
// them: no copy; one along an inner dim is copied.
TEST(ShapeOps, SliceOfALeadingRangeIsAViewOfTheInputBlocks) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Tensor host = random_host(Shape{3, 4, 6}, DType::kF32, 41);
  const DTensor x = copy_to_mesh(host, layout_of(mesh, {"unsharded", "x", "y"}), rt);
  const DTensor middle = slice(x, {1, 0, 0}, {1, -1, -1});
  const DTensor inner = slice(x, {0, 0, 1}, {-1, -1, 2});
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(middle.component(i).shares_storage_with(x.component(i))) << i;
    EXPECT_FALSE(inner.component(i).shares_storage_with(x.component(i))) << i;
  }
  const Tensor got = to_host(middle);
  for (int64_t j = 0; j < 24; ++j) {
    EXPECT_EQ(got.data<float>()[j], host.data<float>()[24 + j]) << j;
  }
}

TEST(ShapeOps, SliceRuleGathersPartialRangeDimsKeepsFullRangeDimsAndPartial) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  OpAttrs attrs;
  attrs.begin = {0, 1};
  attrs.size = {-1, 2};
  const Layout in = layout_of(mesh, {"x", "y"});
  ShardingDecision d = plan_op("slice", {{Shape{4, 6}, DType::kF32, in}}, attrs);
  EXPECT_EQ(d.inputs[0], layout_of(mesh, {"x", "unsharded"}));
  EXPECT_EQ(d.output, layout_of(mesh, {"x", "unsharded"}));
  const Layout partial = layout_of(mesh, {"x", "unsharded"}).with_partial({{"y", ReduceOp::kSum}});
  d = plan_op("slice", {{Shape{4, 6}, DType::kF32, partial}}, attrs);
  EXPECT_EQ(d.inputs[0], partial);
  EXPECT_EQ(d.output, partial);
}

TEST(ShapeOps, SliceMatchesSingleDeviceOverRandomLayouts) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(25);
  const std::vector<Mesh> meshes = test_meshes();
  const std::vector<Shape> shapes = {Shape{7, 5}, Shape{3, 4, 5}, Shape{9}, Shape{2, 6}};
  for (int t = 0; t < 30; ++t) {
    const Mesh& mesh = meshes[static_cast<size_t>(t) % meshes.size()];
    const Shape& shape = shapes[static_cast<size_t>(t) % shapes.size()];
    std::vector<int64_t> begin, size;
    for (int d = 0; d < shape.rank(); ++d) {
      const int64_t b =
          rng() % 3 == 0 ? 0 : static_cast<int64_t>(rng() % static_cast<uint32_t>(shape[d] + 1));
      begin.push_back(b);
      const int64_t left = shape[d] - b;
      const uint32_t pick = rng() % 3;
      size.push_back(pick == 0 ? -1
                               : static_cast<int64_t>(rng() % static_cast<uint32_t>(left + 1)));
    }
    const Tensor x = random_host(shape, DType::kF64, 500 + t);
    expect_matches_single_device(
        [begin, size](const std::vector<DTensor>& in) { return slice(in[0], begin, size); }, {x},
        {random_op_layout(mesh, shape.rank(), rng, true)}, rt, rng);
  }
}

TEST(ShapeOps, SliceVjpPadsWithZerosMatchesFiniteDifferences) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(26);
  const std::vector<Mesh> meshes = test_meshes();
  for (int t = 0; t < 6; ++t) {
    const Mesh& mesh = meshes[static_cast<size_t>(t) % meshes.size()];
    const Tensor x = random_host(Shape{4, 5}, DType::kF64, 600 + t);
    const std::vector<int64_t> begin =
        t % 2 ? std::vector<int64_t>{1, 0} : std::vector<int64_t>{0, 2};
    const std::vector<int64_t> size =
        t % 2 ? std::vector<int64_t>{2, -1} : std::vector<int64_t>{-1, 2};
    expect_vjp_matches_finite_differences(
        [begin, size](const std::vector<DTensor>& in) { return slice(in[0], begin, size); }, {x},
        {random_op_layout(mesh, 2, rng, true)}, rt, rng);
  }
}

TEST(ShapeOps, SliceGradIsTheZeroPaddedGradientInTheInputLayout) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 3}});
  const DTensor x = copy_to_mesh(iota(Shape{5, 2}), layout_of(mesh, {"unsharded", "x"}), rt);
  const auto [value, grads] = value_and_grad(
      [](const std::vector<DTensor>& p) {
        return reduce_sum(slice(p[0], {1, 0}, {3, 2}));
      },
      {x});
  EXPECT_EQ(grads[0].layout(), x.layout());
  EXPECT_EQ(values(grads[0]), (std::vector<double>{0, 0, 1, 1, 1, 1, 1, 1, 0, 0}));
}

// ---- concat -------------------------------------------------------------------------------

TEST(ShapeOps, ConcatExactValuesAlongEitherAxis) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const DTensor a = copy_to_mesh(iota(Shape{2, 2}), layout_of(mesh, {"x", "y"}), rt);
  const DTensor b = copy_to_mesh(Tensor::full(Shape{1, 2}, DType::kF64, 9),
                                 layout_of(mesh, {"unsharded", "x"}), rt);
  const DTensor c = concat({a, b}, 0);
  EXPECT_EQ(c.shape(), (Shape{3, 2}));
  EXPECT_EQ(values(c), (std::vector<double>{0, 1, 2, 3, 9, 9}));
  const DTensor d = concat({a, a, transpose(b)}, -1);
  EXPECT_EQ(d.shape(), (Shape{2, 5}));
  EXPECT_EQ(values(d), (std::vector<double>{0, 1, 0, 1, 9, 2, 3, 2, 3, 9}));
  EXPECT_EQ(concat({a}, 1).id(), a.id());
}

TEST(ShapeOps, ConcatOfMoreThanEightInputsFolds) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  std::vector<DTensor> parts;
  std::vector<double> want;
  for (int i = 0; i < 17; ++i) {
    const int64_t n = 1 + i % 3;
    parts.push_back(copy_to_mesh(Tensor::full(Shape{n, 2}, DType::kF64, i),
                                 layout_of(mesh, {"unsharded", i % 2 ? "x" : "unsharded"}), rt));
    for (int64_t k = 0; k < 2 * n; ++k) want.push_back(i);
  }
  const DTensor c = concat(parts, 0);
  EXPECT_EQ(c.shape(), (Shape{static_cast<int64_t>(want.size() / 2), 2}));
  EXPECT_EQ(values(c), want);
}

TEST(ShapeOps, ConcatRuleGathersTheAxisAndTakesTheFirstInputsLayout) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  OpAttrs attrs;
  attrs.axis = 0;
  const Layout first = layout_of(mesh, {"x", "y"}).with_partial({});
  const ShardingDecision d =
      plan_op("concat2",
              {{Shape{4, 6}, DType::kF32, first},
               {Shape{2, 6}, DType::kF32,
                layout_of(mesh, {"unsharded", "x"}).with_partial({{"y", ReduceOp::kSum}})}},
              attrs);
  EXPECT_EQ(d.inputs[0], layout_of(mesh, {"unsharded", "y"}));
  EXPECT_EQ(d.inputs[1], layout_of(mesh, {"unsharded", "y"}));
  EXPECT_EQ(d.output, layout_of(mesh, {"unsharded", "y"}));
  const Layout partial = layout_of(mesh, {"unsharded", "x"}).with_partial({{"y", ReduceOp::kSum}});
  const ShardingDecision p =
      plan_op("concat2",
              {{Shape{4, 6}, DType::kF32, partial},
               {Shape{2, 6}, DType::kF32, layout_of(mesh, {"x", "unsharded"})}},
              attrs);
  EXPECT_EQ(p.inputs[1], partial);  // the replicated input becomes one term of the sum
  EXPECT_EQ(p.output, partial);
}

TEST(ShapeOps, ConcatMatchesSingleDeviceOverRandomLayouts) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(27);
  const std::vector<Mesh> meshes = test_meshes();
  for (int t = 0; t < 30; ++t) {
    const Mesh& mesh = meshes[static_cast<size_t>(t) % meshes.size()];
    const int rank = 1 + t % 3;
    const int64_t axis =
        static_cast<int64_t>(rng() % static_cast<uint32_t>(rank)) - (t % 2 ? rank : 0);
    const int n = 2 + t % 3;
    std::vector<Tensor> hosts;
    std::vector<Layout> layouts;
    std::vector<int64_t> dims = {3, 5, 2};
    dims.resize(static_cast<size_t>(rank));
    for (int k = 0; k < n; ++k) {
      std::vector<int64_t> d = dims;
      d[static_cast<size_t>(axis < 0 ? axis + rank : axis)] = static_cast<int64_t>(rng() % 4);
      hosts.push_back(random_host(Shape(d), DType::kF64, 700 + 10 * t + k));
      layouts.push_back(random_op_layout(mesh, rank, rng, true));
    }
    expect_matches_single_device(
        [axis](const std::vector<DTensor>& in) { return concat(in, axis); }, hosts, layouts, rt,
        rng);
  }
}

TEST(ShapeOps, ConcatVjpSlicesTheGradientMatchesFiniteDifferences) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(28);
  const std::vector<Mesh> meshes = test_meshes();
  for (int t = 0; t < 6; ++t) {
    const Mesh& mesh = meshes[static_cast<size_t>(t) % meshes.size()];
    const int64_t axis = t % 2;
    const Tensor a = random_host(axis == 0 ? Shape{2, 3} : Shape{3, 2}, DType::kF64, 800 + t);
    const Tensor b = random_host(Shape{3, 3}, DType::kF64, 900 + t);
    expect_vjp_matches_finite_differences(
        [axis](const std::vector<DTensor>& in) { return concat(in, axis); }, {a, b},
        {random_op_layout(mesh, 2, rng, true), random_op_layout(mesh, 2, rng, true)}, rt, rng);
  }
}

// ---- Partial with other reduce ops -------------------------------------------------------

// The shape ops only move elements, so a pending max stays pending through them; concat of a
// pending max and a pending sum over the same mesh dim reduces both first.
TEST(ShapeOps, PendingMaxStaysPendingThroughShapeOpsAndConcatReducesMixedOps) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(29);
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Tensor h = iota(Shape{4, 3});
  const PartialDim max_y{"y", ReduceOp::kMax};
  const DTensor pmax = relayout(copy_to_mesh(h, layout_of(mesh, {"x", "unsharded"}), rt),
                                layout_of(mesh, {"x", "unsharded"}).with_partial({max_y}));
  const DTensor t = transpose(pmax);
  EXPECT_EQ(t.layout(), layout_of(mesh, {"unsharded", "x"}).with_partial({max_y}));
  EXPECT_EQ(values(t), (std::vector<double>{0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11}));
  const DTensor s = slice(pmax, {1, 1}, {2, -1});
  EXPECT_EQ(s.layout(), layout_of(mesh, {"unsharded", "unsharded"}).with_partial({max_y}));
  EXPECT_EQ(values(s), (std::vector<double>{4, 5, 7, 8}));
  const DTensor r = reshape(pmax, Shape{12});
  EXPECT_EQ(r.layout(), layout_of(mesh, {"x"}).with_partial({max_y}));
  EXPECT_EQ(values(r), values(pmax));
  const DTensor rep =
      copy_to_mesh(iota(Shape{4, 1}), layout_of(mesh, {"unsharded", "unsharded"}), rt);
  const DTensor c = concat({pmax, rep}, 1);
  EXPECT_EQ(c.layout(), layout_of(mesh, {"x", "unsharded"}).with_partial({max_y}));
  EXPECT_EQ(values(c), (std::vector<double>{0, 1, 2, 0, 3, 4, 5, 1, 6, 7, 8, 2, 9, 10, 11, 3}));
  const DTensor psum = testing::distribute(
      iota(Shape{1, 3}),
      layout_of(mesh, {"unsharded", "unsharded"}).with_partial({{"y", ReduceOp::kSum}}), rt, rng);
  const DTensor m = concat({pmax, psum}, 0);
  EXPECT_FALSE(m.layout().is_partial());
  const std::vector<double> got = values(m);
  const std::vector<double> want = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0, 1, 2};
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12);
}

// ---- errors -------------------------------------------------------------------------------

TEST(ShapeOps, ErrorsNameTheOpAndTheShapes) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  const DTensor x = copy_to_mesh(iota(Shape{4, 3}), layout_of(mesh, {"x", "unsharded"}), rt);
  auto reshape_to = [&](std::vector<int64_t> shape) {
    OpAttrs attrs;
    attrs.shape = std::move(shape);
    return call_op("reshape", {x}, attrs);
  };
  EXPECT_TESSEL_ERROR(reshape(x, Shape{5, 2}), kInvalid,
                      "reshape: cannot reshape a tensor of shape [4,3] (12 elements) into [5,2]");
  EXPECT_TESSEL_ERROR(reshape_to({-1, -1}), kInvalid,
                      "only one dimension of the new shape [-1,-1] may be -1");
  EXPECT_TESSEL_ERROR(reshape_to({-2, 6}), kInvalid,
                      "dimension 0 of the new shape [-2,6] is negative");
  EXPECT_TESSEL_ERROR(reshape_to({-1, 5}), kInvalid, "cannot reshape a tensor of shape [4,3]");
  EXPECT_TESSEL_ERROR(reshape_to({0, -1}), kInvalid, "cannot reshape");

  EXPECT_TESSEL_ERROR(transpose(x, {0}), kInvalid,
                      "transpose: perm [0] has 1 entries for a tensor of rank 2");
  EXPECT_TESSEL_ERROR(transpose(x, {0, 0}), kInvalid, "is not a permutation: 0 appears twice");
  EXPECT_TESSEL_ERROR(transpose(x, {0, 2}), kInvalid, "has entry 2 outside [-2, 2)");
  // An empty perm is not "reverse" (that is transpose(x)), as in numpy.
  EXPECT_TESSEL_ERROR(transpose(x, std::vector<int64_t>{}), kInvalid,
                      "transpose: perm [] has 0 entries for a tensor of rank 2");

  EXPECT_TESSEL_ERROR(slice(x, {0}, {1, 1}), kInvalid,
                      "slice: begin [0] and size [1,1] must both have 2 entries");
  EXPECT_TESSEL_ERROR(slice(x, {5, 0}, {-1, -1}), kInvalid,
                      "Expected begin[0] in [0, 4], but got 5");
  EXPECT_TESSEL_ERROR(slice(x, {-1, 0}, {1, 1}), kInvalid,
                      "Expected begin[0] in [0, 4], but got -1");
  EXPECT_TESSEL_ERROR(slice(x, {1, 1}, {1, 3}), kInvalid, "Expected size[1] in [0, 2], but got 3");
  EXPECT_TESSEL_ERROR(slice(x, {1, 1}, {-2, 1}), kInvalid,
                      "Expected size[0] in [0, 3], but got -2");

  const DTensor y = copy_to_mesh(iota(Shape{4, 2}), layout_of(mesh, {"x", "unsharded"}), rt);
  EXPECT_TESSEL_ERROR(concat({}, 0), kInvalid, "concat: needs at least one input");
  EXPECT_TESSEL_ERROR(concat({x, DTensor()}, 0), kInvalid, "concat: input 1 is a null DTensor");
  EXPECT_TESSEL_ERROR(concat({x, y}, 0), kInvalid,
                      "input 1 has shape [4,2], input 0 has shape [4,3]: every dimension but the "
                      "concat axis 0 must match");
  EXPECT_TESSEL_ERROR(concat({x, y}, 2), kInvalid, "axis 2 is out of range for rank 2");
  EXPECT_TESSEL_ERROR(concat({x}, -3), kInvalid, "axis -3 is out of range for rank 2");
  const DTensor v = copy_to_mesh(iota(Shape{4}), layout_of(mesh, {"x"}), rt);
  EXPECT_TESSEL_ERROR(concat({x, v}, 0), kInvalid,
                      "input 1 has shape [4], input 0 has shape [4,3]");
  const DTensor f32 =
      copy_to_mesh(iota(Shape{4, 3}, DType::kF32), layout_of(mesh, {"x", "unsharded"}), rt);
  EXPECT_TESSEL_ERROR(concat({x, f32}, 0), kInvalid, "input 1 is f32, input 0 is f64");
  const DTensor s = copy_to_mesh(iota(Shape{}), Layout::replicated(mesh, 0), rt);
  EXPECT_TESSEL_ERROR(concat({s, s}, 0), kInvalid, "cannot concatenate scalars");
  EXPECT_TESSEL_ERROR(concat({s}, 0), kInvalid, "cannot concatenate scalars");
  EXPECT_TESSEL_ERROR(call_op("concat2", {x, x}), kInvalid,
                      "concat2: needs the concat axis in attrs.axis");
}

TEST(ShapeOps, SliceGradRejectsAGradientThatDoesNotFitTheSlice) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  const DTensor g = copy_to_mesh(iota(Shape{2, 3}), layout_of(mesh, {"x", "unsharded"}), rt);
  OpAttrs attrs;
  attrs.begin = {3, 0};
  attrs.shape = {4, 3};
  EXPECT_TESSEL_ERROR(call_op("slice_grad", {g}, attrs), kInvalid,
                      "Expected size[0] in [0, 1], but got 2");
  attrs.begin = {1, 0};
  EXPECT_EQ(values(call_op("slice_grad", {g}, attrs)),
            (std::vector<double>{0, 0, 0, 0, 1, 2, 3, 4, 5, 0, 0, 0}));
}

}  // namespace
}  // namespace tessel
