// The GPT example (examples/gpt): against the float64 JAX reference on every mesh shape (logits,
// loss, every gradient, 10 AdamW steps), sequence parallelism, recomputation (bit for bit the
// plain run's losses and gradients, less kept for the backward pass), the memory report, the
// data pipeline's determinism, and training that lowers the loss.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "char_dataset.h"
#include "gpt_memory.h"
#include "gpt_model.h"
#include "gpt_reference.h"
#include "gpt_trainer.h"
#include "tessel/core/error.h"
#include "testing/batch_model_mesh.h"
#include "testing/expect_error.h"
#include "testing/scoped_env.h"
#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/tape_memory.h"

namespace tessel::gpt {
namespace {

const std::string kReference =
    std::string(TESSEL_SOURCE_DIR) + "/examples/gpt/reference/gpt_small_reference.safetensors";
const std::string kText = std::string(TESSEL_SOURCE_DIR) + "/data/shakespeare_char/input.txt";

using testing::batch_model_mesh;

// (batch, model) mesh shapes, named "BxM" in the tests' names.
const std::vector<std::pair<int, int>> kMeshShapes{{1, 1}, {2, 1}, {1, 2}, {2, 2}};
std::string mesh_name(const ::testing::TestParamInfo<std::pair<int, int>>& info) {
  return std::to_string(info.param.first) + "x" + std::to_string(info.param.second);
}

class GptReference : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(GptReference, MatchesTheJaxReferenceInF32) {
  Runtime rt({.num_cpu_devices = 4});
  const auto [b, m] = GetParam();
  const ReferenceErrors e = check_reference(kReference, batch_model_mesh(b, m, rt), DType::kF32, &rt);
  EXPECT_TRUE(e.passes()) << b << "x" << m << ": " << e.to_string();
}

TEST_P(GptReference, MatchesTheJaxReferenceInF64) {
  Runtime rt({.num_cpu_devices = 4});
  const auto [b, m] = GetParam();
  const ReferenceErrors e = check_reference(kReference, batch_model_mesh(b, m, rt), DType::kF64, &rt);
  // The step losses differ by ~2e-9: the reference clips as PyTorch does (max_norm / (norm + 1e-6)),
  // tessel as TF does (clip_norm / max(norm, clip_norm)).
  EXPECT_TRUE(e.passes(1e-10, 1e-8)) << b << "x" << m << ": " << e.to_string();
}

INSTANTIATE_TEST_SUITE_P(EveryMesh, GptReference, ::testing::ValuesIn(kMeshShapes), mesh_name);

// The loss and gradients of one training-mode step (dropout on) of the `test` model with
// `recompute` and `attention`, as host values.
std::vector<std::vector<double>> step_values(const Mesh& mesh, Runtime& rt, Recompute recompute,
                                             Attention attention = Attention::kFused) {
  GptConfig c = GptConfig::preset("test");
  c.dropout = 0.1;
  c.recompute = recompute;
  c.attention = attention;
  const GptModel model(c, mesh, &rt);
  const std::vector<DTensor> params = model.init(3);
  auto [x, y] = CharDataset::load(kText).batch(Split::kTrain, 0, c.batch_size, c.block_size, 5);
  const ForwardOptions training{.training = true, .dropout_seed = 11};
  auto [loss, grads] = value_and_grad(
      [&](const std::vector<DTensor>& p) {
        return model.loss(p, model.tokens(x), model.tokens(y), training);
      },
      params);
  std::vector<std::vector<double>> out{to_host(loss).to_doubles()};
  for (const DTensor& g : grads) out.push_back(host_value(g).to_doubles());
  return out;
}

class GptRecompute : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(GptRecompute, GivesTheLossAndGradientsOfThePlainRunBitForBit) {
  Runtime rt({.num_cpu_devices = 4});
  const auto [b, m] = GetParam();
  const Mesh mesh = batch_model_mesh(b, m, rt);
  const std::vector<std::vector<double>> plain = step_values(mesh, rt, Recompute::kNone);
  EXPECT_EQ(step_values(mesh, rt, Recompute::kSelective), plain) << "selective";
  EXPECT_EQ(step_values(mesh, rt, Recompute::kFull), plain) << "full";
  const std::vector<std::vector<double>> composed =
      step_values(mesh, rt, Recompute::kNone, Attention::kComposed);
  EXPECT_EQ(step_values(mesh, rt, Recompute::kSelective, Attention::kComposed), composed);
  // The fused attention against the composed ops (the same dropout mask): float rounding apart.
  ASSERT_EQ(composed.size(), plain.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    for (size_t j = 0; j < plain[i].size(); ++j) {
      ASSERT_NEAR(plain[i][j], composed[i][j], 1e-5 * (1 + std::abs(composed[i][j])))
          << "value " << i << " element " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryMesh, GptRecompute, ::testing::ValuesIn(kMeshShapes), mesh_name);

TEST(Gpt, RecomputationKeepsLessForTheBackwardPass) {
  Runtime rt({.num_cpu_devices = 1});
  const Mesh mesh = batch_model_mesh(1, 1, rt);
  std::vector<int64_t> kept;
  // With the composed attention, whose [B, H, T, T] maps selective recomputation drops.
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    reset_tape_memory_peak();
    step_values(mesh, rt, r, Attention::kComposed);
    int64_t peak = 0;
    for (const TapeMemoryStats& s : tape_memory_stats()) {
      if (s.device == rt.device(0).name()) peak = s.peak_bytes;
    }
    kept.push_back(peak);
  }
  // test: 2 layers, batch 4, 4 heads, context 16: the attention maps are 4 KiB each.
  EXPECT_LT(kept[1], kept[0]);
  EXPECT_LT(kept[2], kept[1]);
  EXPECT_GT(kept[2], 0);
}

// The most the tape keeps in a training step of the `test` model with `layers` layers on 1x1.
int64_t tape_peak(int layers, Recompute recompute, Attention attention = Attention::kComposed) {
  Runtime rt({.num_cpu_devices = 1});
  const Mesh mesh = batch_model_mesh(1, 1, rt);
  GptConfig c = GptConfig::preset("test");
  c.n_layer = layers;
  c.dropout = 0.1;
  c.recompute = recompute;
  c.attention = attention;
  const GptModel model(c, mesh, &rt);
  auto [x, y] = CharDataset::load(kText).batch(Split::kTrain, 0, c.batch_size, c.block_size, 5);
  reset_tape_memory_peak();
  value_and_grad(
      [&](const std::vector<DTensor>& p) {
        return model.loss(p, model.tokens(x), model.tokens(y), {.training = true});
      },
      model.init(3));
  for (const TapeMemoryStats& s : tape_memory_stats()) {
    if (s.device == rt.device(0).name()) return s.peak_bytes;
  }
  return 0;
}

TEST(Gpt, EachLayerKeepsExactlyWhatItsBackwardPassReads) {
  // test: batch 4, context 16, width 32, 4 heads; f32 activations, f64 layer norm statistics.
  const int64_t btc = 4 * 16 * 32 * 4, maps = 4 * 4 * 16 * 16 * 4, stats = 4 * 16 * 2 * 8;
  // A layer: its input, the two norms' outputs, q, k, v, the attention output, the residual,
  // the MLP's two [B, T, 4C] activations (16 [B, T, C] in all), the two norms' statistics, and
  // the attention probabilities with their dropped-out copy (the scores are not kept).
  EXPECT_EQ(tape_peak(3, Recompute::kNone) - tape_peak(2, Recompute::kNone),
            16 * btc + 2 * stats + 2 * maps);
  // Selective recomputation keeps no [B, H, T, T] map; full keeps the block's input only.
  EXPECT_EQ(tape_peak(3, Recompute::kSelective) - tape_peak(2, Recompute::kSelective),
            16 * btc + 2 * stats);
  EXPECT_EQ(tape_peak(3, Recompute::kFull) - tape_peak(2, Recompute::kFull), btc);
  // The fused attention keeps no map, and nothing else new: q, k, v and its output are views
  // of the projections' outputs and of the output projection's input, kept already.
  const auto fused = [](int layers, Recompute r) { return tape_peak(layers, r, Attention::kFused); };
  EXPECT_EQ(fused(3, Recompute::kNone) - fused(2, Recompute::kNone), 16 * btc + 2 * stats);
  EXPECT_EQ(fused(3, Recompute::kSelective), fused(3, Recompute::kNone));  // nothing to recompute
  EXPECT_EQ(fused(3, Recompute::kFull) - fused(2, Recompute::kFull), btc);
}

TEST(Gpt, TrainingWithRecomputationFollowsThePlainRun) {
  Runtime rt({.num_cpu_devices = 4});
  GptConfig c = GptConfig::preset("test");
  c.dropout = 0.1;
  c.eval_iters = 1;
  const CharDataset data = CharDataset::load(kText);
  std::vector<std::vector<double>> losses;
  for (Recompute r : {Recompute::kNone, Recompute::kFull}) {
    c.recompute = r;
    GptTrainer trainer(c, batch_model_mesh(2, 2, rt), data, &rt);
    losses.emplace_back();
    for (int s = 0; s < 3; ++s) losses.back().push_back(trainer.step().loss);
    const std::vector<DeviceMemory> memory = memory_report(trainer);
    ASSERT_EQ(memory.size(), 4u);
    for (const DeviceMemory& d : memory) {
      EXPECT_GT(d.parameter_bytes, 0);
      EXPECT_EQ(d.gradient_bytes, d.parameter_bytes);
      EXPECT_EQ(d.optimizer_bytes, 2 * d.parameter_bytes);
      EXPECT_EQ(d.activation_bytes,
                d.peak_bytes - d.parameter_bytes - d.gradient_bytes - d.optimizer_bytes);
      EXPECT_GT(d.saved_bytes, 0);
    }
  }
  EXPECT_EQ(losses[1], losses[0]);
}

TEST(Gpt, KorthikantisCountFollowsTheFormula) {
  const GptConfig baby = GptConfig::preset("baby");
  // 6 layers * 2 bytes * s b h (34 + 5 a s / h), s = 256, b = 64, h = 384, a = 6.
  EXPECT_DOUBLE_EQ(korthikanti_activation_bytes(baby, 1, 1, false),
                   6.0 * 2 * 256 * 64 * 384 * (34 + 5.0 * 6 * 256 / 384));
  // Tensor parallel over 2: 10 + 24/2 + (5 a s / h)/2; data parallel over 2: half the batch.
  EXPECT_DOUBLE_EQ(korthikanti_activation_bytes(baby, 2, 2, false),
                   6.0 * 2 * 256 * 32 * 384 * (10 + 12 + 5.0 * 6 * 256 / 384 / 2));
  EXPECT_DOUBLE_EQ(korthikanti_activation_bytes(baby, 1, 2, true),
                   korthikanti_activation_bytes(baby, 1, 1, false) / 2);
  EXPECT_EQ(parse_recompute("selective"), Recompute::kSelective);
  EXPECT_THROW(parse_recompute("some"), Error);
  EXPECT_EQ(parse_attention("composed"), Attention::kComposed);
  EXPECT_EQ(attention_name(parse_attention("fused")), "fused");
  EXPECT_THROW(parse_attention("flash"), Error);
  // GPU devices take the composed ops unless causal_attention has a GPU kernel and
  // TESSEL_GPU_FUSED_ATTENTION=1 opts in to it.
  EXPECT_EQ(attention_on(Attention::kFused, "CPU"), Attention::kFused);
  EXPECT_EQ(attention_on(Attention::kComposed, "CPU"), Attention::kComposed);
  {
    testing::ScopedEnv env("TESSEL_GPU_FUSED_ATTENTION", std::nullopt);
    EXPECT_EQ(attention_on(Attention::kFused, "GPU"), Attention::kComposed);
  }
  {
    testing::ScopedEnv env("TESSEL_GPU_FUSED_ATTENTION", "1");
    EXPECT_EQ(attention_on(Attention::kFused, "GPU"),
              has_gpu_kernel("causal_attention") ? Attention::kFused : Attention::kComposed);
    EXPECT_EQ(attention_on(Attention::kFused, "CPU"), Attention::kFused);
  }
  testing::ScopedEnv env("TESSEL_GPU_FUSED_ATTENTION", "yes");
  EXPECT_TESSEL_ERROR(attention_on(Attention::kFused, "GPU"), ErrorCode::kInvalidArgument,
                      "TESSEL_GPU_FUSED_ATTENTION='yes' is not 0 or 1");
}

TEST(Gpt, SequenceParallelGivesTheSameLossAndGradients) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = batch_model_mesh(2, 2, rt);
  GptConfig c = GptConfig::preset("test");
  GptModel plain(c, mesh, &rt), sp(c, mesh, &rt, /*sequence_parallel=*/true);
  const std::vector<DTensor> params = plain.init(3);
  const CharDataset data = CharDataset::load(kText);
  auto [x, y] = data.batch(Split::kTrain, 0, c.batch_size, c.block_size, 5);
  const auto run = [&](const GptModel& model) {
    return value_and_grad(
        [&](const std::vector<DTensor>& p) { return model.loss(p, model.tokens(x), model.tokens(y)); },
        params);
  };
  auto [l1, g1] = run(plain);
  auto [l2, g2] = run(sp);
  EXPECT_NEAR(to_host(l1).to_doubles()[0], to_host(l2).to_doubles()[0], 1e-5);
  for (size_t i = 0; i < g1.size(); ++i) {
    const std::vector<double> a = to_host(g1[i]).to_doubles(), b = to_host(g2[i]).to_doubles();
    double diff = 0, scale = 0;
    for (size_t k = 0; k < a.size(); ++k) {
      diff = std::max(diff, std::abs(a[k] - b[k]));
      scale = std::max(scale, std::abs(a[k]));
    }
    EXPECT_LE(diff, 1e-5 * scale) << plain.names()[i];
  }
}

TEST(Gpt, InitialisationIsTheSameOnEveryMesh) {
  Runtime rt({.num_cpu_devices = 4});
  const GptConfig c = GptConfig::preset("test");
  const std::vector<DTensor> a = GptModel(c, batch_model_mesh(1, 1, rt), &rt).init(9);
  const std::vector<DTensor> b = GptModel(c, batch_model_mesh(2, 2, rt), &rt).init(9);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(to_host(a[i]).to_doubles(), to_host(b[i]).to_doubles()) << i;
}

TEST(Gpt, DatasetFollowsNanoGpt) {
  const CharDataset data = CharDataset::load(kText);
  EXPECT_EQ(data.vocab_size(), 65);
  EXPECT_EQ(data.size(Split::kTrain), 1003854);
  EXPECT_EQ(data.size(Split::kVal), 111540);
  EXPECT_EQ(data.decode(data.encode("First Citizen:")), "First Citizen:");
  auto [x1, y1] = data.batch(Split::kTrain, 7, 3, 8, 1);
  auto [x2, y2] = data.batch(Split::kTrain, 7, 3, 8, 1);
  EXPECT_EQ(x1.to_doubles(), x2.to_doubles());
  // Targets are the inputs shifted by one character.
  for (int r = 0; r < 3; ++r) {
    for (int t = 0; t + 1 < 8; ++t) EXPECT_EQ(y1.data<int32_t>()[r * 8 + t], x1.data<int32_t>()[r * 8 + t + 1]);
  }
  EXPECT_NE(x1.to_doubles(), data.batch(Split::kTrain, 8, 3, 8, 1).first.to_doubles());
  EXPECT_THROW(CharDataset::load("/nonexistent/input.txt"), Error);
  EXPECT_THROW(data.encode("\x01"), Error);
}

TEST(Gpt, ConfigurationErrorsNameTheField) {
  EXPECT_THROW(GptConfig::preset("huge"), Error);
  GptConfig c = GptConfig::preset("test");
  c.n_head = 5;
  EXPECT_THROW(c.validate(), Error);
  Runtime rt({.num_cpu_devices = 4});
  GptConfig three = GptConfig::preset("test");
  three.n_head = 3;
  three.n_embd = 30;
  EXPECT_THROW(GptModel(three, batch_model_mesh(1, 2, rt), &rt), Error);  // heads split whole
}

TEST(Gpt, TrainingLowersTheLoss) {
  Runtime rt({.num_cpu_devices = 4});
  GptConfig c = GptConfig::preset("test");
  c.warmup_iters = 2;
  c.lr_decay_iters = 30;
  c.learning_rate = 3e-3;
  c.eval_iters = 2;
  GptTrainer trainer(c, batch_model_mesh(2, 2, rt), CharDataset::load(kText), &rt);
  double first = 0, last = 0;
  for (int s = 0; s < 30; ++s) {
    const StepReport r = trainer.step();
    ASSERT_TRUE(std::isfinite(r.loss) && std::isfinite(r.grad_norm));
    if (s == 0) first = r.loss;
    last = r.loss;
  }
  EXPECT_NEAR(first, std::log(65.0), 0.3);  // uniform predictions at the start
  EXPECT_LT(last, first - 0.5);
  EXPECT_EQ(trainer.generate("\n", 20).size(), 20u);
}

}  // namespace
}  // namespace tessel::gpt
