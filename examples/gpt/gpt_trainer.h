// Training a GptModel on a CharDataset: nanoGPT's train.py loop on a tessel mesh.
//
//   GptTrainer trainer(GptConfig::preset("tiny"), mesh, CharDataset::load(path));
//   for (int64_t s = 0; s < trainer.config().max_iters; ++s) {
//     StepReport r = trainer.step();                 // one AdamW step on batch s
//   }
//   double val = trainer.estimate_loss(Split::kVal);
//   std::string text = trainer.generate("\n", 300);
//
// A GptTrainer is a train::Trainable (examples/train/trainable.h), so train::TrainLoop runs it
// with checkpoints, evaluations and progress output (`tessel train gpt`).
//
// A step: the learning rate of WarmupCosineDecay, batch `step` of the training split (the same
// on every mesh), loss and gradients with value_and_grad (the data-parallel sums reduced in
// fused buckets), clip_by_global_norm, AdamW (decay on the 2-D parameters only). A loss or
// gradient norm that is not finite stops training (train::take_step): kFailedPrecondition from
// "gpt" naming the step and the value, instead of training on NaN.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "char_dataset.h"
#include "gpt_model.h"
#include "tessel/checkpoint/checkpoint.h"
#include "tessel/dtensor/optimizers.h"
#include "trainable.h"

namespace tessel::gpt {

using train::StepReport;

class GptTrainer : public train::Trainable {
 public:
  GptTrainer(GptConfig config, Mesh mesh, CharDataset data, Runtime* runtime = nullptr,
             bool sequence_parallel = false);

  const GptConfig& config() const { return model_.config(); }
  const GptModel& model() const { return model_; }
  const CharDataset& data() const { return data_; }
  std::vector<DTensor>& params() { return params_; }
  const std::vector<DTensor>& params() const { return params_; }
  const AdamW& optimizer() const { return optimizer_; }

  std::string_view name() const override { return "gpt"; }
  int64_t next_step() const override { return step_; }
  // One checked step: train::take_step(*this).
  StepReport step();
  // Step next_step()'s loss, clipped gradients and learning rate; apply() runs AdamW.
  train::PendingStep compute_step() override;

  // What a resumed run needs (docs/checkpoints.md): the parameters ("model/<name>"), AdamW's
  // moments ("optimizer/m/<name>", "optimizer/v/<name>") and update count
  // ("optimizer/iterations"), the next step ("step"). The batches and the dropout masks are keyed
  // by the step and the seed ("seed", checked by restore), so a run restored on the same mesh
  // continues bit for bit as if it had not stopped.
  checkpoint::State state() const override;
  // Continues from a checkpoint of state(), saved on any mesh: every tensor is restored onto
  // this trainer's layouts. A checkpoint of another seed: kInvalidArgument naming both.
  void restore(const std::string& directory) override;
  // The mean loss over config().eval_iters fixed batches of `split` (no dropout).
  double estimate_loss(Split split);
  // estimate_loss of both splits.
  train::SplitLosses evaluate() override;
  // `count` characters sampled after `prompt` (temperature > 0; top_k 0: every character).
  std::string generate(const std::string& prompt, int count, double temperature = 1.0,
                       int top_k = 0, uint64_t seed = 42);

 private:
  GptModel model_;
  CharDataset data_;
  Runtime* runtime_;
  std::vector<DTensor> params_;
  AdamW optimizer_;
  WarmupCosineDecay schedule_;
  int64_t step_ = 0;
};

}  // namespace tessel::gpt
