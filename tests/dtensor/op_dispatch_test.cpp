// The op registry, dispatch (errors, the sharding fallback), gradient tapes, fused gradient
// reductions and the optimizers.
#include <gtest/gtest.h>

#include <cmath>

#include "dtensor/framework/op_util.h"
#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/optimizers.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/dtensor/sharding_fallback.h"
#include "testing/expect_error.h"
#include "testing/op_check.h"

namespace tessel {
namespace {

using testing::values;

// An op whose rule only accepts replicated inputs (registered once for these tests).
void register_picky_op() {
  static bool done = [] {
    OpDef def;
    def.name = "test_picky_identity";
    def.num_inputs = 1;
    def.infer = [](const std::vector<TensorSpec>& in, const OpAttrs&) { return in[0]; };
    def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
      if (!in[0].layout.is_fully_replicated()) detail::no_rule("only replicated inputs");
      return ShardingDecision{{in[0].layout}, in[0].layout};
    };
    def.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs&, const LocalContext&) {
      out.copy_from(in[0]);
    };
    OpRegistry::global().add(std::move(def));
    return true;
  }();
  (void)done;
}

TEST(OpRegistry, DuplicateAndUnknownNames) {
  register_picky_op();
  OpDef again;
  again.name = "test_picky_identity";
  again.infer = [](const std::vector<TensorSpec>& in, const OpAttrs&) { return in[0]; };
  again.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
    return ShardingDecision{{in[0].layout}, in[0].layout};
  };
  again.kernel = [](const std::vector<Tensor>&, Tensor&, const OpAttrs&, const LocalContext&) {};
  EXPECT_TESSEL_ERROR(OpRegistry::global().add(again), ErrorCode::kAlreadyExists, "test_picky_identity");
  EXPECT_TESSEL_ERROR(OpRegistry::global().get("no_such_op"), ErrorCode::kNotFound, "no_such_op");
  OpDef incomplete;
  incomplete.name = "test_incomplete";
  EXPECT_TESSEL_ERROR(OpRegistry::global().add(incomplete), ErrorCode::kInvalidArgument,
                      "needs a name, infer, shard and kernel");
  for (const char* op : {"add", "matmul", "reduce_sum", "softmax", "reshape", "embedding_lookup",
                         "random_normal"}) {
    EXPECT_TRUE(OpRegistry::global().contains(op)) << op;
  }
}

TEST(OpDispatch, NoRuleFallsBackToReplicatedUnlessStrict) {
  register_picky_op();
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  const Tensor host = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8}, Shape{8});
  const DTensor sharded = copy_to_mesh(host, Layout({"x"}, mesh), rt);
  const DTensor out = call_op("test_picky_identity", {sharded});
  EXPECT_TRUE(out.layout().is_fully_replicated());
  EXPECT_EQ(values(out), host.to_doubles());
  set_sharding_fallback_strict(true);
  EXPECT_TESSEL_ERROR(call_op("test_picky_identity", {sharded}), ErrorCode::kUnimplemented,
                      "no sharding rule for input 0: [8] f32 in sharding_specs:x on mesh x=4");
  // The deprecated switch is strict mode's negation.
  EXPECT_FALSE(replicate_fallback());
  set_replicate_fallback(true);
  EXPECT_FALSE(sharding_fallback_strict());
  reset_sharding_fallbacks();
}

TEST(OpDispatch, BadCallsNameTheOp) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh four = Mesh::create({{"x", 4}});
  const Mesh two = Mesh::create_on_devices({{"x", 2}}, {"CPU:0", "CPU:1"});
  const DTensor a = copy_to_mesh(Tensor::zeros(Shape{4}, DType::kF32), Layout({"x"}, four), rt);
  const DTensor b = copy_to_mesh(Tensor::zeros(Shape{4}, DType::kF32), Layout({"x"}, two), rt);
  EXPECT_TESSEL_ERROR(call_op("add", {a}), ErrorCode::kInvalidArgument, "takes 2 inputs, got 1");
  EXPECT_TESSEL_ERROR(call_op("add", {a, DTensor()}), ErrorCode::kInvalidArgument, "input 1 is a null DTensor");
  EXPECT_TESSEL_ERROR(add(a, b), ErrorCode::kInvalidArgument, "different meshes");
}

TEST(GradientTape, NonPersistentTapeGivesOneGradient) {
  Runtime rt({.num_cpu_devices = 2});
  const Mesh mesh = Mesh::create({{"x", 2}});
  const DTensor x = copy_to_mesh(Tensor::from_vector<double>({1, 2}, Shape{2}), Layout({"x"}, mesh), rt);
  GradientTape tape;
  tape.watch(x);
  const DTensor y = reduce_sum(multiply(x, x));
  EXPECT_EQ(values(tape.gradient(y, {x})[0]), (std::vector<double>{2, 4}));
  EXPECT_TESSEL_ERROR(tape.gradient(y, {x}), ErrorCode::kFailedPrecondition, "already called");
}

TEST(GradientTape, UnconnectedSourceGetsZerosInItsLayout) {
  Runtime rt({.num_cpu_devices = 2});
  const Mesh mesh = Mesh::create({{"x", 2}});
  const Layout layout({"x"}, mesh);
  const DTensor x = copy_to_mesh(Tensor::from_vector<double>({1, 2}, Shape{2}), layout, rt);
  const DTensor z = copy_to_mesh(Tensor::from_vector<double>({5, 6}, Shape{2}), layout, rt);
  GradientTape tape(/*persistent=*/true);
  tape.watch(x);
  tape.watch(z);
  const DTensor y = reduce_sum(exp(x));
  const std::vector<DTensor> g = tape.gradient(y, {x, z});
  EXPECT_NEAR(values(g[0])[1], std::exp(2.0), 1e-12);
  EXPECT_EQ(values(g[1]), (std::vector<double>{0, 0}));
  EXPECT_EQ(g[1].layout(), layout);
}

TEST(GradientTape, DataParallelGradientsAreReducedInOneFusedCollective) {
  // Three replicated parameters used with a batch-sharded input: their gradients come out of
  // the backward pass as Partial sums over the batch dimension and are all-reduced together.
  Runtime rt({.num_cpu_devices = 2});
  const Mesh mesh = Mesh::create({{"batch", 2}});
  const Layout rep = Layout::replicated(mesh, 2);
  const DTensor x = random_normal(Shape{8, 4}, Layout({"batch", "unsharded"}, mesh), 1, 0, 1,
                                  DType::kF64, &rt);
  std::vector<DTensor> params = {random_normal(Shape{4, 4}, rep, 2, 0, 1, DType::kF64, &rt),
                                 random_normal(Shape{4, 4}, rep, 3, 0, 1, DType::kF64, &rt),
                                 random_normal(Shape{4, 4}, rep, 4, 0, 1, DType::kF64, &rt)};
  const auto loss = [&](const std::vector<DTensor>& p) {
    return reduce_mean(tanh(matmul(tanh(matmul(tanh(matmul(x, p[0])), p[1])), p[2])));
  };
  GradientTape tape;
  for (const DTensor& p : params) tape.watch(p);
  const DTensor value = loss(params);
  const RelayoutStats before = relayout_stats();
  const std::vector<DTensor> grads = tape.gradient(value, params);
  const RelayoutStats after = relayout_stats();
  EXPECT_EQ(after.collectives - before.collectives, 1);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(grads[i].layout(), rep) << i;
  // The same gradients as on one device.
  const Mesh one = Mesh::create_on_devices({{"batch", 1}}, {"CPU:0"});
  std::vector<DTensor> single;
  for (const DTensor& p : params) single.push_back(copy_to_mesh(to_host(p), Layout::replicated(one, 2), rt));
  const DTensor x1 = copy_to_mesh(to_host(x), Layout::replicated(one, 2), rt);
  const auto [v1, g1] = value_and_grad(
      [&](const std::vector<DTensor>& p) {
        return reduce_mean(tanh(matmul(tanh(matmul(tanh(matmul(x1, p[0])), p[1])), p[2])));
      },
      single);
  EXPECT_NEAR(values(value)[0], values(v1)[0], 1e-12);
  for (size_t i = 0; i < 3; ++i) {
    const std::vector<double> a = values(grads[i]), b = values(g1[i]);
    for (size_t j = 0; j < a.size(); ++j) EXPECT_NEAR(a[j], b[j], 1e-12) << i << "," << j;
  }
}

TEST(Optimizers, SgdWithMomentumAndAdamFollowTheirFormulas) {
  Runtime rt({.num_cpu_devices = 2});
  const Mesh mesh = Mesh::create({{"x", 2}});
  const Layout layout({"x"}, mesh);
  const auto make = [&](std::vector<double> v) {
    return copy_to_mesh(Tensor::from_vector<double>(v, Shape{2}), layout, rt);
  };
  std::vector<DTensor> p = {make({1, 2})};
  const std::vector<DTensor> g = {make({0.5, -1})};
  SGD sgd(0.1, 0.9);
  sgd.apply(p, g);  // v = -0.1 g; p = p + v
  sgd.apply(p, g);  // v = 0.9 v - 0.1 g
  EXPECT_NEAR(values(p[0])[0], 1 - 0.05 - (0.045 + 0.05), 1e-12);
  EXPECT_EQ(p[0].layout(), layout);

  std::vector<DTensor> q = {make({1, 2})};
  Adam adam(0.01);
  adam.apply(q, g);
  // t = 1: m = 0.1 g, v = 0.001 g^2, lr_t = 0.01 sqrt(0.001) / 0.1; step = lr_t m / (sqrt(v) + eps)
  const double lr_t = 0.01 * std::sqrt(1 - 0.999) / (1 - 0.9);
  const double m = 0.1 * 0.5, v = 0.001 * 0.25;
  EXPECT_NEAR(values(q[0])[0], 1 - lr_t * m / (std::sqrt(v) + 1e-7), 1e-12);
  EXPECT_EQ(adam.iterations(), 1);
  EXPECT_EQ(q[0].layout(), layout);
}

TEST(Optimizers, MismatchedGradientsAreErrors) {
  Runtime rt({.num_cpu_devices = 2});
  const Mesh mesh = Mesh::create({{"x", 2}});
  std::vector<DTensor> p = {copy_to_mesh(Tensor::zeros(Shape{2}, DType::kF32), Layout({"x"}, mesh), rt)};
  const DTensor other = copy_to_mesh(Tensor::zeros(Shape{2}, DType::kF32), Layout({"unsharded"}, mesh), rt);
  SGD sgd(0.1);
  EXPECT_TESSEL_ERROR(sgd.apply(p, {}), ErrorCode::kInvalidArgument, "1 parameters but 0 gradients");
  EXPECT_TESSEL_ERROR(sgd.apply(p, {other}), ErrorCode::kInvalidArgument, "parameter 0 is [2]");
  EXPECT_TESSEL_ERROR(Adam(0.1, 1.0), ErrorCode::kInvalidArgument, "beta_1");
}

// Kernels run on the first input's devices: an input of another Runtime (same device names) is
// refused, and so is a parameter list that moved to another runtime under an optimizer's state.
TEST(OpDispatch, InputsAndOptimizerStateOfTwoRuntimesAreRefused) {
  Runtime a_rt({.num_cpu_devices = 2});
  Runtime b_rt({.num_cpu_devices = 2});
  const Layout layout({"x"}, Mesh::create({{"x", 2}}));
  const DTensor a = copy_to_mesh(Tensor::full(Shape{4}, DType::kF32, 1.0), layout, a_rt);
  const DTensor b = copy_to_mesh(Tensor::full(Shape{4}, DType::kF32, 1.0), layout, b_rt);
  EXPECT_TESSEL_ERROR(add(a, b), ErrorCode::kInvalidArgument,
                      "add: inputs 0 and 1 belong to different runtimes");
  Adam adam(0.1);
  std::vector<DTensor> params = {a};
  adam.apply(params, {a});
  std::vector<DTensor> moved = {b};
  EXPECT_TESSEL_ERROR(adam.apply(moved, {b}), ErrorCode::kInvalidArgument,
                      "parameter 0 lives on another runtime than the optimizer's state");
  EXPECT_EQ(adam.iterations(), 1);
}

}  // namespace
}  // namespace tessel
