#include "gpt_pipeline_trainer.h"

#include <utility>

#include "tessel/core/error.h"
#include "tessel/dtensor/op_profile.h"

namespace tessel::gpt {
namespace {

std::shared_ptr<const GptPipeline> make_pipeline(GptConfig config, int vocab_size, const Mesh& mesh,
                                                 PipelineOptions options, Runtime* runtime,
                                                 bool sequence_parallel) {
  config.vocab_size = vocab_size;
  return std::make_shared<const GptPipeline>(config, mesh, options, runtime, sequence_parallel);
}

}  // namespace

GptPipelineTrainer::GptPipelineTrainer(GptConfig config, const Mesh& mesh, PipelineOptions options,
                                       CharDataset data, Runtime* runtime, bool sequence_parallel)
    : PipelineHolder{make_pipeline(config, data.vocab_size(), mesh, options, runtime,
                                   sequence_parallel)},
      LanguageModelTrainer(
          "gpt", std::move(data), config,
          [this](int) { return std::make_unique<GptModel>(pipeline().stage_model(0)); }, runtime,
          [this](const LanguageModel&, uint64_t seed) { return pipeline().init(seed); }) {
}

LanguageModelTrainer::BatchGradients GptPipelineTrainer::batch_gradients(
    const Tensor& idx, const Tensor& targets, const ForwardOptions& options) {
  // With loss scaling (f16 matmuls) each microbatch's backward pass starts from its scaled loss;
  // the gradients are clipped to the scaled bound and unscaled as the plain trainer's.
  const double scale = loss_scale();
  PipelineGradients g = [&] {
    const ProfilePhase phase("pipeline");
    return pipeline().gradients(params(), idx, targets, options, scale);
  }();
  last_idle_ = g.idle;
  if (g.idle) idle_total_.add(*g.idle);
  const ProfilePhase phase("optimizer");
  auto [clipped, norm] =
      pipeline().clip_by_global_norm(g.gradients, training().grad_clip * scale);
  return unscaled(g.loss, std::move(clipped), norm, scale);
}

double GptPipelineTrainer::batch_loss(const Tensor& idx, const Tensor& targets) {
  return pipeline().loss(params(), idx, targets);
}

DTensor GptPipelineTrainer::row_logits(const Tensor& ids) { return pipeline().logits(params(), ids); }

}  // namespace tessel::gpt
