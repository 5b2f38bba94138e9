#include "gpt_trainer.h"

#include <memory>
#include <utility>

namespace tessel::gpt {

GptTrainer::GptTrainer(GptConfig config, Mesh mesh, CharDataset data, Runtime* runtime,
                       bool sequence_parallel)
    : LanguageModelTrainer(
          "gpt", std::move(data), config,
          [&](int vocab_size) {
            config.vocab_size = vocab_size;
            return std::make_unique<GptModel>(config, mesh, runtime, sequence_parallel);
          },
          runtime) {}

}  // namespace tessel::gpt
