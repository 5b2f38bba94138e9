// Fully sharded parameters (GptConfig::fsdp, ZeRO-3; docs/memory.md): the parameters, gradients
// and AdamW's moments stored sharded over `batch`, the same losses as the replicated run on
// every mesh (uneven shards and sequence parallelism included), a gather whose gradient is
// reduce-scattered (not all-reduced), a quarter of the state per device on a 4-wide batch
// dimension, and what the gradient tape keeps with and without full recomputation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "char_dataset.h"
#include "gpt_memory.h"
#include "gpt_trainer.h"
#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/dtensor/relayout_plan.h"
#include "tessel/dtensor/tape_memory.h"
#include "testing/batch_model_mesh.h"

namespace tessel::gpt {
namespace {

const std::string kText = std::string(TESSEL_SOURCE_DIR) + "/data/shakespeare_char/input.txt";

using testing::batch_model_mesh;

GptConfig config(bool fsdp) {
  GptConfig c = GptConfig::preset("test");
  c.dropout = 0.1;  // the masks must not depend on the layouts
  c.fsdp = fsdp;
  return c;
}

// A config whose every parameter has an odd size on the axis fsdp shards (width 21, context
// 15): uneven blocks over a batch dimension of 2.
GptConfig uneven(bool fsdp) {
  GptConfig c = config(fsdp);
  c.n_layer = 1;
  c.n_head = 3;
  c.n_embd = 21;
  c.block_size = 15;
  return c;
}

struct TrainingRun {
  std::vector<double> losses, norms;
};

TrainingRun train(const GptConfig& c, const Mesh& mesh, Runtime& rt, const CharDataset& data,
                  int steps) {
  GptTrainer trainer(c, mesh, data, &rt);
  TrainingRun run;
  for (int s = 0; s < steps; ++s) {
    const StepReport r = trainer.step();
    run.losses.push_back(r.loss);
    run.norms.push_back(r.grad_norm);
  }
  return run;
}

void expect_relative(const std::vector<double>& got, const std::vector<double>& want,
                     double tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_LE(std::abs(got[i] - want[i]), tolerance * std::abs(want[i])) << what << " step " << i;
  }
}

class GptFsdp : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(GptFsdp, GivesThePlainRunsLossesAndClippingNorms) {
  Runtime rt({.num_cpu_devices = 4});
  const CharDataset data = CharDataset::load(kText);
  const auto [batch, model] = GetParam();
  const Mesh mesh = batch_model_mesh(batch, model, rt);
  const TrainingRun plain = train(config(false), mesh, rt, data, 20);
  const TrainingRun sharded = train(config(true), mesh, rt, data, 20);
  expect_relative(sharded.losses, plain.losses, 1e-6, "loss");
  // The global norm summed over shards: the same norm, so the same clipping (it clips: > 1).
  expect_relative(sharded.norms, plain.norms, 1e-6, "gradient norm");
  EXPECT_GT(*std::max_element(plain.norms.begin(), plain.norms.end()), config(false).grad_clip);
}

INSTANTIATE_TEST_SUITE_P(EveryMesh, GptFsdp,
                         ::testing::Values(std::pair{1, 1}, std::pair{2, 1}, std::pair{1, 2},
                                           std::pair{2, 2}),
                         [](const auto& info) {
                           return std::to_string(info.param.first) + "x" +
                                  std::to_string(info.param.second);
                         });

TEST(GptFsdp, CombinesWithSequenceParallelism) {
  Runtime rt({.num_cpu_devices = 4});
  const CharDataset data = CharDataset::load(kText);
  std::vector<std::vector<double>> losses;
  for (bool fsdp : {false, true}) {
    GptTrainer trainer(config(fsdp), batch_model_mesh(2, 2, rt), data, &rt,
                       /*sequence_parallel=*/true);
    losses.emplace_back();
    for (int s = 0; s < 10; ++s) losses.back().push_back(trainer.step().loss);
  }
  expect_relative(losses[1], losses[0], 1e-6, "loss");
}

TEST(GptFsdp, UnevenShardsWithoutPadding) {
  Runtime rt({.num_cpu_devices = 4});
  const CharDataset data = CharDataset::load(kText);
  const Mesh mesh = batch_model_mesh(2, 1, rt);
  GptTrainer trainer(uneven(true), mesh, data, &rt);
  // wpe [15, 21]: rows 8 and 7; a layer norm weight [21]: 11 and 10 (no padding).
  const DTensor& wpe = trainer.params()[trainer.model().index("wpe")];
  EXPECT_EQ(wpe.component(0).shape(), (Shape{8, 21}));
  EXPECT_EQ(wpe.component(1).shape(), (Shape{7, 21}));
  const DTensor& ln = trainer.params()[trainer.model().index("ln_f.weight")];
  EXPECT_EQ(ln.component(0).shape(), Shape{11});
  EXPECT_EQ(ln.component(1).shape(), Shape{10});
  const TrainingRun plain = train(uneven(false), mesh, rt, data, 20);
  const TrainingRun sharded = train(uneven(true), mesh, rt, data, 20);
  expect_relative(sharded.losses, plain.losses, 1e-6, "loss");
}

TEST(GptFsdp, StoresEveryParameterAndMomentShardedOverBatch) {
  Runtime rt({.num_cpu_devices = 4});
  const CharDataset data = CharDataset::load(kText);
  GptTrainer trainer(config(true), batch_model_mesh(2, 2, rt), data, &rt);
  trainer.step();
  const GptModel& model = trainer.model();
  ASSERT_TRUE(model.fsdp());
  for (size_t i = 0; i < model.names().size(); ++i) {
    const Layout& stored = model.layouts()[i];
    const Layout& compute = model.compute_layouts()[i];
    // The first axis the compute layout leaves unsharded is sharded over batch; the rest is the
    // tensor-parallel layout.
    int axis = 0;
    while (compute.sharding_specs()[static_cast<size_t>(axis)].is_sharded()) ++axis;
    std::vector<std::string> want = compute.sharding_spec_strings();
    want[static_cast<size_t>(axis)] = "batch";
    EXPECT_EQ(stored.sharding_spec_strings(), want) << model.names()[i];
    EXPECT_EQ(trainer.params()[i].layout(), stored) << model.names()[i];
    for (const auto& [slot, moments] : trainer.optimizer().slots()) {
      EXPECT_EQ(moments[i].layout(), stored) << slot << " of " << model.names()[i];
    }
  }
  // Without a batch dimension of size > 1, fsdp changes nothing.
  const GptModel one(config(true), batch_model_mesh(1, 2, rt), &rt);
  EXPECT_FALSE(one.fsdp());
  EXPECT_EQ(one.layouts(), one.compute_layouts());
}

// The gather of a parameter is a relayout the tape records; in the backward pass the weight's
// gradient (a Partial sum over batch) goes back to the shard by one reduce-scatter, not by an
// all-reduce and a slice.
TEST(GptFsdp, TheGathersGradientIsReduceScattered) {
  Runtime rt({.num_cpu_devices = 2});
  const Mesh mesh = batch_model_mesh(2, 1, rt);
  const Layout stored({"batch", "unsharded"}, mesh);
  const Layout compute({"unsharded", "unsharded"}, mesh);
  const DTensor w = random_normal(Shape{7, 6}, stored, 1, 0.0, 1.0, DType::kF32, &rt);
  const DTensor x = random_normal(Shape{4, 7}, Layout({"batch", "unsharded"}, mesh), 2, 0.0, 1.0,
                                  DType::kF32, &rt);
  GradientTape tape;
  tape.watch(w);
  const DTensor loss = reduce_sum(matmul(x, relayout(w, compute)));
  const RelayoutStats before = relayout_stats();
  const DTensor grad = tape.gradient(loss, {w}).at(0);
  const RelayoutStats after = relayout_stats();
  EXPECT_EQ(grad.layout(), stored);
  const RelayoutPlan plan =
      plan_relayout(w.shape(),
                    Layout::create(compute.type(), compute.sharding_specs(), mesh,
                                   std::vector<PartialDim>{PartialDim{"batch", ReduceOp::kSum}}),
                    stored);
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_EQ(plan.steps[0].kind, RelayoutStepKind::kReduceScatter);
  EXPECT_EQ(after.collectives - before.collectives, 1);
  EXPECT_EQ(after.bytes - before.bytes, plan.steps[0].bytes_total);
  // The gradient: x^T 1, reduced over the batch rows.
  const std::vector<double> xs = to_host(x).to_doubles(), gs = to_host(grad).to_doubles();
  for (int64_t k = 0; k < 7; ++k) {
    double want = 0;
    for (int64_t r = 0; r < 4; ++r) want += xs[static_cast<size_t>(r * 7 + k)];
    for (int64_t j = 0; j < 6; ++j) EXPECT_NEAR(gs[static_cast<size_t>(k * 6 + j)], want, 1e-5);
  }
}

// measure(trainer) of the replicated and then the fully sharded run on a batch x 1 mesh, each
// after a first step (AdamW's moments exist).
template <typename Measure>
auto plain_and_fsdp(Runtime& rt, int batch, const Measure& measure) {
  const CharDataset data = CharDataset::load(kText);
  std::vector<decltype(measure(std::declval<GptTrainer&>()))> out;
  for (bool fsdp : {false, true}) {
    GptTrainer trainer(config(fsdp), batch_model_mesh(batch, 1, rt), data, &rt);
    trainer.step();
    out.push_back(measure(trainer));
  }
  return out;
}

// In the whole GPT step too: an all-gather of each parameter in the forward pass and a
// reduce-scatter of its gradient move what the replicated run's all-reduce moves (an all-reduce
// and a slice would move half as much again), in one collective per parameter and direction;
// only the clipping norm's scalar is added.
TEST(GptFsdp, AStepMovesWhatTheReplicatedStepMoves) {
  Runtime rt({.num_cpu_devices = 2});
  const std::vector<RelayoutStats> moved = plain_and_fsdp(rt, 2, [](GptTrainer& trainer) {
    const RelayoutStats before = relayout_stats();
    trainer.step();
    const RelayoutStats after = relayout_stats();
    return RelayoutStats{after.collectives - before.collectives, after.bytes - before.bytes, 0};
  });
  const int64_t params =
      static_cast<int64_t>(GptModel(config(true), batch_model_mesh(2, 1, rt), &rt).names().size());
  // The one addition: the clipping norm's sum of squares, a Partial over batch of sharded
  // gradients, is all-reduced (one f32 over 2 devices: 4 bytes each).
  EXPECT_EQ(moved[1].bytes, moved[0].bytes + 2 * 4);
  // A block's eight parameters are gathered in one fused all-gather and their gradients
  // reduce-scattered in one fused collective; wte, wpe and ln_f are gathered one by one (each at
  // its use): per step 2 * (layers + 3) collectives for the parameters, one for the norm, where
  // one per parameter would be 2 * params + 1.
  const int64_t layers = config(true).n_layer;
  EXPECT_EQ(params, 8 * layers + 3);
  EXPECT_EQ(moved[1].collectives, 2 * (layers + 3) + 1);
}

// Parameters + gradients + AdamW's moments per device.
int64_t state_bytes(const GptTrainer& trainer) {
  int64_t most = 0;
  for (const DeviceMemory& d : memory_report(trainer)) {
    most = std::max(most, d.parameter_bytes + d.gradient_bytes + d.optimizer_bytes);
  }
  return most;
}

TEST(GptFsdp, HoldsAQuarterOfTheStatePerDeviceOnAFourWideBatch) {
  Runtime rt({.num_cpu_devices = 4});
  const std::vector<int64_t> bytes = plain_and_fsdp(rt, 4, state_bytes);
  // The test model: 65*32 + 16*32 + 2 * (12*32*32 + 2*32) + 32 floats, 4 copies, replicated.
  EXPECT_EQ(bytes[0], 4 * 4 * (65 * 32 + 16 * 32 + 2 * (12 * 32 * 32 + 2 * 32) + 32));
  EXPECT_EQ(bytes[1] * 4, bytes[0]);  // every size divides by 4 here
  EXPECT_LE(static_cast<double>(bytes[1]), 0.3 * static_cast<double>(bytes[0]));
}

// What the tape keeps (docs/memory.md): the gathered weights are read by the matmuls' VJPs, so
// without recomputation they stay until the backward pass (ZeRO-3 keeping the gathered
// parameters); with full recomputation each block keeps only its input and its shards, and
// gathers again in the backward pass.
TEST(GptFsdp, FullRecomputationDropsTheGatheredWeightsAfterEachBlock) {
  Runtime rt({.num_cpu_devices = 4});
  const CharDataset data = CharDataset::load(kText);
  const Mesh mesh = batch_model_mesh(2, 1, rt);
  const auto tape_peak = [&](bool fsdp, Recompute recompute, std::vector<double>& losses) {
    GptConfig c = config(fsdp);
    c.n_layer = 3;
    c.recompute = recompute;
    GptTrainer trainer(c, mesh, data, &rt);
    losses.push_back(trainer.step().loss);
    reset_memory_peaks(trainer);
    losses.push_back(trainer.step().loss);
    int64_t most = 0;
    for (const DeviceMemory& d : memory_report(trainer)) most = std::max(most, d.saved_bytes);
    return most;
  };
  std::vector<double> plain_losses, fsdp_losses, full_losses;
  const int64_t plain = tape_peak(false, Recompute::kNone, plain_losses);
  const int64_t kept = tape_peak(true, Recompute::kNone, fsdp_losses);
  const int64_t full = tape_peak(true, Recompute::kFull, full_losses);
  // The gathered copies of the block weights (12 C^2 + 2 C floats a layer, watched parameters
  // in the plain run, so not counted there) are what fsdp adds to the tape without
  // recomputation.
  const int64_t c = 32, layer_weights = 4 * (12 * c * c + 2 * c);
  EXPECT_GE(kept - plain, 3 * layer_weights);
  EXPECT_LT(full, kept - 2 * layer_weights);
  expect_relative(fsdp_losses, plain_losses, 1e-6, "fsdp");
  expect_relative(full_losses, fsdp_losses, 0, "fsdp with full recomputation");
}

}  // namespace
}  // namespace tessel::gpt
