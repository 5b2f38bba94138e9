// recompute_grad (recompute_grad.h): bit for bit the gradients of the function itself on every
// mesh, with dropout and layer norm inside; only the inputs kept; the errors.
#include <gtest/gtest.h>

#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/recompute_grad.h"
#include "testing/expect_error.h"
#include "testing/op_check.h"
#include "testing/tape_memory_checks.h"

namespace tessel {
namespace {

using testing::kept_bytes;
using testing::values;

// A residual MLP block with layer norm and dropout: {x [B, C], ln, w1 [C, 4C], w2 [4C, C]}.
DTensor mlp_block(const std::vector<DTensor>& in) {
  const DTensor h = layer_norm(in[0], in[1], DTensor(), 1e-5);
  const DTensor m = matmul(gelu(matmul(h, in[2])), in[3]);
  return add(in[0], dropout(m, 0.25, 99));
}

struct MeshShape {
  int64_t batch, model;
};

class RecomputeGrad : public ::testing::TestWithParam<MeshShape> {};

TEST_P(RecomputeGrad, GivesTheLossAndGradientsOfThePlainRunBitForBit) {
  const MeshShape shape = GetParam();
  Runtime rt({.num_cpu_devices = 4});
  std::vector<std::string> devices;
  for (int64_t i = 0; i < shape.batch * shape.model; ++i) {
    devices.push_back(rt.device(static_cast<int>(i)).name());
  }
  const Mesh mesh =
      Mesh::create_on_devices({{"batch", shape.batch}, {"model", shape.model}}, devices);
  const int64_t c = 8;
  const DTensor x =
      random_normal(Shape{6, c}, Layout({"batch", "unsharded"}, mesh), 1, 0, 1, DType::kF32, &rt);
  const std::vector<DTensor> params = {
      ones(Shape{c}, Layout::replicated(mesh, 1), DType::kF32, &rt),
      random_normal(Shape{c, 4 * c}, Layout({"unsharded", "model"}, mesh), 2, 0, 0.3, DType::kF32,
                    &rt),
      random_normal(Shape{4 * c, c}, Layout({"model", "unsharded"}, mesh), 3, 0, 0.3, DType::kF32,
                    &rt)};
  // Two blocks; in the recomputed run the second is nested inside the recomputation of a
  // function that calls the first.
  const auto loss_of = [&](bool recompute) {
    return value_and_grad(
        [&](const std::vector<DTensor>& p) {
          const auto two_blocks = [&](const std::vector<DTensor>& in) {
            const DTensor y = mlp_block(in);
            const std::vector<DTensor> next{y, in[1], in[2], in[3]};
            return recompute ? recompute_grad(mlp_block)(next) : mlp_block(next);
          };
          const std::vector<DTensor> in{x, p[0], p[1], p[2]};
          const DTensor out = recompute ? recompute_grad(two_blocks)(in) : two_blocks(in);
          return reduce_mean(multiply(out, out));
        },
        params);
  };
  const auto [plain_loss, plain_grads] = loss_of(false);
  const auto [loss, grads] = loss_of(true);
  EXPECT_EQ(values(loss), values(plain_loss));
  for (size_t i = 0; i < grads.size(); ++i) {
    EXPECT_EQ(grads[i].layout(), plain_grads[i].layout()) << i;
    EXPECT_EQ(values(grads[i]), values(plain_grads[i])) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(EveryMesh, RecomputeGrad,
                         ::testing::Values(MeshShape{1, 1}, MeshShape{2, 1}, MeshShape{1, 2},
                                           MeshShape{2, 2}),
                         [](const auto& info) {
                           return std::to_string(info.param.batch) + "x" +
                                  std::to_string(info.param.model);
                         });

class RecomputeGradOnOneDevice : public testing::OneDeviceTest {};

TEST_F(RecomputeGradOnOneDevice, TheTapeKeepsOnlyTheInputs) {
  const DTensor x = random(Shape{32, 16}, 1), w = random(Shape{16, 16}, 2);
  const int64_t start = kept_bytes();
  GradientTape tape;
  tape.watch(w);
  const DTensor h = multiply(x, reduce_mean(w));  // depends on w, not a source: it is kept
  const int64_t before = kept_bytes();
  const DTensor y = recompute_grad([](const std::vector<DTensor>& in) {
    DTensor t = in[0];
    for (int i = 0; i < 4; ++i) t = tanh(matmul(t, in[1]));  // each tanh would keep 4 KiB
    return t;
  })({h, w});
  EXPECT_EQ(kept_bytes() - before, h.nbytes());
  const std::vector<DTensor> g = tape.gradient(reduce_sum(y), {w});
  EXPECT_EQ(kept_bytes(), start);
  EXPECT_TRUE(g[0].defined());
}

TEST_F(RecomputeGradOnOneDevice, APersistentTapeRecomputesForEachGradient) {
  const DTensor x = random(Shape{4, 4}, 3);
  int calls = 0;
  const DTensorFunction f = recompute_grad([&calls](const std::vector<DTensor>& in) {
    ++calls;
    return exp(in[0]);
  });
  GradientTape tape(/*persistent=*/true);
  tape.watch(x);
  const DTensor y = reduce_sum(f({x}));
  const std::vector<double> first = values(tape.gradient(y, {x})[0]);
  EXPECT_EQ(values(tape.gradient(y, {x})[0]), first);
  EXPECT_EQ(first, values(exp(x)));
  EXPECT_EQ(calls, 3);  // the forward pass and one recomputation per gradient
}

TEST_F(RecomputeGradOnOneDevice, WithoutATapeItOnlyCallsTheFunction) {
  const DTensor x = random(Shape{3}, 4);
  int calls = 0;
  const DTensor y = recompute_grad([&calls](const std::vector<DTensor>& in) {
    ++calls;
    return negative(in[0]);
  })({x});
  EXPECT_EQ(values(y), values(negative(x)));
  EXPECT_EQ(calls, 1);
}

TEST_F(RecomputeGradOnOneDevice, AWatchedTensorTheFunctionCapturesIsAnError) {
  const DTensor x = random(Shape{3}, 5), w = random(Shape{3}, 6);
  GradientTape tape;
  tape.watch(w);
  const DTensorFunction f = recompute_grad([&w](const std::vector<DTensor>& in) {
    return multiply(in[0], w);  // w's gradient would be lost
  });
  EXPECT_TESSEL_ERROR(f({x}), ErrorCode::kInvalidArgument,
                      "recompute_grad: the function reads DTensor #" + std::to_string(w.id()));
  // A captured constant is fine.
  const DTensorFunction g =
      recompute_grad([&x](const std::vector<DTensor>& in) { return multiply(in[0], x); });
  const DTensor y = reduce_sum(g({w}));
  EXPECT_EQ(values(tape.gradient(y, {w})[0]), values(x));
}

TEST_F(RecomputeGradOnOneDevice, BadFunctionsAreErrors) {
  EXPECT_TESSEL_ERROR(recompute_grad(nullptr), ErrorCode::kInvalidArgument, "null one");
  const DTensorFunction null_out =
      recompute_grad([](const std::vector<DTensor>&) { return DTensor(); });
  EXPECT_TESSEL_ERROR(null_out({random(Shape{2}, 7)}), ErrorCode::kInvalidArgument,
                      "returned a null DTensor");
  const DTensorFunction id = recompute_grad([](const std::vector<DTensor>& in) { return in[0]; });
  EXPECT_TESSEL_ERROR(id({DTensor()}), ErrorCode::kInvalidArgument, "input 0 is a null DTensor");
}

}  // namespace
}  // namespace tessel
