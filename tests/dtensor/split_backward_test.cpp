// The backward pass in two halves (GradientTape::backward_input / backward_weight, autodiff.h):
// together bit for bit gradient()'s values on every mesh, with layer norm, biases, dropout, a
// weight-only op and a weight gathered from a sharded copy (fsdp's) on the path; the input half
// runs no weight gradient of a matmul; what waits between the halves is kept and counted, then
// let go; a weight's terms summed in gradient()'s order; no op recorded between the halves; the
// errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/op_profile.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/relayout.h"
#include "testing/batch_model_mesh.h"
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
  const Mesh mesh = testing::batch_model_mesh(shape.batch, shape.model, rt);
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

// The op profiles of a stage's two halves on a mesh of `shape`, each with its kernels done.
struct HalvesProfiled {
  OpProfile input_half, weight_half;
};

HalvesProfiled profile_halves(MeshShape shape) {
  Runtime rt({.num_cpu_devices = static_cast<int>(shape.batch * shape.model)});
  const Stage st = make_stage(rt, shape);
  DTensor y;
  GradientTape tape;
  recorded(tape, st, y);
  HalvesProfiled out;
  start_op_profile();
  to_host(tape.backward_input(y, {st.x}, st.output_gradient).at(0));
  out.input_half = stop_op_profile();
  start_op_profile();
  for (const DTensor& g : tape.backward_weight(st.w)) to_host(g);
  out.weight_half = stop_op_profile();
  return out;
}

TEST(SplitBackwardWork, TheInputHalfLeavesEachMatmulsWeightGradientToTheWeightHalf) {
  const auto [input_half, weight_half] = profile_halves({1, 1});
  // Four matmuls: the input half computes their four input gradients, the weight half their
  // four weight gradients (each an einsum); layer norm's weight gradient waits too.
  EXPECT_EQ(calls_of(input_half, "einsum"), 4) << input_half.table();
  EXPECT_EQ(calls_of(weight_half, "einsum"), 4) << weight_half.table();
  EXPECT_EQ(calls_of(input_half, "layer_norm_weight_grad"), 0) << input_half.table();
  EXPECT_EQ(calls_of(weight_half, "layer_norm_weight_grad"), 2) << weight_half.table();
  EXPECT_EQ(calls_of(weight_half, "layer_norm_grad"), 0) << weight_half.table();
}

// Under tensor parallelism layer norm's output gradient is Partial over `model` (from the
// column-parallel matmul's backward); its VJP reduces it once in the input half and hands the
// reduced gradient to the weight half (VjpArgs::grad_as_used), which then runs no collective:
// the matmuls' weight gradients are local, and the batch dimension has one device.
TEST(SplitBackwardWork, TheWeightHalfDoesNotReduceLayerNormsGradientAgain) {
  const auto [input_half, weight_half] = profile_halves({1, 2});
  EXPECT_FALSE(input_half.collective_rows.empty()) << input_half.table();
  EXPECT_GT(calls_of(weight_half, "layer_norm_weight_grad"), 0) << weight_half.table();
  EXPECT_TRUE(weight_half.collective_rows.empty()) << weight_half.table();
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
    // The waiting records' inputs and layer norm's statistics, and the output gradients their
    // weight gradients are computed from, all counted.
    const int64_t between = kept_bytes() - before;
    EXPECT_GT(between, 0);
    tape.backward_weight(st.w);
    EXPECT_EQ(kept_bytes(), before);
  }
  EXPECT_EQ(kept_bytes(), before);
}

// A weight read by an elementwise op (whose VJP gives its gradient in the input half, kept
// aside) and by two matmuls (whose weight gradients wait): its three terms are summed in
// gradient()'s order, so the sum is bit for bit gradient()'s.
TEST(SplitBackwardWork, AWeightsTermsAreSummedInTheWholePasssOrder) {
  Runtime rt({.num_cpu_devices = 1});
  const Mesh mesh = Mesh::create({{"x", 1}});
  const auto normal = [&](uint64_t seed) {
    return random_normal(Shape{4, 4}, Layout::replicated(mesh, 2), seed, 0, 1, DType::kF64, &rt);
  };
  const DTensor x = normal(1), w = normal(2);
  const auto record = [&](GradientTape& tape) {
    tape.watch(x);
    tape.watch(w);
    const DTensor y = add(add(multiply(x, w), matmul(x, w)), matmul(tanh(x), w));
    tape.stop_recording();
    return y;
  };
  GradientTape whole;
  const DTensor y0 = record(whole);
  const std::vector<DTensor> expected = whole.gradient(y0, {x, w});
  GradientTape split;
  const DTensor y1 = record(split);
  EXPECT_EQ(values(split.backward_input(y1, {x})[0]), values(expected[0]));
  EXPECT_EQ(values(split.backward_weight({w})[0]), values(expected[1]));
}

// Ops run between the halves on a tape still recording are not recorded (each record has its
// plan): the weight half gives the values it would have given.
TEST(SplitBackwardWork, OpsBetweenTheHalvesAreNotRecorded) {
  Runtime rt({.num_cpu_devices = 4});
  const Stage st = make_stage(rt, {2, 2});
  GradientTape whole;
  DTensor y;
  std::vector<DTensor> sources{st.x};
  sources.insert(sources.end(), st.w.begin(), st.w.end());
  const std::vector<DTensor> expected =
      recorded(whole, st, y)->gradient(y, sources, st.output_gradient);
  GradientTape tape;
  tape.watch(st.x);
  for (const DTensor& w : st.w) tape.watch(w);
  y = st.forward();
  tape.backward_input(y, {st.x}, st.output_gradient);
  for (int i = 0; i < 3; ++i) y = st.forward();  // the next microbatch's forward, say
  const std::vector<DTensor> dw = tape.backward_weight(st.w);
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_EQ(values(dw[i]), values(expected[i + 1])) << i;
}

// A watched tensor that is also computed on the tape, reached through a relayout: the relaid
// gradient is added before the record that computed it reads it, so the gradients upstream of
// it are kept (the whole pass and the weight half alike).
TEST(SplitBackwardWork, AWatchedIntermediateReachedThroughARelayoutPassesItsGradientOn) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create_on_devices(
      {{"x", 2}, {"y", 2}}, {rt.device(0).name(), rt.device(1).name(), rt.device(2).name(),
                              rt.device(3).name()});
  const Tensor xs = Tensor::from_vector<double>({0.1, -0.5, 0.3, 0.9, -0.2, 0.7, 0.4, -0.8},
                                                Shape{2, 4});
  const Tensor ws = Tensor::from_vector<double>({0.6, 0.2, -0.4, 0.5, -0.9, 0.1, 0.8, -0.3},
                                                Shape{2, 4});
  const DTensor x = copy_to_mesh(xs, Layout({"x", "unsharded"}, mesh), rt);
  const DTensor w = copy_to_mesh(ws, Layout::replicated(mesh, 2), rt);
  for (bool split : {false, true}) {
    GradientTape tape;
    tape.watch(w);
    const DTensor h = tanh(multiply(x, w));
    tape.watch(h);
    const DTensor loss = reduce_sum(relayout(h, Layout({"unsharded", "x"}, mesh)));
    tape.stop_recording();
    // h among the sources: its gradient is relaid out with the deferred (batched) ones.
    const DTensor gw = split ? (tape.backward_input(loss, {}), tape.backward_weight({w, h})[0])
                             : tape.gradient(loss, {w, h})[0];
    const std::vector<double> got = values(gw);
    for (size_t i = 0; i < got.size(); ++i) {
      const double xi = xs.to_doubles()[i], t = std::tanh(xi * ws.to_doubles()[i]);
      EXPECT_NEAR(got[i], xi * (1 - t * t), 1e-12) << (split ? "split " : "whole ") << i;
    }
  }
}

// An input made on the tape from a weight (watched itself): the input half returns its
// gradient, and the weight half walks on through the op that made it to that weight.
TEST(SplitBackwardWork, AnInputMadeFromAWeightOnTheTapePassesItsGradientToTheWeight) {
  Runtime rt({.num_cpu_devices = 1});
  const Mesh mesh = Mesh::create({{"x", 1}});
  const auto normal = [&](uint64_t seed) {
    return random_normal(Shape{4, 4}, Layout::replicated(mesh, 2), seed, 0, 1, DType::kF64, &rt);
  };
  const DTensor x0 = normal(1), w0 = normal(2), w1 = normal(3);
  const auto record = [&](GradientTape& tape, DTensor& x) {
    tape.watch(w0);
    tape.watch(w1);
    x = tanh(multiply(x0, w0));
    tape.watch(x);
    const DTensor y = matmul(x, w1);
    tape.stop_recording();
    return y;
  };
  DTensor x;
  GradientTape whole;
  const DTensor y0 = record(whole, x);
  const std::vector<DTensor> expected = whole.gradient(y0, {x, w0, w1});
  GradientTape split;
  const DTensor y1 = record(split, x);
  EXPECT_EQ(values(split.backward_input(y1, {x})[0]), values(expected[0]));
  const std::vector<DTensor> dw = split.backward_weight({w0, w1});
  EXPECT_EQ(values(dw[0]), values(expected[1]));
  EXPECT_EQ(values(dw[1]), values(expected[2]));
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
    EXPECT_TESSEL_ERROR(tape.backward_weight({st.w[0], st.x}), ErrorCode::kInvalidArgument,
                        "was an input of backward_input()");
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
