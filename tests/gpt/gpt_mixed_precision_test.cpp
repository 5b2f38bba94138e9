// The GPT with GptConfig::dtype bf16 (mixed precision as torch's CPU autocast: the matmuls of
// activations by weights in bf16 with f32 sums, everything else f32): its training losses follow
// the f32 run's on every mesh shape, the parameters, gradients and AdamW state stay f32, and the
// configuration refuses other dtypes.
#include <gtest/gtest.h>

#include <cmath>

#include "char_dataset.h"
#include "gpt_trainer.h"
#include "testing/batch_model_mesh.h"
#include "testing/expect_error.h"

namespace tessel::gpt {
namespace {

const std::string kText = std::string(TESSEL_SOURCE_DIR) + "/data/shakespeare_char/input.txt";

struct TrainingRun {
  std::vector<double> losses;
  std::vector<DType> param_dtypes;
};

TrainingRun train(DType dtype, int batch, int model, Runtime& rt, const CharDataset& data) {
  GptConfig c = GptConfig::preset("test");
  c.dtype = dtype;
  c.eval_iters = 1;
  GptTrainer trainer(c, testing::batch_model_mesh(batch, model, rt), data, &rt);
  TrainingRun run;
  for (int s = 0; s < 10; ++s) run.losses.push_back(trainer.step().loss);
  for (const DTensor& p : trainer.params()) run.param_dtypes.push_back(p.dtype());
  return run;
}

class GptMixedPrecision : public ::testing::TestWithParam<std::pair<int, int>> {};

// Tolerance 2e-3 relative, half a bf16 unit in the last place (2^-9): the bf16 run's losses
// agree with the f32 run's to better than bf16 could represent the loss itself. Why they can:
// each cast operand carries a relative error up to 2^-9 and each product ~2^-8, but these
// errors are independent across the 32 to 128 terms of each sum and across the seven matmul
// layers' outputs, so the logits move by ~1e-4 relative and the loss (about 4.2, a mean of
// log-softmax terms) by less; AdamW's normalised updates (lr 1e-3) turn gradient noise of that
// size into parameter changes far below the learning rate's scale over 10 steps. Measured: about
// 1e-5 on the 2x2 mesh. A transposed operand or a product that skipped a term would be off by
// 1e-2 or more.
TEST_P(GptMixedPrecision, Bf16LossesFollowTheF32RunOver10Steps) {
  const auto [batch, model] = GetParam();
  Runtime rt({.num_cpu_devices = 4});
  const CharDataset data = CharDataset::load(kText);
  const TrainingRun f32 = train(DType::kF32, batch, model, rt, data);
  const TrainingRun bf16 = train(DType::kBF16, batch, model, rt, data);
  ASSERT_EQ(bf16.losses.size(), f32.losses.size());
  double largest = 0;
  for (size_t s = 0; s < f32.losses.size(); ++s) {
    const double relative = std::abs(bf16.losses[s] - f32.losses[s]) / std::abs(f32.losses[s]);
    largest = std::max(largest, relative);
    EXPECT_LT(relative, 2e-3) << "step " << s << ": bf16 " << bf16.losses[s] << ", f32 "
                              << f32.losses[s];
  }
  // The bf16 path did run: rounding moves the losses.
  EXPECT_GT(largest, 0.0);
  EXPECT_LT(bf16.losses.back(), bf16.losses.front());  // and it trains
  // f32 master weights (and so f32 gradients and AdamW moments, made in the parameters' dtype).
  for (DType d : bf16.param_dtypes) EXPECT_EQ(d, DType::kF32);
}

INSTANTIATE_TEST_SUITE_P(EveryMesh, GptMixedPrecision,
                         ::testing::ValuesIn(std::vector<std::pair<int, int>>{
                             {1, 1}, {2, 1}, {1, 2}, {2, 2}}),
                         [](const ::testing::TestParamInfo<std::pair<int, int>>& info) {
                           return std::to_string(info.param.first) + "x" +
                                  std::to_string(info.param.second);
                         });

TEST(GptMixedPrecisionConfig, OnlyF32AndBf16AreAccepted) {
  EXPECT_EQ(parse_matmul_dtype("f32"), DType::kF32);
  EXPECT_EQ(parse_matmul_dtype("bf16"), DType::kBF16);
  EXPECT_TESSEL_ERROR(parse_matmul_dtype("f16"), ErrorCode::kInvalidArgument,
                      "unknown matmul dtype 'f16': one of f32, bf16");
  GptConfig c = GptConfig::preset("test");
  c.dtype = DType::kF64;
  EXPECT_TESSEL_ERROR(c.validate(), ErrorCode::kInvalidArgument,
                      "dtype must be f32 or bf16, got f64");
}

}  // namespace
}  // namespace tessel::gpt
