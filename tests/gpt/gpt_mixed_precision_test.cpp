// The GPT with GptConfig::dtype bf16 (mixed precision as torch's CPU autocast: the matmuls of
// activations by weights in bf16 with f32 sums, everything else f32) or f16 (f16 products, the
// loss scaled): its training losses follow the f32 run's on every mesh shape, the parameters,
// gradients and AdamW state stay f32, an f16 step whose scaled gradients overflow is skipped, and
// the configuration refuses other dtypes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "char_dataset.h"
#include "gpt_trainer.h"
#include "tessel/dtensor/dtensor_api.h"
#include "testing/batch_model_mesh.h"
#include "testing/expect_error.h"

namespace tessel::gpt {
namespace {

const std::string kText = std::string(TESSEL_SOURCE_DIR) + "/data/shakespeare_char/input.txt";

struct TrainingRun {
  std::vector<double> losses;
  std::vector<DType> param_dtypes;
  int skipped = 0;
};

// f16 runs scale the loss by `loss_scale` (a scale this small model's gradients never overflow
// at, so that no update is skipped and the curves compare step for step).
TrainingRun train(DType dtype, int batch, int model, Runtime& rt, const CharDataset& data,
                  double loss_scale = 0) {
  GptConfig c = GptConfig::preset("test");
  c.dtype = dtype;
  c.eval_iters = 1;
  c.loss_scale = loss_scale;
  GptTrainer trainer(c, testing::batch_model_mesh(batch, model, rt), data, &rt);
  TrainingRun run;
  for (int s = 0; s < 10; ++s) {
    const StepReport r = trainer.step();
    run.losses.push_back(r.loss);
    run.skipped += r.skipped ? 1 : 0;
  }
  for (const DTensor& p : trainer.params()) run.param_dtypes.push_back(p.dtype());
  return run;
}

// The largest relative difference between two runs' losses, each step within `tolerance`.
double follows(const TrainingRun& run, const TrainingRun& f32, double tolerance) {
  EXPECT_EQ(run.losses.size(), f32.losses.size());
  double largest = 0;
  for (size_t s = 0; s < f32.losses.size() && s < run.losses.size(); ++s) {
    const double relative = std::abs(run.losses[s] - f32.losses[s]) / std::abs(f32.losses[s]);
    largest = std::max(largest, relative);
    EXPECT_LT(relative, tolerance) << "step " << s << ": " << run.losses[s] << ", f32 "
                                   << f32.losses[s];
  }
  return largest;
}

class GptMixedPrecision : public ::testing::TestWithParam<std::pair<int, int>> {};

// Tolerance 1e-4 relative, from a bf16 reference that shares no code with tessel: JAX running
// the same recipe (examples/gpt/reference/gpt_jax.py `project`: bf16 operands, f32 sums, the
// product rounded to bf16) on this model, start, batches and schedule moves the 10 losses by at
// most 1.39e-5 (1x1), 2.81e-5 (2x1), 2.81e-5 (1x2) and 1.54e-5 (2x2) relative from its f32 run
// (its f32 losses are this test's f32 losses to 1e-6); tessel's own, the same day: 2.1e-5,
// 1.7e-5, 1.7e-5, 1.4e-5. 1e-4 is 3.6x JAX's largest: twice it (bench/peers/compare_bf16.py's
// limit on tessel / JAX, as two correct implementations round differently) plus room for other
// GEMM kernels and thread splits. Commands and date: docs/gpt.md, "Mixed precision". (Before the
// JAX measurement the bound was 2e-3, half a bf16 ulp, argued from independent rounding errors.)
// A transposed operand or a product that skipped a term would be off by 1e-2 or more.
TEST_P(GptMixedPrecision, Bf16LossesFollowTheF32RunOver10Steps) {
  const auto [batch, model] = GetParam();
  Runtime rt({.num_cpu_devices = 4});
  const CharDataset data = CharDataset::load(kText);
  const TrainingRun f32 = train(DType::kF32, batch, model, rt, data);
  const TrainingRun bf16 = train(DType::kBF16, batch, model, rt, data);
  const double largest = follows(bf16, f32, 1e-4);
  char measured[32];
  std::snprintf(measured, sizeof measured, "%.3e", largest);
  RecordProperty("largest_relative_loss_difference", measured);  // in --gtest_output=xml
  // The bf16 path did run: rounding moves the losses.
  EXPECT_GT(largest, 0.0);
  EXPECT_LT(bf16.losses.back(), bf16.losses.front());  // and it trains
  // f32 master weights (and so f32 gradients and AdamW moments, made in the parameters' dtype).
  for (DType d : bf16.param_dtypes) EXPECT_EQ(d, DType::kF32);
}

// f16 products (gemm_f16: MKL's hgemm sums in f16, relative error ~3e-3 per product) with the
// loss scaled by 1024: 2e-3 relative, half a bf16 ulp, argued from independent errors over the
// terms, the layers and AdamW's normalised updates (no f16 reference run has measured it; the
// bf16 bound above comes from JAX); measured about 1e-4.
TEST_P(GptMixedPrecision, F16LossesFollowTheF32RunOver10StepsWithTheLossScaled) {
  const auto [batch, model] = GetParam();
  Runtime rt({.num_cpu_devices = 4});
  const CharDataset data = CharDataset::load(kText);
  const TrainingRun f32 = train(DType::kF32, batch, model, rt, data);
  const TrainingRun f16 = train(DType::kF16, batch, model, rt, data, /*loss_scale=*/1024);
  EXPECT_EQ(f16.skipped, 0);
  EXPECT_GT(follows(f16, f32, 2e-3), 0.0);
  EXPECT_LT(f16.losses.back(), f16.losses.front());
  for (DType d : f16.param_dtypes) EXPECT_EQ(d, DType::kF32);
}

INSTANTIATE_TEST_SUITE_P(EveryMesh, GptMixedPrecision,
                         ::testing::ValuesIn(std::vector<std::pair<int, int>>{
                             {1, 1}, {2, 1}, {1, 2}, {2, 2}}),
                         [](const ::testing::TestParamInfo<std::pair<int, int>>& info) {
                           return std::to_string(info.param.first) + "x" +
                                  std::to_string(info.param.second);
                         });

// A scale so large that the scaled gradients overflow f16 (2^40 times the loss): the step is
// skipped (parameters and AdamW untouched, the step still counted, the norm not finite), the
// scale halves each time, and once it is small enough the updates apply again.
TEST(GptF16LossScaling, OverflowingStepsAreSkippedAndTheScaleBacksOff) {
  Runtime rt({.num_cpu_devices = 1});
  const CharDataset data = CharDataset::load(kText);
  GptConfig c = GptConfig::preset("test");
  c.dtype = DType::kF16;
  c.eval_iters = 1;
  c.loss_scale = std::ldexp(1.0, 40);
  GptTrainer trainer(c, testing::batch_model_mesh(1, 1, rt), data, &rt);
  const std::vector<double> before = to_host(trainer.params()[0]).to_doubles();
  const StepReport first = trainer.step();
  EXPECT_TRUE(first.skipped);
  EXPECT_FALSE(std::isfinite(first.grad_norm));
  EXPECT_TRUE(std::isfinite(first.loss));
  EXPECT_EQ(first.loss_scale, std::ldexp(1.0, 40));
  EXPECT_EQ(trainer.next_step(), 1);
  EXPECT_EQ(trainer.optimizer().iterations(), 0);
  EXPECT_EQ(to_host(trainer.params()[0]).to_doubles(), before);
  int skipped = 1;
  double scale = first.loss_scale;
  StepReport r = first;
  while (r.skipped && skipped < 40) {
    r = trainer.step();
    EXPECT_EQ(r.loss_scale, scale / 2) << "the scale halves after each skipped step";
    scale = r.loss_scale;
    skipped += r.skipped ? 1 : 0;
  }
  ASSERT_FALSE(r.skipped) << "still overflowing at scale " << r.loss_scale;
  EXPECT_TRUE(std::isfinite(r.grad_norm));
  EXPECT_EQ(trainer.optimizer().iterations(), 1);
  EXPECT_NE(to_host(trainer.params()[0]).to_doubles(), before);
  // The scale and its count of good steps are in the checkpoint state.
  const checkpoint::State state = trainer.state();
  EXPECT_EQ(std::get<double>(state.at("loss_scale")), r.loss_scale);
  EXPECT_EQ(std::get<int64_t>(state.at("loss_scale/good_steps")), 1);
}

TEST(GptMixedPrecisionConfig, F32Bf16AndF16AreAccepted) {
  EXPECT_EQ(parse_matmul_dtype("f32"), DType::kF32);
  EXPECT_EQ(parse_matmul_dtype("bf16"), DType::kBF16);
  EXPECT_EQ(parse_matmul_dtype("f16"), DType::kF16);
  EXPECT_TESSEL_ERROR(parse_matmul_dtype("f64"), ErrorCode::kInvalidArgument,
                      "unknown matmul dtype 'f64': one of f32, bf16, f16");
  GptConfig c = GptConfig::preset("test");
  c.dtype = DType::kF64;
  EXPECT_TESSEL_ERROR(c.validate(), ErrorCode::kInvalidArgument,
                      "dtype must be f32, bf16 or f16, got f64");
}

}  // namespace
}  // namespace tessel::gpt
