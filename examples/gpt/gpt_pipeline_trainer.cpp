#include "gpt_pipeline_trainer.h"

#include <utility>

#include <fmt/format.h>

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

// kUnimplemented when the stages are on several processes (gpt_pipeline_trainer.h).
void require_one_process(const GptPipeline& pipeline, const char* what) {
  for (int s = 0; s < pipeline.stages(); ++s) {
    const Mesh& mesh = pipeline.stage_mesh(s);
    if (mesh.num_local_devices() == mesh.size()) continue;
    throw Error(ErrorCode::kUnimplemented, "gpt",
                fmt::format("{} of a pipeline whose stages are on several processes (stage {} "
                            "has {} of its {} devices here): not supported yet",
                            what, s, mesh.num_local_devices(), mesh.size()));
  }
}

}  // namespace

GptPipelineTrainer::GptPipelineTrainer(GptConfig config, const Mesh& mesh, PipelineOptions options,
                                       CharDataset data, Runtime* runtime, bool sequence_parallel)
    : PipelineHolder{make_pipeline(config, data.vocab_size(), mesh, options, runtime,
                                   sequence_parallel)},
      LanguageModelTrainer(
          "gpt", std::move(data), config,
          [this](int) { return std::make_unique<GptModel>(pipeline().stage_model(0)); }, runtime,
          [this](const LanguageModel&, uint64_t seed) { return pipeline().init(seed); }) {}

LanguageModelTrainer::BatchGradients GptPipelineTrainer::batch_gradients(
    const Tensor& idx, const Tensor& targets, const ForwardOptions& options) {
  PipelineGradients g = [&] {
    const ProfilePhase phase("pipeline");
    return pipeline().gradients(params(), idx, targets, options);
  }();
  const ProfilePhase phase("optimizer");
  auto [clipped, norm] = pipeline().clip_by_global_norm(g.gradients, training().grad_clip);
  return {g.loss, std::move(clipped), norm};
}

checkpoint::State GptPipelineTrainer::state() const {
  require_one_process(pipeline(), "a checkpoint");
  return LanguageModelTrainer::state();
}

void GptPipelineTrainer::restore(const std::string& directory) {
  require_one_process(pipeline(), "restoring a checkpoint");
  LanguageModelTrainer::restore(directory);
}

double GptPipelineTrainer::batch_loss(const Tensor& idx, const Tensor& targets) {
  return pipeline().loss(params(), idx, targets);
}

DTensor GptPipelineTrainer::row_logits(const Tensor& ids) { return pipeline().logits(params(), ids); }

}  // namespace tessel::gpt
