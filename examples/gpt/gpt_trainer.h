// Training a GptModel on a CharDataset: nanoGPT's train.py loop on a tessel mesh.
//
//   GptTrainer trainer(GptConfig::preset("tiny"), mesh, CharDataset::load(path));
//   for (int64_t s = 0; s < trainer.config().max_iters; ++s) {
//     StepReport r = trainer.step();                 // one AdamW step on batch s
//   }
//   double val = trainer.estimate_loss(Split::kVal);
//   std::string text = trainer.generate("\n", 300);
//
// The steps, evaluations, checkpoints and generation are LanguageModelTrainer's
// (language_model_trainer.h); dropout masks are keyed by the seed and the step. Errors name
// "gpt".
#pragma once

#include "char_dataset.h"
#include "gpt_model.h"
#include "language_model_trainer.h"

namespace tessel::gpt {

class GptTrainer : public LanguageModelTrainer {
 public:
  // The model is `config` with the dataset's vocabulary size.
  GptTrainer(GptConfig config, Mesh mesh, CharDataset data, Runtime* runtime = nullptr,
             bool sequence_parallel = false);

  const GptModel& model() const { return static_cast<const GptModel&>(language_model()); }
  const GptConfig& config() const { return model().config(); }
};

}  // namespace tessel::gpt
