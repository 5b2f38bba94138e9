// The training hyper-parameters every example model shares (nanoGPT's train.py with
// config/train_shakespeare_char.py's values as defaults); a model's configuration derives from
// it and adds its own shape (gpt::GptConfig, llama::LlamaConfig).
//
//   struct GptConfig : train::TrainingConfig { int n_layer = 4; ... };
//   c.batch_size = 32;   // the fields are the configuration's own
#pragma once

#include <cstdint>

#include "tessel/core/dtype.h"

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
  // The dtype of the matmuls of activations by weights (the GPT's q, k, v, projections, MLP and
  // head; the Llama's likewise): f32, or bf16 as torch's CPU autocast runs them (both operands
  // cast to bf16, f32 sums, the product cast back to f32), or f16 the same way with f16 products
  // (blas.h's gemm_f16: MKL's hgemm, twice sgemm's rate on a CPU with AVX512-FP16) and the loss
  // scaled (loss_scale, which the f16 run needs). Parameters, gradients, AdamW, norms, softmax
  // and the loss stay f32 (mixed precision with f32 master weights; docs/gpt.md).
  DType dtype = DType::kF32;
  // Dynamic loss scaling (loss_scale.h) from this initial scale; 0: none. f16 mixed precision
  // needs it (`tessel train gpt --dtype f16` sets 65536); f32 and bf16 do not.
  double loss_scale = 0;
  int64_t loss_scale_growth_interval = 2000;  // finite steps in a row before the scale doubles
};

}  // namespace tessel::train
