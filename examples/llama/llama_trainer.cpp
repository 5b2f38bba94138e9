#include "llama_trainer.h"

#include <memory>
#include <utility>

namespace tessel::llama {

LlamaTrainer::LlamaTrainer(LlamaConfig config, Mesh mesh, gpt::CharDataset data, Runtime* runtime)
    : LanguageModelTrainer(
          "llama", std::move(data), config,
          [&](int vocab_size) {
            config.vocab_size = vocab_size;
            return std::make_unique<LlamaModel>(config, mesh, runtime);
          },
          runtime) {}

}  // namespace tessel::llama
