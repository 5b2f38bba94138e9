// The backward pass in two halves (GradientTape::backward_input / backward_weight, autodiff.h):
// together bit for bit gradient()'s values on every mesh, with layer norm, biases, dropout, a
// weight-only op and a weight gathered from a sharded copy (fsdp's) on the path; the input half
// runs no weight gradient of a matmul; what waits between the halves is kept, then let go; the
// errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/op_profile.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/relayout.h"
#include "testing/expect_error.h"
#include "testing/op_check.h"
#include "testing/tape_memory_checks.h"

namespace tessel {
namespace {

using testing::kept_bytes;
using testing::values;

struct MeshShape {
  int64_t batch, model;
};

// A stage of a model: two residual MLP blocks with layer norm (weight and bias), a bias, GELU and
// dropout. w[0] is stored sharded over `batch` and gathered before use (fsdp), w[1] is read
// through a weight-only op (a scale, like a cast to a compute dtype).
struct Stage {
  Mesh mesh;
  DTensor x;                  // the stage's input activation [B, C]
  std::vector<DTensor> w;     // ln weight, ln bias, w1 [C, 4C], b1 [4C], w2 [4C, C]
  DTensor output_gradient;    // what the next stage sends back

  DTensor forward() const {
    const DTensor ln_w = relayout(w[0], Layout::replicated(mesh, 1));  // the fsdp gather
    DTensor h = x;
    for (int block = 0; block < 2; ++block) {
      const DTensor n = layer_norm(h, ln_w, w[1], 1e-5);
      const DTensor up = add(matmul(n, multiply(w[2], 0.5)), w[3]);
      h = add(h, dropout(matmul(gelu(up), w[4]), 0.25, 7 + block));
    }
    return h;
  }
};

Stage make_stage(Runtime& rt, MeshShape shape) {
  std::vector<std::string> devices;
  for (int64_t i = 0; i < shape.batch * shape.model; ++i) {
    devices.push_back(rt.device(static_cast<int>(i)).name());
  }
  const Mesh mesh =
      Mesh::create_on_devices({{"batch", shape.batch}, {"model", shape.model}}, devices);
  const int64_t c = 8;
  const auto normal = [&](Shape s, Layout l, uint64_t seed, double stddev) {
    return random_normal(s, l, seed, 0, stddev, DType::kF32, &rt);
  };
  Stage st{mesh, normal(Shape{6, c}, Layout({"batch", "unsharded"}, mesh), 1, 1), {}, {}};
  st.w = {normal(Shape{c}, Layout({"batch"}, mesh), 2, 1),
          normal(Shape{c}, Layout::replicated(mesh, 1), 3, 0.1),
          normal(Shape{c, 4 * c}, Layout({"unsharded", "model"}, mesh), 4, 0.3),
          normal(Shape{4 * c}, Layout({"model"}, mesh), 5, 0.1),
          normal(Shape{4 * c, c}, Layout({"model", "unsharded"}, mesh), 6, 0.3)};
  st.output_gradient = normal(Shape{6, c}, Layout({"batch", "unsharded"}, mesh), 7, 1);
  return st;
}

GradientTape* recorded(GradientTape& tape, const Stage& st, DTensor& y) {
  tape.watch(st.x);
  for (const DTensor& w : st.w) tape.watch(w);
  y = st.forward();
  tape.stop_recording();
  return &tape;
}

class SplitBackward : public ::testing::TestWithParam<MeshShape> {};

TEST_P(SplitBackward, TheTwoHalvesGiveTheGradientsOfTheWholePassBitForBit) {
  Runtime rt({.num_cpu_devices = 4});
  const Stage st = make_stage(rt, GetParam());
  std::vector<DTensor> sources{st.x};
  sources.insert(sources.end(), st.w.begin(), st.w.end());
  DTensor y;
  GradientTape whole;
  const std::vector<DTensor> expected =
      recorded(whole, st, y)->gradient(y, sources, st.output_gradient);

  GradientTape split;
  recorded(split, st, y);
  const std::vector<DTensor> dx = split.backward_input(y, {st.x}, st.output_gradient);
  const std::vector<DTensor> dw = split.backward_weight(st.w);
  ASSERT_EQ(dx.size(), 1u);
  ASSERT_EQ(dw.size(), st.w.size());
  EXPECT_EQ(dx[0].layout(), expected[0].layout());
  EXPECT_EQ(values(dx[0]), values(expected[0]));
  for (size_t i = 0; i < dw.size(); ++i) {
    EXPECT_EQ(dw[i].layout(), expected[i + 1].layout()) << i;
    EXPECT_EQ(values(dw[i]), values(expected[i + 1])) << i;
  }
}

TEST_P(SplitBackward, AStageWithoutAnInputComputesEverythingInTheWeightHalf) {
  // The first pipeline stage: its input is data, nothing to send back.
  Runtime rt({.num_cpu_devices = 4});
  const Stage st = make_stage(rt, GetParam());
  DTensor y;
  const auto watch_weights = [&](GradientTape& tape) {
    for (const DTensor& w : st.w) tape.watch(w);
    y = st.forward();
    tape.stop_recording();
  };
  GradientTape whole;
  watch_weights(whole);
  const std::vector<DTensor> expected = whole.gradient(y, st.w, st.output_gradient);
  GradientTape split;
  watch_weights(split);
  start_op_profile();
  EXPECT_TRUE(split.backward_input(y, {}, st.output_gradient).empty());
  const OpProfile input_half = stop_op_profile();
  EXPECT_TRUE(input_half.rows.empty()) << input_half.table();
  const std::vector<DTensor> dw = split.backward_weight(st.w);
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_EQ(values(dw[i]), values(expected[i])) << i;
}

INSTANTIATE_TEST_SUITE_P(EveryMesh, SplitBackward,
                         ::testing::Values(MeshShape{1, 1}, MeshShape{2, 1}, MeshShape{1, 2},
                                           MeshShape{2, 2}),
                         [](const auto& info) {
                           return std::to_string(info.param.batch) + "x" +
                                  std::to_string(info.param.model);
                         });

int64_t calls_of(const OpProfile& profile, const std::string& op) {
  int64_t calls = 0;
  for (const OpProfileRow& row : profile.rows) {
    if (row.op == op) calls += row.calls;
  }
  return calls;
}

TEST(SplitBackwardWork, TheInputHalfLeavesEachMatmulsWeightGradientToTheWeightHalf) {
  Runtime rt({.num_cpu_devices = 1});
  const Stage st = make_stage(rt, {1, 1});
  DTensor y;
  GradientTape tape;
  recorded(tape, st, y);
  start_op_profile();
  tape.backward_input(y, {st.x}, st.output_gradient);
  const OpProfile input_half = stop_op_profile();
  start_op_profile();
  tape.backward_weight(st.w);
  const OpProfile weight_half = stop_op_profile();
  // Four matmuls: the input half computes their four input gradients, the weight half their
  // four weight gradients (each an einsum); layer norm's weight gradient waits too.
  EXPECT_EQ(calls_of(input_half, "einsum"), 4) << input_half.table();
  EXPECT_EQ(calls_of(weight_half, "einsum"), 4) << weight_half.table();
  EXPECT_EQ(calls_of(input_half, "layer_norm_weight_grad"), 0) << input_half.table();
  EXPECT_EQ(calls_of(weight_half, "layer_norm_weight_grad"), 2) << weight_half.table();
  EXPECT_EQ(calls_of(weight_half, "layer_norm_grad"), 0) << weight_half.table();
}

TEST(SplitBackwardWork, WhatTheWeightHalfReadsIsKeptBetweenTheHalvesThenLetGo) {
  Runtime rt({.num_cpu_devices = 1});
  const int64_t before = kept_bytes();
  {
    const Stage st = make_stage(rt, {1, 1});
    DTensor y;
    GradientTape tape;
    recorded(tape, st, y);
    const int64_t recorded_bytes = kept_bytes() - before;
    ASSERT_GT(recorded_bytes, 0);
    tape.backward_input(y, {st.x}, st.output_gradient);
    const int64_t between = kept_bytes() - before;
    EXPECT_GT(between, 0);                 // the matmuls' inputs, layer norm's statistics
    EXPECT_LT(between, recorded_bytes);    // GELU's and dropout's inputs are let go
    tape.backward_weight(st.w);
    EXPECT_EQ(kept_bytes(), before);
  }
  EXPECT_EQ(kept_bytes(), before);
}

TEST(SplitBackwardErrors, TheHalvesRunOnceInOrderOnANonPersistentTape) {
  Runtime rt({.num_cpu_devices = 1});
  const Stage st = make_stage(rt, {1, 1});
  DTensor y;
  {
    GradientTape tape;
    recorded(tape, st, y);
    EXPECT_TESSEL_ERROR(tape.backward_weight(st.w), ErrorCode::kFailedPrecondition,
                        "needs backward_input() on this tape first");
    tape.backward_input(y, {st.x}, st.output_gradient);
    EXPECT_TESSEL_ERROR(tape.backward_input(y, {st.x}, st.output_gradient),
                        ErrorCode::kFailedPrecondition, "half done");
    EXPECT_TESSEL_ERROR(tape.gradient(y, st.w), ErrorCode::kFailedPrecondition, "half done");
    tape.backward_weight(st.w);
    EXPECT_TESSEL_ERROR(tape.backward_weight(st.w), ErrorCode::kFailedPrecondition,
                        "needs backward_input() on this tape first");
    EXPECT_TESSEL_ERROR(tape.backward_input(y, {st.x}), ErrorCode::kFailedPrecondition,
                        "already called");
  }
  GradientTape persistent(/*persistent=*/true);
  recorded(persistent, st, y);
  EXPECT_TESSEL_ERROR(persistent.backward_input(y, {st.x}), ErrorCode::kFailedPrecondition,
                      "persistent tape");
  EXPECT_TESSEL_ERROR(GradientTape().backward_input(DTensor(), {}), ErrorCode::kInvalidArgument,
                      "null DTensor");
}

}  // namespace
}  // namespace tessel
