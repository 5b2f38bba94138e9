// The training hyper-parameters every example model shares (nanoGPT's train.py with
// config/train_shakespeare_char.py's values as defaults); a model's configuration derives from
// it and adds its own shape (gpt::GptConfig, llama::LlamaConfig).
//
//   struct GptConfig : train::TrainingConfig { int n_layer = 4; ... };
//   c.batch_size = 32;   // the fields are the configuration's own
#pragma once

#include <cstdint>

namespace tessel::train {

struct TrainingConfig {
  int batch_size = 12;  // global batch B, split over the mesh's batch dimension
  int max_iters = 2000;
  double learning_rate = 1e-3;
  double min_lr = 1e-4;
  int warmup_iters = 100;
  int lr_decay_iters = 2000;
  double beta1 = 0.9;
  double beta2 = 0.99;
  double weight_decay = 0.1;  // AdamW's, on the 2-D parameters only
  double grad_clip = 1.0;     // global gradient norm
  int eval_interval = 250;
  int eval_iters = 20;  // batches per validation estimate
  uint64_t seed = 1337;
  // Fully sharded parameters (ZeRO-3, FSDP): parameters, gradients and the optimizer's state
  // stored sharded over the mesh's `batch` dimension as well, each parameter all-gathered where
  // the forward pass uses it (gpt::LanguageModel, docs/memory.md). No effect without a `batch`
  // dimension of size > 1.
  bool fsdp = false;
  // Dynamic loss scaling (loss_scale.h) from this initial scale; 0: none. f16 mixed precision
  // needs it (`tessel train gpt --dtype f16` sets 65536); f32 and bf16 do not.
  double loss_scale = 0;
  int64_t loss_scale_growth_interval = 2000;  // finite steps in a row before the scale doubles
};

}  // namespace tessel::train
