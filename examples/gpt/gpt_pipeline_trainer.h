// Training the pipelined GPT (gpt_pipeline.h): LanguageModelTrainer's loop, checkpoints,
// evaluations and generation, with each step's gradients from the pipeline's schedule, clipped
// by the global norm over every stage, and AdamW updating each parameter on its stage.
//
//   GptPipelineTrainer trainer(GptConfig::preset("tiny"), parse_mesh("stage=2,batch=1,model=2"),
//                              {.schedule = train::ScheduleKind::k1F1B, .microbatches = 4}, data);
//   StepReport r = trainer.step();
//
// Checkpoints hold GptTrainer's names ("model/wte", "model/h.3.attn.wq", ...) whatever the stage
// split: a pipelined run resumes on a plain mesh, and a plain run's checkpoint on a pipeline.
#pragma once

#include <memory>
#include <optional>

#include "char_dataset.h"
#include "gpt_pipeline.h"
#include "language_model_trainer.h"

namespace tessel::gpt {

namespace detail {
// Holds the pipeline so that it is made before the trainer base that reads it.
struct PipelineHolder {
  std::shared_ptr<const GptPipeline> pipeline;
};
}  // namespace detail

class GptPipelineTrainer : private detail::PipelineHolder, public LanguageModelTrainer {
 public:
  // The model is `config` with the dataset's vocabulary size, on `mesh` (stage first).
  GptPipelineTrainer(GptConfig config, const Mesh& mesh, PipelineOptions options, CharDataset data,
                     Runtime* runtime = nullptr, bool sequence_parallel = false);

  const GptPipeline& pipeline() const { return *PipelineHolder::pipeline; }
  const GptConfig& config() const { return pipeline().config(); }
  // With PipelineOptions::measure_idle: the last step's schedule window (pipeline_idle.h), and
  // every step's since the trainer was made or the last reset_idle() (windows added).
  const std::optional<train::PipelineIdle>& last_idle() const { return last_idle_; }
  const train::PipelineIdle& idle_total() const { return idle_total_; }
  void reset_idle() { idle_total_ = {}; }

 protected:
  BatchGradients batch_gradients(const Tensor& idx, const Tensor& targets,
                                 const ForwardOptions& options) override;
  double batch_loss(const Tensor& idx, const Tensor& targets) override;
  DTensor row_logits(const Tensor& ids) override;

 private:
  std::optional<train::PipelineIdle> last_idle_;
  train::PipelineIdle idle_total_;
};

}  // namespace tessel::gpt
