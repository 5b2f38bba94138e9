// The elementwise ops (ops_elementwise.cpp, ops_unary.cpp): exact values, the sharding rules
// (plan_op), random layouts against a single-device run, VJPs against finite differences,
// errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/ops.h"
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

// Partial values made by distribute() are sums of random terms: equal to ~1 ulp.
void expect_near(const DTensor& t, const std::vector<double>& want) {
  const std::vector<double> got = values(t);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "element " << i;
}

Layout partial_sum(const Layout& layout, const std::string& dim) {
  return layout.with_partial({{dim, ReduceOp::kSum}});
}

DTensor put(const std::vector<double>& v, const Shape& shape, const Layout& layout, Runtime& rt) {
  return copy_to_mesh(Tensor::from_vector<double>(v, shape), layout, rt);
}

std::vector<Mesh> meshes() {
  return {Mesh::create({{"x", 4}}), Mesh::create({{"x", 2}, {"y", 2}}), Mesh::create({{"x", 3}})};
}

// ---- exact values ----------------------------------------------------------------------------

TEST(ElementwiseValues, BinaryOpsOnShardedInputs) {
  Runtime rt({.num_cpu_devices = 4});
  const Layout rows({"x"}, Mesh::create({{"x", 4}}));
  const DTensor a = put({1, -2, 3, 4, 5, 0}, {6}, rows, rt);
  const DTensor b = put({2, 2, -3, 8, 1, 0}, {6}, rows, rt);
  EXPECT_EQ(values(add(a, b)), (std::vector<double>{3, 0, 0, 12, 6, 0}));
  EXPECT_EQ(values(subtract(a, b)), (std::vector<double>{-1, -4, 6, -4, 4, 0}));
  EXPECT_EQ(values(multiply(a, b)), (std::vector<double>{2, -4, -9, 32, 5, 0}));
  EXPECT_EQ(values(divide(a, put({2, 4, -3, 8, 1, 5}, {6}, rows, rt))),
            (std::vector<double>{0.5, -0.5, -1, 0.5, 5, 0}));
  EXPECT_EQ(values(maximum(a, b)), (std::vector<double>{2, 2, 3, 8, 5, 0}));
  EXPECT_EQ(values(minimum(a, b)), (std::vector<double>{1, -2, -3, 4, 1, 0}));
  EXPECT_EQ(add(a, b).layout(), rows);
}

TEST(ElementwiseValues, BroadcastingRowColumnAndScalar) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const DTensor m = put({1, 2, 3, 4, 5, 6}, {2, 3}, Layout({"x", "y"}, mesh), rt);
  const DTensor row = put({10, 20, 30}, {3}, Layout({"y"}, mesh), rt);
  const DTensor col = put({100, 200}, {2, 1}, Layout::replicated(mesh, 2), rt);
  const DTensor scalar = put({2}, {}, Layout::replicated(mesh, 0), rt);
  EXPECT_EQ(values(add(m, row)), (std::vector<double>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ(values(subtract(row, m)), (std::vector<double>{9, 18, 27, 6, 15, 24}));
  EXPECT_EQ(values(add(m, col)), (std::vector<double>{101, 102, 103, 204, 205, 206}));
  EXPECT_EQ(values(multiply(col, row)), (std::vector<double>{1000, 2000, 3000, 2000, 4000, 6000}));
  EXPECT_EQ(values(divide(m, scalar)), (std::vector<double>{0.5, 1, 1.5, 2, 2.5, 3}));
  EXPECT_EQ(values(maximum(scalar, m)), (std::vector<double>{2, 2, 3, 4, 5, 6}));
  EXPECT_EQ(to_host(multiply(col, row)).shape(), (Shape{2, 3}));
}

TEST(ElementwiseValues, UnaryOps) {
  Runtime rt({.num_cpu_devices = 4});
  const Layout rows({"x"}, Mesh::create({{"x", 4}}));
  const std::vector<double> in = {-2, -0.5, 0, 0.25, 1, 4};
  const DTensor x = put(in, {6}, rows, rt);
  const DTensor pos = put({0.25, 1, 4, 9, 16, 100}, {6}, rows, rt);
  EXPECT_EQ(values(negative(x)), (std::vector<double>{2, 0.5, 0, -0.25, -1, -4}));
  EXPECT_EQ(values(relu(x)), (std::vector<double>{0, 0, 0, 0.25, 1, 4}));
  EXPECT_EQ(values(sqrt(pos)), (std::vector<double>{0.5, 1, 2, 3, 4, 10}));
  EXPECT_EQ(values(rsqrt(pos)), (std::vector<double>{2, 1, 0.5, 1.0 / 3, 0.25, 0.1}));
  const std::vector<double> e = values(exp(x));
  const std::vector<double> l = values(log(pos));
  const std::vector<double> t = values(tanh(x));
  const std::vector<double> g = values(gelu(x));
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_DOUBLE_EQ(e[i], std::exp(in[i]));
    EXPECT_DOUBLE_EQ(t[i], std::tanh(in[i]));
    const double v = in[i];
    EXPECT_DOUBLE_EQ(g[i],
                     0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
  }
  EXPECT_DOUBLE_EQ(l[0], std::log(0.25));
  EXPECT_DOUBLE_EQ(l[5], std::log(100.0));
  // gelu(1) from the tanh formula, to 7 digits.
  EXPECT_NEAR(g[4], 0.8411920, 1e-7);
}

TEST(ElementwiseValues, SigmoidIsTheLogisticFunctionAndSaturatesWithoutNan) {
  Runtime rt({.num_cpu_devices = 4});
  const Layout rows({"x"}, Mesh::create({{"x", 4}}));
  const std::vector<double> in = {-2, -0.5, 0, 0.25, 1, 4};
  const std::vector<double> s = values(sigmoid(put(in, {6}, rows, rt)));
  for (size_t i = 0; i < in.size(); ++i) EXPECT_DOUBLE_EQ(s[i], 1 / (1 + std::exp(-in[i])));
  EXPECT_EQ(s[2], 0.5);
  // e^-x overflows to inf far left: 1 / inf is 0, not NaN; far right e^-x is 0.
  const std::vector<double> far = {-1000, -800, 800, 1000};
  EXPECT_EQ(values(sigmoid(put(far, {4}, rows, rt))), (std::vector<double>{0, 0, 1, 1}));
  const DTensor f32 = cast(put(far, {4}, rows, rt), DType::kF32);
  EXPECT_EQ(values(sigmoid(f32)), (std::vector<double>{0, 0, 1, 1}));
}

TEST(ElementwiseValues, ScalarForms) {
  Runtime rt({.num_cpu_devices = 4});
  const Layout rows({"x"}, Mesh::create({{"x", 4}}));
  const DTensor x = put({1, 2, 3, 4, 5}, {5}, rows, rt);
  EXPECT_EQ(values(add(x, 0.5)), (std::vector<double>{1.5, 2.5, 3.5, 4.5, 5.5}));
  EXPECT_EQ(values(multiply(x, -2.0)), (std::vector<double>{-2, -4, -6, -8, -10}));
  EXPECT_EQ(add(x, 1.0).layout(), rows);
}

TEST(ElementwiseValues, CastKeepsLayoutAndRounds) {
  Runtime rt({.num_cpu_devices = 4});
  const Layout rows({"x", "unsharded"}, Mesh::create({{"x", 4}}));
  const DTensor x = put({1.5, -2.25, 1e-10, 3}, {2, 2}, rows, rt);
  const DTensor f = cast(x, DType::kF32);
  EXPECT_EQ(f.dtype(), DType::kF32);
  EXPECT_EQ(f.layout(), rows);
  EXPECT_EQ(to_host(f).to_vector<float>(), (std::vector<float>{1.5f, -2.25f, 1e-10f, 3.f}));
  const DTensor i = cast(x, DType::kI32);
  EXPECT_EQ(to_host(i).to_vector<int32_t>(), (std::vector<int32_t>{1, -2, 0, 3}));
  EXPECT_EQ(to_host(cast(i, DType::kF64)).to_doubles(), (std::vector<double>{1, -2, 0, 3}));
  EXPECT_EQ(to_host(cast(f, DType::kF64)).dtype(), DType::kF64);
}

TEST(ElementwiseValues, EmptyBlocksOnUnevenMeshes) {
  Runtime rt({.num_cpu_devices = 4});
  // 2 elements over 4 devices: devices 2 and 3 hold empty blocks.
  const Layout rows({"x"}, Mesh::create({{"x", 4}}));
  const DTensor a = put({1, 2}, {2}, rows, rt);
  EXPECT_EQ(values(add(a, a)), (std::vector<double>{2, 4}));
  EXPECT_EQ(values(exp(multiply(a, 0.0))), (std::vector<double>{1, 1}));
  const DTensor empty = put({}, {0}, rows, rt);
  EXPECT_EQ(to_host(relu(add(empty, empty))).num_elements(), 0);
}

// ---- Partial semantics ------------------------------------------------------------------------

TEST(ElementwisePartial, AddOfReplicatedToPartialSumAddsItOnce) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(3);
  const Mesh mesh = Mesh::create({{"x", 4}});
  const Tensor host = Tensor::from_vector<double>({1, 2, 3}, {3});
  const DTensor p = distribute(host, partial_sum(Layout::replicated(mesh, 1), "x"), rt, rng);
  const DTensor r = put({10, 20, 30}, {3}, Layout::replicated(mesh, 1), rt);
  const DTensor sum = add(p, r);
  EXPECT_EQ(sum.layout().partial(), p.layout().partial());
  expect_near(sum, {11, 22, 33});
  expect_near(subtract(r, p), {9, 18, 27});
  // The host scalar too: added on one device of the group.
  const DTensor plus = add(p, 100.0);
  EXPECT_TRUE(plus.layout().is_partial());
  expect_near(plus, {101, 102, 103});
}

TEST(ElementwisePartial, LinearOpsKeepPartialNonlinearReduce) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(4);
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Tensor host = Tensor::from_vector<double>({1, -2, 3, 0.5}, {4});
  const Layout lp = partial_sum(Layout({"x"}, mesh), "y");
  const DTensor p = distribute(host, lp, rt, rng);
  const DTensor r = put({2, 2, 2, 2}, {4}, Layout::replicated(mesh, 1), rt);
  EXPECT_EQ(multiply(p, r).layout(), lp);
  expect_near(multiply(p, r), {2, -4, 6, 1});
  EXPECT_EQ(multiply(r, p).layout(), lp);
  EXPECT_EQ(divide(p, r).layout(), lp);
  expect_near(divide(p, r), {0.5, -1, 1.5, 0.25});
  EXPECT_EQ(negative(p).layout(), lp);
  expect_near(negative(p), {-1, 2, -3, -0.5});
  EXPECT_EQ(multiply(p, 3.0).layout(), lp);
  EXPECT_EQ(add(p, p).layout(), lp);
  expect_near(add(p, p), {2, -4, 6, 1});
  // Nonlinear: reduced first.
  EXPECT_FALSE(relu(p).layout().is_partial());
  expect_near(relu(p), {1, 0, 3, 0.5});
  EXPECT_FALSE(divide(r, p).layout().is_partial());
  expect_near(divide(r, p), {2, -1, 2.0 / 3, 4});
  EXPECT_FALSE(maximum(p, r).layout().is_partial());
  EXPECT_FALSE(cast(p, DType::kF32).layout().is_partial());
  expect_near(cast(p, DType::kF32), {1, -2, 3, 0.5});
}

TEST(ElementwisePartial, NegativeTurnsPartialMaxIntoMin) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  const Layout lmax = Layout::replicated(mesh, 1).with_partial({{"x", ReduceOp::kMax}});
  std::vector<Tensor> terms;
  for (int d = 0; d < 4; ++d) {
    terms.push_back(Tensor::from_vector<double>({double(d), double(-d), 5}, {3}));
  }
  const DTensor m = pack(terms, lmax, rt);
  EXPECT_EQ(values(m), (std::vector<double>{3, 0, 5}));
  const DTensor n = negative(m);
  EXPECT_EQ(n.layout().partial()[0].op, ReduceOp::kMin);
  EXPECT_EQ(values(n), (std::vector<double>{-3, 0, -5}));
  const DTensor s = multiply(m, -2.0);
  EXPECT_EQ(s.layout().partial()[0].op, ReduceOp::kMin);
  EXPECT_EQ(values(s), (std::vector<double>{-6, 0, -10}));
  EXPECT_EQ(multiply(m, 2.0).layout(), lmax);
  EXPECT_EQ(add(m, 1.0).layout(), lmax);
  EXPECT_EQ(values(add(m, 1.0)), (std::vector<double>{4, 1, 6}));
  // add of two Partial(max): not linear, reduced.
  EXPECT_FALSE(add(m, m).layout().is_partial());
  EXPECT_EQ(values(add(m, m)), (std::vector<double>{6, 0, 10}));
  EXPECT_FALSE(exp(m).layout().is_partial());
}

TEST(ElementwisePartial, PartialMeanKeptByLinearOps) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  const Layout lmean = Layout::replicated(mesh, 1).with_partial({{"x", ReduceOp::kMean}});
  std::vector<Tensor> terms;
  for (int d = 0; d < 4; ++d) terms.push_back(Tensor::from_vector<double>({double(d), 2}, {2}));
  const DTensor m = pack(terms, lmean, rt);  // mean: {1.5, 2}
  const DTensor r = put({1, 1}, {2}, Layout::replicated(mesh, 1), rt);
  EXPECT_EQ(add(m, r).layout(), lmean);
  EXPECT_EQ(values(add(m, r)), (std::vector<double>{2.5, 3}));
  EXPECT_EQ(values(add(m, 1.0)), (std::vector<double>{2.5, 3}));
  EXPECT_EQ(multiply(m, r).layout(), lmean);
  EXPECT_EQ(values(multiply(m, 4.0)), (std::vector<double>{6, 8}));
}

// ---- sharding rules (plan_op) -----------------------------------------------------------------

TensorSpec spec(const Shape& shape, const Layout& layout, DType dtype = DType::kF32) {
  return TensorSpec{shape, dtype, layout};
}

TEST(ElementwiseRule, EqualLayoutsNeedNoRelayout) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Layout l({"x", "y"}, mesh);
  for (const char* op : {"add", "subtract", "multiply", "divide", "maximum", "minimum"}) {
    const ShardingDecision d = plan_op(op, {spec({8, 6}, l), spec({8, 6}, l)});
    EXPECT_EQ(d.inputs[0], l) << op;
    EXPECT_EQ(d.inputs[1], l) << op;
    EXPECT_EQ(d.output, l) << op;
  }
}

TEST(ElementwiseRule, BroadcastDimsAreUnshardedInTheBroadcastInput) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  // [8, 6] in (x, y) + [6] replicated: the row follows y on its dim.
  ShardingDecision d = plan_op(
      "add", {spec({8, 6}, Layout({"x", "y"}, mesh)), spec({6}, Layout::replicated(mesh, 1))});
  EXPECT_EQ(d.output, Layout({"x", "y"}, mesh));
  EXPECT_EQ(d.inputs[1], Layout({"y"}, mesh));
  // A size-1 dim sharded in its input is demanded unsharded.
  d = plan_op("multiply", {spec({1, 6}, Layout({"x", "y"}, mesh)),
                           spec({8, 6}, Layout({"x", "unsharded"}, mesh))});
  EXPECT_EQ(d.inputs[0], Layout({"unsharded", "y"}, mesh));
  EXPECT_EQ(d.inputs[1], Layout({"x", "y"}, mesh));
  EXPECT_EQ(d.output, Layout({"x", "y"}, mesh));
}

TEST(ElementwiseRule, LargerOperandsShardingWinsTheOtherFollows) {
  const Mesh mesh = Mesh::create({{"x", 4}});
  // [8, 1] rows on x, [8, 6] columns on x: the larger one's sharding.
  ShardingDecision d = plan_op("add", {spec({8, 1}, Layout({"x", "unsharded"}, mesh)),
                                       spec({8, 6}, Layout({"unsharded", "x"}, mesh))});
  EXPECT_EQ(d.output, Layout({"unsharded", "x"}, mesh));
  EXPECT_EQ(d.inputs[0], Layout::replicated(mesh, 2));
  EXPECT_EQ(d.inputs[1], Layout({"unsharded", "x"}, mesh));
  // Same size: the first input's.
  d = plan_op("maximum", {spec({8, 6}, Layout({"x", "unsharded"}, mesh)),
                          spec({8, 6}, Layout({"unsharded", "x"}, mesh))});
  EXPECT_EQ(d.output, Layout({"x", "unsharded"}, mesh));
  EXPECT_EQ(d.inputs[1], Layout({"x", "unsharded"}, mesh));
  // A replicated larger input takes the smaller one's sharding (a local slice, no collective).
  d = plan_op("subtract",
              {spec({8, 6}, Layout::replicated(mesh, 2)), spec({6}, Layout({"x"}, mesh))});
  EXPECT_EQ(d.output, Layout({"unsharded", "x"}, mesh));
  EXPECT_EQ(d.inputs[0], Layout({"unsharded", "x"}, mesh));
}

TEST(ElementwiseRule, PartialRulesPerOp) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Layout rep = Layout({"x", "unsharded"}, mesh);
  const Layout py = partial_sum(rep, "y");
  const Layout px = partial_sum(Layout::replicated(mesh, 2), "x");
  const TensorSpec p = spec({8, 6}, py);
  const TensorSpec r = spec({8, 6}, rep);
  // add / subtract: the other input is made Partial too.
  for (const char* op : {"add", "subtract"}) {
    ShardingDecision d = plan_op(op, {p, r});
    EXPECT_EQ(d.output, py) << op;
    EXPECT_EQ(d.inputs[1], py) << op;
    d = plan_op(op, {r, p});
    EXPECT_EQ(d.inputs[0], py) << op;
  }
  // Different Partial dims: both become Partial over both.
  const Layout pxy =
      Layout::replicated(mesh, 2).with_partial({{"x", ReduceOp::kSum}, {"y", ReduceOp::kSum}});
  ShardingDecision d = plan_op(
      "add", {spec({8, 6}, px), spec({8, 6}, partial_sum(Layout::replicated(mesh, 2), "y"))});
  EXPECT_EQ(d.output, pxy);
  EXPECT_EQ(d.inputs[0], pxy);
  EXPECT_EQ(d.inputs[1], pxy);
  // multiply: the Partial factor stays, the other is left alone.
  d = plan_op("multiply", {r, p});
  EXPECT_EQ(d.output, py);
  EXPECT_EQ(d.inputs[0], rep);
  EXPECT_EQ(d.inputs[1], py);
  // multiply of two Partials: the larger keeps it, the smaller is reduced.
  d = plan_op("multiply", {spec({6}, partial_sum(Layout::replicated(mesh, 1), "x")), p});
  EXPECT_EQ(d.output, py);
  EXPECT_EQ(d.inputs[0], Layout::replicated(mesh, 1));
  // divide: only the numerator.
  d = plan_op("divide", {r, p});
  EXPECT_EQ(d.output, rep);
  EXPECT_EQ(d.inputs[1], rep);
  d = plan_op("divide", {p, r});
  EXPECT_EQ(d.output, py);
  // maximum / minimum: none.
  d = plan_op("minimum", {p, p});
  EXPECT_EQ(d.output, rep);
  EXPECT_EQ(d.inputs[0], rep);
  // A Partial mesh dim the output shards over is reduced (reduce-scatter by the planner).
  d = plan_op("add", {spec({8, 6}, Layout({"unsharded", "y"}, mesh)), p});
  EXPECT_EQ(d.output, Layout({"x", "y"}, mesh));
  EXPECT_EQ(d.inputs[1], Layout({"x", "y"}, mesh));
}

TEST(ElementwiseRule, UnaryRulesKeepTheLayout) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Layout l({"unsharded", "y"}, mesh);
  const Layout p = partial_sum(l, "x");
  for (const char* op :
       {"exp", "log", "tanh", "relu", "gelu", "sigmoid", "sqrt", "rsqrt", "negative"}) {
    const ShardingDecision d = plan_op(op, {spec({5, 3}, l)});
    EXPECT_EQ(d.output, l) << op;
    EXPECT_EQ(d.inputs[0], l) << op;
  }
  for (const char* op : {"exp", "log", "tanh", "relu", "gelu", "sigmoid", "sqrt", "rsqrt"}) {
    const ShardingDecision d = plan_op(op, {spec({5, 3}, p)});
    EXPECT_EQ(d.output, l) << op;
    EXPECT_EQ(d.inputs[0], l) << op;
  }
  EXPECT_EQ(plan_op("negative", {spec({5, 3}, p)}).output, p);
  // A widening float cast keeps a pending sum (reduced later, in the wider dtype); a narrowing
  // one or a cast to integers reduces first.
  OpAttrs attrs;
  attrs.dtype = DType::kF64;
  EXPECT_EQ(plan_op("cast", {spec({5, 3}, p)}, attrs).inputs[0], p);
  EXPECT_EQ(plan_op("cast", {spec({5, 3}, p)}, attrs).output, p);
  for (DType narrower : {DType::kBF16, DType::kI32}) {
    attrs.dtype = narrower;
    EXPECT_EQ(plan_op("cast", {spec({5, 3}, p)}, attrs).inputs[0], l) << dtype_name(narrower);
  }
  const Layout prod = l.with_partial({{"x", ReduceOp::kProd}});
  EXPECT_EQ(plan_op("add_scalar", {spec({5, 3}, prod)}).inputs[0], l);
  EXPECT_EQ(plan_op("negative", {spec({5, 3}, prod)}).inputs[0], l);
}

// ---- against a single device, random layouts ---------------------------------------------------

struct BinaryCase {
  const char* name;
  OpFn fn;
  bool positive_b;  // b must stay away from 0
};

std::vector<BinaryCase> binary_cases() {
  return {
      {"add", [](const std::vector<DTensor>& in) { return add(in[0], in[1]); }, false},
      {"subtract", [](const std::vector<DTensor>& in) { return subtract(in[0], in[1]); }, false},
      {"multiply", [](const std::vector<DTensor>& in) { return multiply(in[0], in[1]); }, false},
      {"divide", [](const std::vector<DTensor>& in) { return divide(in[0], in[1]); }, true},
      {"maximum", [](const std::vector<DTensor>& in) { return maximum(in[0], in[1]); }, false},
      {"minimum", [](const std::vector<DTensor>& in) { return minimum(in[0], in[1]); }, false},
  };
}

// Shape pairs that broadcast (odd sizes: uneven shards on every mesh).
const std::vector<std::pair<Shape, Shape>>& shape_pairs() {
  static const std::vector<std::pair<Shape, Shape>> pairs = {
      {{5, 3}, {5, 3}}, {{5, 3}, {3}},       {{5, 1}, {1, 3}}, {{7}, {}},
      {{1, 6}, {5, 6}}, {{2, 5, 3}, {5, 1}}, {{4, 6}, {4, 6}}, {{3}, {7, 3}},
  };
  return pairs;
}

TEST(ElementwiseMatchesSingleDevice, BinaryOpsOverRandomLayouts) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(11);
  for (const BinaryCase& c : binary_cases()) {
    int runs = 0;
    for (const Mesh& mesh : meshes()) {
      for (int t = 0; t < 8; ++t, ++runs) {
        const auto& [sa, sb] = shape_pairs()[static_cast<size_t>(t)];
        const Tensor a = random_host(sa, DType::kF64, rng());
        const Tensor b = c.positive_b ? random_host(sb, DType::kF64, rng(), 0.5, 2.0)
                                      : random_host(sb, DType::kF64, rng());
        SCOPED_TRACE(c.name);
        expect_matches_single_device(c.fn, {a, b},
                                     {random_op_layout(mesh, sa.rank(), rng, true),
                                      random_op_layout(mesh, sb.rank(), rng, true)},
                                     rt, rng, 1e-12);
      }
    }
    EXPECT_GE(runs, 20);
  }
}

TEST(ElementwiseMatchesSingleDevice, UnaryOpsOverRandomLayouts) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(12);
  const std::vector<std::pair<const char*, OpFn>> ops = {
      {"negative", [](const std::vector<DTensor>& in) { return negative(in[0]); }},
      {"exp", [](const std::vector<DTensor>& in) { return exp(in[0]); }},
      {"log", [](const std::vector<DTensor>& in) { return log(in[0]); }},
      {"tanh", [](const std::vector<DTensor>& in) { return tanh(in[0]); }},
      {"relu", [](const std::vector<DTensor>& in) { return relu(in[0]); }},
      {"gelu", [](const std::vector<DTensor>& in) { return gelu(in[0]); }},
      {"sigmoid", [](const std::vector<DTensor>& in) { return sigmoid(in[0]); }},
      {"sqrt", [](const std::vector<DTensor>& in) { return sqrt(in[0]); }},
      {"rsqrt", [](const std::vector<DTensor>& in) { return rsqrt(in[0]); }},
      {"add_scalar", [](const std::vector<DTensor>& in) { return add(in[0], 1.5); }},
      {"multiply_scalar", [](const std::vector<DTensor>& in) { return multiply(in[0], -3.0); }},
      {"cast",
       [](const std::vector<DTensor>& in) { return cast(cast(in[0], DType::kF32), DType::kF64); }},
  };
  const std::vector<Shape> shapes = {{5, 3}, {7}, {2, 3, 5}, {}, {1, 4}, {9, 2}, {4}};
  for (const auto& [name, fn] : ops) {
    const bool positive =
        std::string(name) == "log" || std::string(name) == "sqrt" || std::string(name) == "rsqrt";
    int runs = 0;
    for (const Mesh& mesh : meshes()) {
      for (const Shape& shape : shapes) {
        const Tensor x = positive ? random_host(shape, DType::kF64, rng(), 0.5, 3.0)
                                  : random_host(shape, DType::kF64, rng());
        SCOPED_TRACE(name);
        expect_matches_single_device(fn, {x}, {random_op_layout(mesh, shape.rank(), rng, true)}, rt,
                                     rng, std::string(name) == "cast" ? 1e-6 : 1e-12);
        ++runs;
      }
    }
    EXPECT_GE(runs, 20);
  }
}

// ---- VJPs ---------------------------------------------------------------------------------------

TEST(ElementwiseVjp, BinaryOpsMatchFiniteDifferences) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(21);
  const std::vector<std::pair<Shape, Shape>> pairs = {
      {{3, 2}, {3, 2}}, {{3, 2}, {2}}, {{3, 1}, {1, 2}}, {{3}, {}}, {{1, 2}, {3, 2}}};
  for (const BinaryCase& c : binary_cases()) {
    for (size_t t = 0; t < pairs.size(); ++t) {
      const Mesh mesh = meshes()[t % 3];
      const auto& [sa, sb] = pairs[t];
      const Tensor a = random_host(sa, DType::kF64, rng());
      // Away from 0 (divide) and from ties (maximum / minimum: a kink).
      Tensor b = random_host(sb, DType::kF64, rng(), 0.5, 2.0);
      SCOPED_TRACE(c.name);
      expect_vjp_matches_finite_differences(c.fn, {a, b},
                                            {random_op_layout(mesh, sa.rank(), rng, true),
                                             random_op_layout(mesh, sb.rank(), rng, true)},
                                            rt, rng, 1e-6);
    }
  }
}

TEST(ElementwiseVjp, MaximumTiesGoToTheFirstInput) {
  Runtime rt({.num_cpu_devices = 4});
  const Layout rows({"x"}, Mesh::create({{"x", 4}}));
  const DTensor a = put({1, 5, 3, 2}, {4}, rows, rt);
  const DTensor b = put({1, 4, 3, 7}, {4}, rows, rt);
  for (bool max : {true, false}) {
    auto [value, grads] = value_and_grad(
        [max](const std::vector<DTensor>& p) {
          return reduce_sum(max ? maximum(p[0], p[1]) : minimum(p[0], p[1]));
        },
        {a, b});
    EXPECT_EQ(values(grads[0]),
              max ? (std::vector<double>{1, 1, 1, 0}) : (std::vector<double>{1, 0, 1, 1}));
    EXPECT_EQ(values(grads[1]),
              max ? (std::vector<double>{0, 0, 0, 1}) : (std::vector<double>{0, 1, 0, 0}));
  }
}

TEST(ElementwiseVjp, ReluGradientIsZeroAtZero) {
  Runtime rt({.num_cpu_devices = 4});
  const Layout rows({"x"}, Mesh::create({{"x", 4}}));
  const DTensor x = put({-1, 0, 2, 3}, {4}, rows, rt);
  auto [value, grads] = value_and_grad(
      [](const std::vector<DTensor>& p) { return reduce_sum(multiply(relu(p[0]), 2.0)); }, {x});
  EXPECT_EQ(values(grads[0]), (std::vector<double>{0, 0, 2, 2}));
  EXPECT_EQ(grads[0].layout(), rows);
}

TEST(ElementwiseVjp, UnaryOpsMatchFiniteDifferences) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(22);
  const std::vector<std::pair<const char*, OpFn>> ops = {
      {"negative", [](const std::vector<DTensor>& in) { return negative(in[0]); }},
      {"exp", [](const std::vector<DTensor>& in) { return exp(in[0]); }},
      {"log", [](const std::vector<DTensor>& in) { return log(in[0]); }},
      {"tanh", [](const std::vector<DTensor>& in) { return tanh(in[0]); }},
      {"relu", [](const std::vector<DTensor>& in) { return relu(in[0]); }},
      {"gelu", [](const std::vector<DTensor>& in) { return gelu(in[0]); }},
      {"sigmoid", [](const std::vector<DTensor>& in) { return sigmoid(in[0]); }},
      {"sqrt", [](const std::vector<DTensor>& in) { return sqrt(in[0]); }},
      {"rsqrt", [](const std::vector<DTensor>& in) { return rsqrt(in[0]); }},
      {"add_scalar", [](const std::vector<DTensor>& in) { return add(in[0], 1.5); }},
      {"multiply_scalar", [](const std::vector<DTensor>& in) { return multiply(in[0], -3.0); }},
      {"cast", [](const std::vector<DTensor>& in) { return cast(in[0], DType::kF64); }},
  };
  const std::vector<Shape> shapes = {{3, 2}, {5}, {}};
  for (const auto& [name, fn] : ops) {
    for (size_t t = 0; t < shapes.size(); ++t) {
      const Mesh mesh = meshes()[t];
      // Positive, away from relu's kink.
      const Tensor x = random_host(shapes[t], DType::kF64, rng(), 0.5, 2.0);
      Tensor y = x.clone();
      if (std::string(name) != "log" && std::string(name) != "sqrt" &&
          std::string(name) != "rsqrt") {
        for (int64_t i = 0; i < y.num_elements(); i += 2) y.data<double>()[i] *= -1;
      }
      SCOPED_TRACE(name);
      expect_vjp_matches_finite_differences(
          fn, {y}, {random_op_layout(mesh, shapes[t].rank(), rng, true)}, rt, rng, 1e-6);
    }
  }
}

TEST(ElementwiseVjp, SecondOrderThroughTanh) {
  Runtime rt({.num_cpu_devices = 4});
  const Layout rows({"x"}, Mesh::create({{"x", 4}}));
  const std::vector<double> in = {0.3, -0.7, 1.2};
  const DTensor x = put(in, {3}, rows, rt);
  GradientTape outer;
  outer.watch(x);
  DTensor g;
  {
    GradientTape inner;
    inner.watch(x);
    g = inner.gradient(reduce_sum(tanh(x)), {x})[0];
  }
  const std::vector<double> second = values(outer.gradient(reduce_sum(g), {x})[0]);
  for (size_t i = 0; i < in.size(); ++i) {
    const double t = std::tanh(in[i]);
    EXPECT_NEAR(values(g)[i], 1 - t * t, 1e-15);
    EXPECT_NEAR(second[i], -2 * t * (1 - t * t), 1e-15);
  }
}

TEST(ElementwiseVjp, SigmoidGradientAndItsSecondOrder) {
  Runtime rt({.num_cpu_devices = 4});
  const Layout rows({"x"}, Mesh::create({{"x", 4}}));
  const std::vector<double> in = {0.3, -0.7, 1.2, -3};
  const DTensor x = put(in, {4}, rows, rt);
  GradientTape outer;
  outer.watch(x);
  DTensor g;
  {
    GradientTape inner;
    inner.watch(x);
    g = inner.gradient(reduce_sum(sigmoid(x)), {x})[0];
  }
  EXPECT_EQ(g.layout(), rows);
  const std::vector<double> second = values(outer.gradient(reduce_sum(g), {x})[0]);
  for (size_t i = 0; i < in.size(); ++i) {
    const double s = 1 / (1 + std::exp(-in[i]));
    EXPECT_NEAR(values(g)[i], s * (1 - s), 1e-15);
    EXPECT_NEAR(second[i], s * (1 - s) * (1 - 2 * s), 1e-15);
  }
}

TEST(ElementwiseVjp, CastGradientComesBackInTheInputDtype) {
  Runtime rt({.num_cpu_devices = 4});
  const Layout rows({"x"}, Mesh::create({{"x", 4}}));
  const DTensor x = put({1, 2, 3}, {3}, rows, rt);
  auto [value, grads] = value_and_grad(
      [](const std::vector<DTensor>& p) {
        return reduce_sum(multiply(cast(p[0], DType::kF32), 4.0));
      },
      {x});
  EXPECT_EQ(grads[0].dtype(), DType::kF64);
  EXPECT_EQ(values(grads[0]), (std::vector<double>{4, 4, 4}));
}

// ---- errors -------------------------------------------------------------------------------------

TEST(ElementwiseErrors, ShapesThatDoNotBroadcast) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  const DTensor a = put({1, 2, 3}, {3}, Layout::replicated(mesh, 1), rt);
  const DTensor b = put({1, 2}, {2}, Layout::replicated(mesh, 1), rt);
  EXPECT_TESSEL_ERROR(add(a, b), ErrorCode::kInvalidArgument, "add");
  EXPECT_TESSEL_ERROR(maximum(a, b), ErrorCode::kInvalidArgument, "[3] and [2] do not broadcast");
}

TEST(ElementwiseErrors, DtypesThatDiffer) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  const DTensor a = put({1, 2, 3}, {3}, Layout::replicated(mesh, 1), rt);
  const DTensor f = cast(a, DType::kF32);
  EXPECT_TESSEL_ERROR(multiply(a, f), ErrorCode::kInvalidArgument, "different dtypes f64 and f32");
}

TEST(ElementwiseErrors, NoKernelForIntegerDtypes) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  const DTensor i =
      copy_to_mesh(Tensor::from_vector<int32_t>({1, 2}, {2}), Layout::replicated(mesh, 1), rt);
  EXPECT_TESSEL_ERROR(add(i, i), ErrorCode::kUnimplemented, "no kernel for dtype i32");
  EXPECT_TESSEL_ERROR(exp(i), ErrorCode::kUnimplemented, "exp");
  EXPECT_TESSEL_ERROR(add(i, 1.0), ErrorCode::kUnimplemented, "add_scalar");
}

TEST(ElementwiseErrors, NullAndForeignMeshInputs) {
  Runtime rt({.num_cpu_devices = 4});
  const DTensor a = put({1, 2}, {2}, Layout::replicated(Mesh::create({{"x", 4}}), 1), rt);
  const DTensor b = put({1, 2}, {2}, Layout::replicated(Mesh::create({{"x", 2}}), 1), rt);
  EXPECT_TESSEL_ERROR(add(a, b), ErrorCode::kInvalidArgument, "different meshes");
  EXPECT_TESSEL_ERROR(relu(DTensor()), ErrorCode::kInvalidArgument, "null DTensor");
}

TEST(ElementwiseErrors, GeluGradientHasNoSecondDerivative) {
  Runtime rt({.num_cpu_devices = 4});
  const Layout rows({"x"}, Mesh::create({{"x", 4}}));
  const DTensor x = put({1, 2}, {2}, rows, rt);
  GradientTape outer;
  outer.watch(x);
  GradientTape inner;
  inner.watch(x);
  const DTensor y = reduce_sum(gelu(x));
  const DTensor g = inner.gradient(y, {x})[0];
  EXPECT_TESSEL_ERROR(outer.gradient(reduce_sum(g), {x}), ErrorCode::kUnimplemented, "gelu_grad");
}

}  // namespace
}  // namespace tessel
