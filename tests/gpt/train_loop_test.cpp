// train::TrainLoop (examples/train) on a toy Trainable: the evaluation and checkpoint schedule,
// resume, the non-finite check before the update, the progress output and the metrics CSV. The
// GPT runs the same loop through `tessel train gpt` (tools/train_resume_test.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "tessel/checkpoint/checkpoint.h"
#include "tessel/dtensor/ops.h"
#include "testing/expect_error.h"
#include "testing/temp_dir.h"
#include "train_loop.h"

namespace tessel::train {
namespace {

using testing::TempDir;

// Two ones on the runtime's first device.
DTensor small_tensor(Runtime& rt) {
  const Mesh one = Mesh::create_on_devices({{"x", 1}}, {rt.device(0).name()});
  return ones(Shape{2}, Layout::replicated(one, 1), DType::kF32, &rt);
}

// A model whose loss is w, halved by every update; step `poisoned` has a NaN loss. Its state is
// the step, w and a small DTensor (so that checkpoints have a tensor, as a model's do).
class HalvingModel : public Trainable {
 public:
  explicit HalvingModel(Runtime& rt, int64_t poisoned = -1)
      : poisoned_(poisoned), tensor_(small_tensor(rt)) {}

  std::string_view name() const override { return "halving"; }
  int64_t next_step() const override { return step_; }
  PendingStep compute_step() override {
    const double loss = step_ == poisoned_ ? std::numeric_limits<double>::quiet_NaN() : w_;
    return {StepReport{.step = step_, .loss = loss, .learning_rate = 0.5, .grad_norm = 2 * w_},
            [this] {
              w_ /= 2;
              ++step_;
            }};
  }
  SplitLosses evaluate() override {
    evaluated_at.push_back(step_);
    return {w_, 3 * w_};
  }
  checkpoint::State state() const override {
    return {{"step", step_}, {"w", w_}, {"tensor", tensor_}};
  }
  void restore(const std::string& directory) override {
    const checkpoint::State saved =
        checkpoint::restore(directory, checkpoint::State{{"tensor", tensor_}});
    step_ = std::get<int64_t>(saved.at("step"));
    w_ = std::get<double>(saved.at("w"));
  }

  double w() const { return w_; }
  std::vector<int64_t> evaluated_at;  // next_step() at each evaluate()

 private:
  int64_t poisoned_;
  DTensor tensor_;
  int64_t step_ = 0;
  double w_ = 1;
};

std::vector<double> losses_of(const TrainHistory& h) {
  std::vector<double> out;
  for (const StepReport& r : h.steps) out.push_back(r.loss);
  return out;
}

TEST(TrainLoop, EvaluatesEveryIntervalAndAtTheEnd) {
  Runtime rt({.num_cpu_devices = 1});
  HalvingModel model(rt);
  const TrainHistory h =
      TrainLoop({.steps = 5, .eval_interval = 2, .tokens_per_step = 8}).run(model);
  EXPECT_EQ(losses_of(h), (std::vector<double>{1, 0.5, 0.25, 0.125, 0.0625}));
  ASSERT_EQ(h.steps.size(), 5u);
  EXPECT_EQ(h.steps[3].step, 3);
  EXPECT_EQ(h.steps[3].grad_norm, 0.25);
  EXPECT_EQ(model.evaluated_at,
            (std::vector<int64_t>{2, 4, 5}));  // before steps 2 and 4, at the end
  ASSERT_EQ(h.evaluations.size(), 3u);
  EXPECT_EQ(h.evaluations[0].step, 2);
  EXPECT_EQ(h.evaluations[0].train_loss, 0.25);
  EXPECT_EQ(h.evaluations[0].val_loss, 0.75);
  EXPECT_EQ(h.evaluations.back().step, 5);
  EXPECT_EQ(h.total_steps, 5);
  EXPECT_GT(h.median_step_seconds(), 0);
  EXPECT_DOUBLE_EQ(h.tokens_per_second(), 8 / h.median_step_seconds());
  EXPECT_NE(h.summary().find("trained 5 steps in "), std::string::npos) << h.summary();
  EXPECT_NE(h.summary().find("final val loss 0.0938"), std::string::npos) << h.summary();
}

TEST(TrainLoop, ResumesFromTheNewestCheckpoint) {
  Runtime rt({.num_cpu_devices = 1});
  TempDir dir("tessel-train-loop");
  TrainOptions options{.steps = 4,
                       .eval_interval = 100,
                       .checkpoint_dir = dir / "ckpt",
                       .checkpoint_every = 2,
                       .async_checkpoint = true};
  HalvingModel straight(rt);
  const TrainHistory whole = TrainLoop(options).run(straight);
  EXPECT_TRUE(std::filesystem::exists(dir / "ckpt/step-00000002/tessel.json"));
  EXPECT_TRUE(std::filesystem::exists(dir / "ckpt/step-00000004/tessel.json"));
  std::filesystem::remove_all(dir / "ckpt/step-00000004");  // as if killed after step 3

  options.resume = true;
  std::ostringstream progress;
  options.progress = &progress;
  HalvingModel resumed(rt);
  const TrainHistory rest = TrainLoop(options).run(resumed);
  EXPECT_EQ(losses_of(rest), (std::vector<double>{0.25, 0.125}));  // steps 2 and 3 again
  EXPECT_EQ(rest.steps.front().step, 2);
  EXPECT_EQ(resumed.w(), straight.w());
  EXPECT_NE(progress.str().find("resumed from step 2 (" + dir / "ckpt/step-00000002" + ")\n"),
            std::string::npos)
      << progress.str();

  // A directory without checkpoints: resume starts afresh.
  options.checkpoint_dir = dir / "empty";
  HalvingModel fresh(rt);
  EXPECT_EQ(TrainLoop(options).run(fresh).steps.size(), 4u);
}

TEST(TrainLoop, StopsBeforeApplyingANonFiniteUpdate) {
  Runtime rt({.num_cpu_devices = 1});
  HalvingModel model(rt, /*poisoned=*/2);
  EXPECT_TESSEL_ERROR(TrainLoop({.steps = 5, .eval_interval = 10}).run(model),
                      ErrorCode::kFailedPrecondition,
                      "halving: step 2: the loss is nan and the gradient norm 0.5 (learning rate "
                      "0.5); stopped before applying a non-finite update");
  EXPECT_EQ(model.next_step(), 2);  // steps 0 and 1 applied, step 2 not
  EXPECT_EQ(model.w(), 0.25);
}

TEST(TrainLoop, ProgressPrintsEvaluationsAndALineEvery50Steps) {
  Runtime rt({.num_cpu_devices = 1});
  HalvingModel model(rt);
  std::ostringstream out;
  TrainLoop({.steps = 3, .eval_interval = 2, .tokens_per_step = 10, .progress = &out}).run(model);
  const std::string text = out.str();
  EXPECT_NE(text.find("step     2: train loss 0.2500, val loss 0.7500\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("] step     3/3 loss 0.2500 lr 5.00e-01 "), std::string::npos) << text;
  EXPECT_EQ(text.find("step     1/3"), std::string::npos) << text;  // not a terminal: the last only
  EXPECT_NE(text.find("step     3: train loss 0.1250, val loss 0.3750\n"), std::string::npos)
      << text;
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;
}

TEST(TrainLoop, MetricsCsvHasATrainRowPerStepThenTheEvaluations) {
  TrainHistory h;
  h.steps = {
      StepReport{.step = 0, .loss = 1.5, .learning_rate = 0.001, .grad_norm = 0.25, .seconds = 0.5},
      StepReport{
          .step = 1, .loss = 1.25, .learning_rate = 2.5e-4, .grad_norm = 0.125, .seconds = 0.25}};
  h.evaluations = {Evaluation{.step = 2, .train_loss = 1.125, .val_loss = 1.75}};
  std::ostringstream csv;
  write_metrics_csv(csv, h);
  EXPECT_EQ(csv.str(),
            "kind,step,loss,lr,grad_norm,step_seconds,val_loss\n"
            "train,0,1.500000,0.001,0.250000,0.500000,\n"
            "train,1,1.250000,0.00025,0.125000,0.250000,\n"
            "eval,2,1.125000,,,,1.750000\n");
  EXPECT_EQ(h.median_step_seconds(), 0.375);  // the mean of the middle two (tessel::median)
}

TEST(TrainLoop, OptionsOutOfRangeAreRejected) {
  EXPECT_TESSEL_ERROR(TrainLoop({.steps = 0, .eval_interval = 1}), ErrorCode::kInvalidArgument,
                      "train: steps must be >= 1, got 0");
  EXPECT_TESSEL_ERROR(TrainLoop({.steps = 5, .eval_interval = 0}), ErrorCode::kInvalidArgument,
                      "eval_interval must be >= 1, got 0");
  EXPECT_TESSEL_ERROR(TrainLoop({.steps = 5, .eval_interval = 1, .checkpoint_every = -2}),
                      ErrorCode::kInvalidArgument, "checkpoint_every must be >= 0, got -2");
  EXPECT_TESSEL_ERROR(TrainLoop({.steps = 5, .eval_interval = 1, .resume = true}),
                      ErrorCode::kInvalidArgument, "need a checkpoint directory");
}

}  // namespace
}  // namespace tessel::train
