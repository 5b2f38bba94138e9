// Training a LanguageModel (language_model.h) on a CharDataset: nanoGPT's train.py loop on a
// tessel mesh, whatever the model. GptTrainer (gpt_trainer.h) and llama::LlamaTrainer are this
// trainer with their model.
//
//   LanguageModelTrainer trainer("my_model", CharDataset::load(path), config,
//                                [&](int vocab) { return std::make_unique<MyModel>(vocab, mesh);
//                                });
//   for (int64_t s = 0; s < config.max_iters; ++s) StepReport r = trainer.step();
//   double val = trainer.estimate_loss(Split::kVal);
//   std::string text = trainer.generate("\n", 300);
//
// A LanguageModelTrainer is a train::Trainable (examples/train/trainable.h), so train::TrainLoop
// runs it with checkpoints, evaluations and progress output (`tessel train gpt|llama`).
//
// A step: the learning rate of WarmupCosineDecay, batch `step` of the training split (the same
// on every mesh), loss and gradients with value_and_grad (the data-parallel sums reduced in
// fused buckets), clip_by_global_norm, AdamW (decay on the 2-D parameters only). A loss or
// gradient norm that is not finite stops training (train::take_step): kFailedPrecondition from
// name() naming the step and the value, instead of training on NaN. With training.loss_scale > 0
// (f16 mixed precision) the loss is scaled before the backward pass and the gradients unscaled
// after (train::DynamicLossScale); a step whose scaled gradients overflow is skipped, not
// applied, and the scale backs off.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "char_dataset.h"
#include "language_model.h"
#include "loss_scale.h"
#include "tessel/checkpoint/checkpoint.h"
#include "tessel/dtensor/optimizers.h"
#include "trainable.h"
#include "training_config.h"

namespace tessel::gpt {

using train::StepReport;

class LanguageModelTrainer : public train::Trainable {
 public:
  // The model, for the dataset's vocabulary size.
  using ModelFactory = std::function<std::unique_ptr<LanguageModel>(int vocab_size)>;
  // The initial parameters for the model and the seed (null: model.init(seed)).
  using ParameterInit = std::function<std::vector<DTensor>(const LanguageModel&, uint64_t seed)>;

  // `name` names the trainer in errors ("gpt"); the parameters are model.init(training.seed),
  // or init(model, training.seed).
  LanguageModelTrainer(std::string name, CharDataset data, const train::TrainingConfig& training,
                       const ModelFactory& make_model, Runtime* runtime = nullptr,
                       const ParameterInit& init = nullptr);

  const train::TrainingConfig& training() const { return training_; }
  const LanguageModel& language_model() const { return *model_; }
  const CharDataset& data() const { return data_; }
  std::vector<DTensor>& params() { return params_; }
  const std::vector<DTensor>& params() const { return params_; }
  const AdamW& optimizer() const { return optimizer_; }

  std::string_view name() const override { return name_; }
  int64_t next_step() const override { return step_; }
  // One checked step: train::take_step(*this).
  StepReport step();
  // Step next_step()'s loss, clipped gradients and learning rate; apply() runs AdamW.
  train::PendingStep compute_step() override;

  // What a resumed run needs (docs/checkpoints.md): the parameters ("model/<name>"), AdamW's
  // moments ("optimizer/m/<name>", "optimizer/v/<name>") and update count
  // ("optimizer/iterations"), the next step ("step"). The batches and the dropout masks are keyed
  // by the step and the seed ("seed", checked by restore), so a run restored on the same mesh
  // continues bit for bit as if it had not stopped. With loss scaling, the scale and its count
  // of good steps too ("loss_scale", "loss_scale/good_steps").
  checkpoint::State state() const override;
  // Continues from a checkpoint of state(), saved on any mesh: every tensor is restored onto
  // this trainer's layouts. A checkpoint of another seed: kInvalidArgument naming both.
  void restore(const std::string& directory) override;
  // The mean loss over training().eval_iters fixed batches of `split` (no dropout).
  double estimate_loss(Split split);
  // estimate_loss of both splits.
  train::SplitLosses evaluate() override;
  // `count` characters sampled after `prompt` (temperature > 0; top_k 0: every character): the
  // model runs on the growing context cropped to its block size, and the last position's
  // logits are sampled where they live (only the drawn id reaches the host).
  std::string generate(const std::string& prompt, int count, double temperature = 1.0,
                       int top_k = 0, uint64_t seed = 42);

 protected:
  // What a training step computes from a batch (host token ids and targets [B, T]): the mean
  // loss, the gradients clipped to global norm training().grad_clip, and the norm before
  // clipping, all unscaled: the gradients are computed at loss_scale() (1 without loss scaling)
  // and the norm is not finite when they overflowed. By default value_and_grad of the model's loss and clip_by_global_norm; a pipelined
  // trainer (gpt_pipeline_trainer.h) runs its schedule instead.
  struct BatchGradients {
    double loss = 0;
    std::vector<DTensor> clipped;
    double norm = 0;
  };
  virtual BatchGradients batch_gradients(const Tensor& idx, const Tensor& targets,
                                         const ForwardOptions& options);
  // The current dynamic loss scale; 1 without loss scaling.
  double loss_scale() const { return loss_scale_ ? loss_scale_->scale() : 1.0; }
  // Gradients computed at loss_scale() `scale` and clipped to the scaled bound (scaled norm
  // `scaled_norm`), divided by the scale when it is not 1 and they did not overflow: the
  // BatchGradients of the unscaled loss.
  static BatchGradients unscaled(double loss, std::vector<DTensor> clipped, double scaled_norm,
                                 double scale);
  // The mean loss of a batch without dropout (evaluations).
  virtual double batch_loss(const Tensor& idx, const Tensor& targets);
  // The logits [1, T, V] of one row of token ids [1, T] (generation).
  virtual DTensor row_logits(const Tensor& ids);

 private:
  std::string name_;
  CharDataset data_;
  train::TrainingConfig training_;
  std::unique_ptr<LanguageModel> model_;
  Runtime* runtime_;
  std::vector<DTensor> params_;
  AdamW optimizer_;
  WarmupCosineDecay schedule_;
  std::optional<train::DynamicLossScale> loss_scale_;  // training.loss_scale > 0
  int64_t step_ = 0;
};

}  // namespace tessel::gpt
