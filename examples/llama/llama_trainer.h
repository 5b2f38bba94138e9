// Training a LlamaModel on a CharDataset, as the GPT is trained (gpt::LanguageModelTrainer:
// nanoGPT's schedule, AdamW, clipping, evaluations, checkpoints and resume, generation).
//
//   LlamaTrainer trainer(LlamaConfig::preset("tiny"), mesh, gpt::CharDataset::load(path));
//   train::TrainLoop(options).run(trainer);     // `tessel train llama`
//
// Errors name "llama".
#pragma once

#include "char_dataset.h"
#include "language_model_trainer.h"
#include "llama_model.h"

namespace tessel::llama {

class LlamaTrainer : public gpt::LanguageModelTrainer {
 public:
  // The model is `config` with the dataset's vocabulary size.
  LlamaTrainer(LlamaConfig config, Mesh mesh, gpt::CharDataset data, Runtime* runtime = nullptr);

  const LlamaModel& model() const { return static_cast<const LlamaModel&>(language_model()); }
  const LlamaConfig& config() const { return model().config(); }
};

}  // namespace tessel::llama
