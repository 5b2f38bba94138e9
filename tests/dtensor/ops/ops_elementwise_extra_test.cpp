// Issue 34's elementwise ops (ops_unary.cpp, ops_elementwise.cpp, ops_compare.cpp): square, abs,
// sin, cos, silu, pow, the comparisons and where. Exact values, the sharding rules (plan_op),
// random layouts on meshes of 1, 2 and 2x2 devices against a single-device run, VJPs against
// finite differences, errors.
#include <gtest/gtest.h>

#include <cmath>
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
using testing::random_host;
using testing::random_op_layout;
using testing::spec;
using testing::small_meshes;
using testing::values;

using Inputs = std::vector<DTensor>;



// Shape pairs that broadcast (odd sizes: uneven shards).
const std::vector<std::pair<Shape, Shape>>& shape_pairs() {
  static const std::vector<std::pair<Shape, Shape>> pairs = {
      {{5, 3}, {5, 3}}, {{5, 3}, {3}},       {{5, 1}, {1, 3}}, {{7}, {}},
      {{1, 6}, {5, 6}}, {{2, 5, 3}, {5, 1}}, {{3}, {7, 3}},
  };
  return pairs;
}

// A bool host tensor of `shape`, true with probability 1/2.
Tensor random_mask(const Shape& shape, uint64_t seed) {
  return Tensor::random_uniform(shape, DType::kBool, seed);
}

// The unary ops, pow with a scalar exponent on |x| (real for any x).
std::vector<std::pair<const char*, OpFn>> unary_ops() {
  return {
      {"square", [](const Inputs& in) { return square(in[0]); }},
      {"abs", [](const Inputs& in) { return abs(in[0]); }},
      {"sin", [](const Inputs& in) { return sin(in[0]); }},
      {"cos", [](const Inputs& in) { return cos(in[0]); }},
      {"silu", [](const Inputs& in) { return silu(in[0]); }},
      {"pow_scalar", [](const Inputs& in) { return pow(abs(in[0]), 2.5); }},
  };
}

// ---- exact values ------------------------------------------------------------------------------

TEST(ElementwiseExtraValues, UnaryOpsOnShardedInputs) {
  Runtime rt({.num_cpu_devices = 4});
  const Layout rows({"x"}, Mesh::create({{"x", 4}}));
  const std::vector<double> v = {-2, -0.5, 0, 0.5, 1, 3};
  const DTensor x = put(v, {6}, rows, rt);
  EXPECT_EQ(values(square(x)), (std::vector<double>{4, 0.25, 0, 0.25, 1, 9}));
  EXPECT_EQ(values(abs(x)), (std::vector<double>{2, 0.5, 0, 0.5, 1, 3}));
  const std::vector<double> s = values(sin(x)), c = values(cos(x)), si = values(silu(x));
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_DOUBLE_EQ(s[i], std::sin(v[i]));
    EXPECT_DOUBLE_EQ(c[i], std::cos(v[i]));
    EXPECT_NEAR(si[i], v[i] / (1 + std::exp(-v[i])), 1e-15);
  }
  EXPECT_EQ(square(x).layout(), rows);
  EXPECT_EQ(silu(x).dtype(), DType::kF64);
}

TEST(ElementwiseExtraValues, PowWithBroadcastAndScalarExponents) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const DTensor x = put({1, 2, 3, 4, 5, 6}, {2, 3}, Layout({"x", "y"}, mesh), rt);
  const DTensor e = put({2, 0, 0.5}, {3}, Layout({"y"}, mesh), rt);
  EXPECT_EQ(values(pow(x, e)), (std::vector<double>{1, 1, std::sqrt(3.0), 16, 1, std::sqrt(6.0)}));
  EXPECT_EQ(values(pow(x, 2.0)), (std::vector<double>{1, 4, 9, 16, 25, 36}));
  EXPECT_EQ(values(pow(put({2}, {}, Layout::replicated(mesh, 0), rt), e)),
            (std::vector<double>{4, 1, std::sqrt(2.0)}));
  // C's pow: a negative base and a non-integer exponent is NaN, an integer one is not.
  const DTensor neg = put({-8, -2}, {2}, Layout::replicated(mesh, 1), rt);
  EXPECT_TRUE(std::isnan(values(pow(neg, 0.5))[0]));
  EXPECT_EQ(values(pow(neg, 3.0)), (std::vector<double>{-512, -8}));
}

TEST(ElementwiseExtraValues, ComparisonsAreBoolAndBroadcast) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const DTensor a = put({1, 2, 3, 4, 5, 6}, {2, 3}, Layout({"x", "y"}, mesh), rt);
  const DTensor b = put({2, 2, 7}, {3}, Layout::replicated(mesh, 1), rt);
  const DTensor nan = put({NAN}, {}, Layout::replicated(mesh, 0), rt);
  EXPECT_EQ(less(a, b).dtype(), DType::kBool);
  EXPECT_EQ(less(a, b).layout(), Layout({"x", "y"}, mesh));
  EXPECT_EQ(values(less(a, b)), (std::vector<double>{1, 0, 1, 0, 0, 1}));
  EXPECT_EQ(values(less_equal(a, b)), (std::vector<double>{1, 1, 1, 0, 0, 1}));
  EXPECT_EQ(values(greater(a, b)), (std::vector<double>{0, 0, 0, 1, 1, 0}));
  EXPECT_EQ(values(greater_equal(a, b)), (std::vector<double>{0, 1, 0, 1, 1, 0}));
  EXPECT_EQ(values(equal(a, b)), (std::vector<double>{0, 1, 0, 0, 0, 0}));
  EXPECT_EQ(values(not_equal(a, b)), (std::vector<double>{1, 0, 1, 1, 1, 1}));
  // Integers: i64 labels against an argmax, say.
  const DTensor labels =
      copy_to_mesh(Tensor::from_vector<int64_t>({2, 0, 1}, {3}), Layout({"x"}, mesh), rt);
  const DTensor guess =
      copy_to_mesh(Tensor::from_vector<int64_t>({2, 1, 1}, {3}), Layout::replicated(mesh, 1), rt);
  EXPECT_EQ(values(equal(labels, guess)), (std::vector<double>{1, 0, 1}));
  EXPECT_EQ(values(less(labels, guess)), (std::vector<double>{0, 1, 0}));
  // NaN: unequal to everything, itself included; no order.
  EXPECT_EQ(values(not_equal(nan, nan)), (std::vector<double>{1}));
  EXPECT_EQ(values(equal(nan, nan)), (std::vector<double>{0}));
  EXPECT_EQ(values(less(a, nan)), (std::vector<double>{0, 0, 0, 0, 0, 0}));
}

TEST(ElementwiseExtraValues, WhereBroadcastsItsThreeInputs) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const DTensor cond =
      copy_to_mesh(Tensor::from_vector<bool>({true, false, true}, {3}), Layout({"y"}, mesh), rt);
  const DTensor x = put({1, 2, 3, 4, 5, 6}, {2, 3}, Layout({"x", "unsharded"}, mesh), rt);
  const DTensor y = put({-1, -2}, {2, 1}, Layout::replicated(mesh, 2), rt);
  const DTensor w = where(cond, x, y);
  EXPECT_EQ(values(w), (std::vector<double>{1, -1, 3, 4, -2, 6}));
  EXPECT_EQ(w.layout(), Layout({"x", "y"}, mesh));
  EXPECT_EQ(values(where(cond, put({7}, {}, Layout::replicated(mesh, 0), rt), y)),
            (std::vector<double>{7, -1, 7, 7, -2, 7}));
  // Any dtype of x and y: i64 values are copied whole.
  const DTensor i =
      copy_to_mesh(Tensor::from_vector<int64_t>({1LL << 40, 2, 3}, {3}), Layout({"x"}, mesh), rt);
  const DTensor j =
      copy_to_mesh(Tensor::from_vector<int64_t>({-1}, {1}), Layout::replicated(mesh, 1), rt);
  const Tensor got = to_host(where(cond, i, j));
  EXPECT_EQ(got.dtype(), DType::kI64);
  EXPECT_EQ(got.data<int64_t>()[0], 1LL << 40);
  EXPECT_EQ(got.data<int64_t>()[1], -1);
  EXPECT_EQ(got.data<int64_t>()[2], 3);
}

TEST(ElementwiseExtraValues, ComparisonOfAPartialSumComparesTheSum) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}});
  const Layout partial = Layout::replicated(mesh, 1).with_partial({{"x", ReduceOp::kSum}});
  // Terms {1, 2} and {2, -1}: the sums are 3 and 1; each term alone would compare otherwise.
  const DTensor p =
      pack({Tensor::from_vector<double>({1, 2}, {2}), Tensor::from_vector<double>({2, -1}, {2})},
           partial, rt);
  const DTensor two = put({2}, {}, Layout::replicated(mesh, 0), rt);
  EXPECT_EQ(values(greater(p, two)), (std::vector<double>{1, 0}));
  EXPECT_EQ(values(equal(p, put({3, 1}, {2}, Layout::replicated(mesh, 1), rt))),
            (std::vector<double>{1, 1}));
  const DTensor t =
      copy_to_mesh(Tensor::from_vector<bool>({true, false}, {2}), Layout::replicated(mesh, 1), rt);
  EXPECT_EQ(values(where(t, p, two)), (std::vector<double>{3, 2}));
  EXPECT_EQ(values(abs(negative(p))), (std::vector<double>{3, 1}));
}

// ---- sharding rules (plan_op) -----------------------------------------------------------------

TEST(ElementwiseExtraRule, UnaryOpsKeepShardsAndReduceAPartial) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Layout l({"x", "y"}, mesh);
  const Layout p = Layout({"x", "unsharded"}, mesh).with_partial({{"y", ReduceOp::kSum}});
  for (const char* op : {"square", "abs", "sin", "cos", "silu"}) {
    ShardingDecision d = plan_op(op, {spec({8, 6}, l)});
    EXPECT_EQ(d.output, l) << op;
    d = plan_op(op, {spec({8, 6}, p)});
    EXPECT_EQ(d.inputs[0], Layout({"x", "unsharded"}, mesh)) << op;
    EXPECT_FALSE(d.output.is_partial()) << op;
  }
}

TEST(ElementwiseExtraRule, ComparisonsAndPowDemandPartialInputsReduced) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Layout rows({"x", "unsharded"}, mesh);
  const Layout p = rows.with_partial({{"y", ReduceOp::kSum}});
  for (const char* op :
       {"less", "less_equal", "greater", "greater_equal", "equal", "not_equal", "pow"}) {
    const ShardingDecision d = plan_op(op, {spec({8, 6}, p), spec({8, 6}, rows)});
    EXPECT_EQ(d.inputs[0], rows) << op;
    EXPECT_EQ(d.inputs[1], rows) << op;
    EXPECT_EQ(d.output, rows) << op;
  }
}

TEST(ElementwiseExtraRule, WhereTakesTheLargestInputsShardingAndBroadcastsTheRest) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  // cond [8, 6] on (x, y), x [6] on y, y [] : cond is the largest, everything follows it.
  ShardingDecision d =
      plan_op("where", {spec({8, 6}, Layout({"x", "y"}, mesh), DType::kBool),
                        spec({6}, Layout({"y"}, mesh)), spec({}, Layout::replicated(mesh, 0))});
  EXPECT_EQ(d.output, Layout({"x", "y"}, mesh));
  EXPECT_EQ(d.inputs[0], Layout({"x", "y"}, mesh));
  EXPECT_EQ(d.inputs[1], Layout({"y"}, mesh));
  EXPECT_EQ(d.inputs[2], Layout::replicated(mesh, 0));
  // A size-1 dim is unsharded in its input; a smaller input's shard fills a dim the largest
  // leaves unsharded; a Partial input is reduced.
  d = plan_op("where", {spec({8, 1}, Layout({"x", "y"}, mesh), DType::kBool),
                        spec({8, 6}, Layout({"unsharded", "unsharded"}, mesh)),
                        spec({6}, Layout({"y"}, mesh).with_partial({{"x", ReduceOp::kSum}}))});
  EXPECT_EQ(d.output, Layout({"x", "y"}, mesh));
  EXPECT_EQ(d.inputs[0], Layout({"x", "unsharded"}, mesh));
  EXPECT_EQ(d.inputs[1], Layout({"x", "y"}, mesh));
  EXPECT_EQ(d.inputs[2], Layout({"y"}, mesh));
}

// ---- random layouts against a single device ---------------------------------------------------

TEST(ElementwiseExtraMatchesSingleDevice, UnaryOpsOverRandomLayouts) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(31);
  const std::vector<Shape> shapes = {{5, 3}, {7}, {2, 3, 5}, {}, {1, 4}, {9, 2}};
  for (const auto& [name, fn] : unary_ops()) {
    SCOPED_TRACE(name);
    for (const Mesh& mesh : small_meshes()) {
      for (const Shape& shape : shapes) {
        expect_matches_single_device(fn, {random_host(shape, DType::kF64, rng())},
                                     {random_op_layout(mesh, shape.rank(), rng, true)}, rt, rng,
                                     1e-12);
      }
    }
  }
}

TEST(ElementwiseExtraMatchesSingleDevice, BinaryOpsOverRandomLayouts) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(32);
  // Continuous random values: no ties, so the ~1 ulp of a reduced Partial flips no comparison.
  const std::vector<std::pair<const char*, OpFn>> ops = {
      {"pow", [](const Inputs& in) { return pow(add(abs(in[0]), 0.5), in[1]); }},
      {"less", [](const Inputs& in) { return less(in[0], in[1]); }},
      {"less_equal", [](const Inputs& in) { return less_equal(in[0], in[1]); }},
      {"greater", [](const Inputs& in) { return greater(in[0], in[1]); }},
      {"greater_equal", [](const Inputs& in) { return greater_equal(in[0], in[1]); }},
      {"not_equal", [](const Inputs& in) { return not_equal(in[0], in[1]); }},
  };
  for (const auto& [name, fn] : ops) {
    SCOPED_TRACE(name);
    for (const Mesh& mesh : small_meshes()) {
      for (const auto& [sa, sb] : shape_pairs()) {
        expect_matches_single_device(
            fn, {random_host(sa, DType::kF64, rng()), random_host(sb, DType::kF64, rng())},
            {random_op_layout(mesh, sa.rank(), rng, true),
             random_op_layout(mesh, sb.rank(), rng, true)},
            rt, rng, 1e-12);
      }
    }
  }
}

TEST(ElementwiseExtraMatchesSingleDevice, EqualOverRandomLayoutsWithTies) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(33);
  // Small integers (many ties), not Partial (a reduced Partial is exact only to ~1 ulp).
  const auto ints = [&](const Shape& shape) {
    Tensor t = random_host(shape, DType::kF64, rng(), 0, 3).contiguous().clone();
    double* p = t.data<double>();
    for (int64_t i = 0; i < t.num_elements(); ++i) p[i] = std::floor(p[i]);
    return t;
  };
  const OpFn fn = [](const Inputs& in) { return equal(in[0], in[1]); };
  for (const Mesh& mesh : small_meshes()) {
    for (const auto& [sa, sb] : shape_pairs()) {
      expect_matches_single_device(
          fn, {ints(sa), ints(sb)},
          {random_op_layout(mesh, sa.rank(), rng), random_op_layout(mesh, sb.rank(), rng)}, rt, rng,
          0);
    }
  }
}

const OpFn where_fn = [](const Inputs& in) { return where(in[0], in[1], in[2]); };

// where's inputs of shapes s (cond, x, y): a random mask, random values, random layouts (x and y
// possibly Partial).
struct WhereCase {
  std::vector<Tensor> hosts;
  std::vector<Layout> layouts;
};
WhereCase where_case(const std::vector<Shape>& s, const Mesh& mesh, std::mt19937& rng) {
  WhereCase c;
  c.hosts = {random_mask(s[0], rng()), random_host(s[1], DType::kF64, rng()),
             random_host(s[2], DType::kF64, rng())};
  c.layouts = {random_op_layout(mesh, s[0].rank(), rng),
               random_op_layout(mesh, s[1].rank(), rng, true),
               random_op_layout(mesh, s[2].rank(), rng, true)};
  return c;
}

TEST(ElementwiseExtraMatchesSingleDevice, WhereOverRandomLayouts) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(34);
  const std::vector<std::vector<Shape>> triples = {
      {{5, 3}, {5, 3}, {5, 3}}, {{5, 3}, {3}, {}}, {{5, 1}, {1, 3}, {5, 3}},
      {{3}, {7, 3}, {7, 1}},    {{}, {4, 5}, {5}}, {{2, 5, 3}, {5, 1}, {1, 3}},
      {{6}, {6}, {6}}};
  for (const Mesh& mesh : small_meshes()) {
    for (const std::vector<Shape>& s : triples) {
      const WhereCase c = where_case(s, mesh, rng);
      expect_matches_single_device(where_fn, c.hosts, c.layouts, rt, rng, 1e-12);
    }
  }
}

// ---- VJPs ---------------------------------------------------------------------------------------

TEST(ElementwiseExtraVjp, UnaryOpsMatchFiniteDifferences) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(41);
  std::vector<std::pair<const char*, OpFn>> ops = unary_ops();
  ops.emplace_back("pow_scalar_0", [](const Inputs& in) { return pow(in[0], 0.0); });
  // A chain: sin's VJP through cos's value.
  ops.emplace_back("sin_twice", [](const Inputs& in) { return sin(sin(in[0])); });
  const std::vector<Shape> shapes = {{3, 2}, {5}, {}};
  for (const auto& [name, fn] : ops) {
    SCOPED_TRACE(name);
    for (size_t t = 0; t < small_meshes().size(); ++t) {
      const Mesh mesh = small_meshes()[t];
      // Away from 0: abs has a kink there.
      const Tensor x = random_host(shapes[t], DType::kF64, rng(), 0.3, 2.0);
      expect_vjp_matches_finite_differences(
          fn, {x}, {random_op_layout(mesh, shapes[t].rank(), rng, true)}, rt, rng, 1e-6);
    }
  }
  // abs below 0 too.
  const Mesh mesh = Mesh::create({{"x", 2}});
  expect_vjp_matches_finite_differences([](const Inputs& in) { return abs(in[0]); },
                                        {random_host({4}, DType::kF64, 7, -2.0, -0.3)},
                                        {Layout({"x"}, mesh)}, rt, rng, 1e-6);
}

TEST(ElementwiseExtraVjp, PowIntoBothOperandsWithBroadcasting) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(42);
  const OpFn fn = [](const Inputs& in) { return pow(in[0], in[1]); };
  const std::vector<std::pair<Shape, Shape>> pairs = {
      {{3, 2}, {3, 2}}, {{3, 2}, {2}}, {{3, 1}, {1, 2}}, {{3}, {}}, {{1, 2}, {3, 2}}};
  for (size_t t = 0; t < pairs.size(); ++t) {
    const Mesh mesh = small_meshes()[t % 3];
    const auto& [sa, sb] = pairs[t];
    expect_vjp_matches_finite_differences(
        fn, {random_host(sa, DType::kF64, rng(), 0.5, 2.0), random_host(sb, DType::kF64, rng())},
        {random_op_layout(mesh, sa.rank(), rng, true),
         random_op_layout(mesh, sb.rank(), rng, true)},
        rt, rng, 1e-6);
  }
}

TEST(ElementwiseExtraVjp, PowExponentGradientAtAZeroBaseIsZero) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}});
  const DTensor x = put({0, 2}, {2}, Layout({"x"}, mesh), rt);
  const DTensor y = put({2, 3}, {2}, Layout({"x"}, mesh), rt);
  const auto [value, grads] =
      value_and_grad([](const Inputs& p) { return reduce_sum(pow(p[0], p[1])); }, {x, y});
  EXPECT_EQ(values(grads[0]), (std::vector<double>{0, 12}));
  EXPECT_EQ(values(grads[1])[0], 0);
  EXPECT_NEAR(values(grads[1])[1], 8 * std::log(2.0), 1e-12);
}

TEST(ElementwiseExtraVjp, WhereIntoXAndYNotCond) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(43);
  const std::vector<std::vector<Shape>> triples = {
      {{3, 2}, {3, 2}, {3, 2}}, {{3, 2}, {2}, {}}, {{3, 1}, {1, 2}, {3, 2}}, {{2}, {3, 2}, {3, 1}}};
  for (size_t t = 0; t < triples.size(); ++t) {
    const Mesh mesh = small_meshes()[t % 3];
    const std::vector<Shape>& s = triples[t];
    const WhereCase c = where_case(s, mesh, rng);
    expect_vjp_matches_finite_differences(where_fn, c.hosts, c.layouts, rt, rng, 1e-6);
  }
}

TEST(ElementwiseExtraVjp, NoGradientFlowsThroughAComparison) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(44);
  // x * [x < y]: d/dx is the mask, d/dy is 0 (away from the ties).
  const OpFn fn = [](const Inputs& in) {
    return multiply(in[0], cast(less(in[0], in[1]), DType::kF64));
  };
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  expect_vjp_matches_finite_differences(
      fn, {random_host({4, 3}, DType::kF64, 1), random_host({3}, DType::kF64, 2)},
      {Layout({"x", "y"}, mesh), Layout({"y"}, mesh)}, rt, rng, 1e-6);
}

// ---- errors -------------------------------------------------------------------------------------

TEST(ElementwiseExtraErrors, BadDtypesAndShapesNameTheOp) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}});
  const DTensor f = put({1, 2}, {2}, Layout::replicated(mesh, 1), rt);
  const DTensor three = put({1, 2, 3}, {3}, Layout::replicated(mesh, 1), rt);
  const DTensor f32 = cast(f, DType::kF32);
  EXPECT_TESSEL_ERROR(less(f, three), ErrorCode::kInvalidArgument, "less");
  EXPECT_TESSEL_ERROR(equal(f, f32), ErrorCode::kInvalidArgument, "different dtypes");
  EXPECT_TESSEL_ERROR(where(f, f, f), ErrorCode::kInvalidArgument, "cond must be bool, got f64");
  EXPECT_TESSEL_ERROR(where(less(f, f), f, f32), ErrorCode::kInvalidArgument,
                      "x and y have different dtypes f64 and f32");
  EXPECT_TESSEL_ERROR(where(less(f, f), three, f), ErrorCode::kInvalidArgument, "where");
  const DTensor ints =
      copy_to_mesh(Tensor::from_vector<int64_t>({1, 2}, {2}), Layout::replicated(mesh, 1), rt);
  EXPECT_TESSEL_ERROR(square(ints), ErrorCode::kUnimplemented, "square");
  const DTensor mask = less(f, f);
  EXPECT_TESSEL_ERROR(equal(mask, mask), ErrorCode::kUnimplemented,
                      "no kernel for dtype bool (f32, f64, i32, i64)");
  EXPECT_TESSEL_ERROR(pow(ints, ints), ErrorCode::kUnimplemented, "pow");
}

}  // namespace
}  // namespace tessel
