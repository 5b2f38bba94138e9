// The GPT's hyper-parameters: nanoGPT's character-level model (model.py with bias=False) and its
// two published recipes on tiny Shakespeare.
//
//   GptConfig c = GptConfig::preset("tiny");   // 4 layers, 4 heads, width 128, context 64
//   c.n_layer = 2;                             // any field may be changed before building
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tessel/core/dtype.h"
#include "training_config.h"

namespace tessel::gpt {

// What the backward pass computes again instead of keeping from the forward pass
// (recompute_grad.h): nothing; attention's [B, H, T, T] part, from the queries, keys and values
// (Korthikanti et al.'s "selective activation recomputation"; with the fused attention below,
// which keeps no such map, the same as nothing); each transformer block, from its input. Every
// choice gives bit for bit the same losses and gradients.
enum class Recompute { kNone, kSelective, kFull };

// "none", "selective" or "full"; another name: kInvalidArgument listing them.
Recompute parse_recompute(std::string_view name);
std::string_view recompute_name(Recompute recompute);

// How attention's [B, H, T, T] part runs: one fused op (causal_attention, ops.h: no map kept for
// the backward pass, the probabilities recomputed tile by tile there) or the composed ops
// (matmul, causal_softmax, dropout, matmul: two maps kept per layer, three more made in the
// backward pass). The same dropout mask; losses equal within float rounding. A mesh of GPU
// devices runs the composed ops while causal_attention has no GPU kernel.
enum class Attention { kFused, kComposed };

// "fused" or "composed"; another name: kInvalidArgument listing them.
Attention parse_attention(std::string_view name);
std::string_view attention_name(Attention attention);
// The attention that runs on devices of `device_type` ("CPU", "GPU", ...) when `requested` is
// asked for: on GPU devices kComposed unless causal_attention has a GPU kernel (host-staged, it
// would copy every block to the host and back) and TESSEL_GPU_FUSED_ATTENTION=1 opts in (its
// CUDA kernels are written and compiled, and are the default once they have run on a GPU;
// another value than 0 or 1: kInvalidArgument), else `requested`. The models call it; the CLIs
// put its answer in the config, so that memory plans and reports show what runs.
Attention attention_on(Attention requested, std::string_view device_type);
// Whether TESSEL_GPU_FUSED_ATTENTION is 1 (unset, empty or 0: false; else kInvalidArgument).
bool gpu_fused_attention_enabled();

// GptConfig::dtype from its name: "f32", "bf16" or "f16"; another name: kInvalidArgument
// listing them.
DType parse_matmul_dtype(std::string_view name);

// c.dtype = parse_matmul_dtype(name), and for f16 the dynamic loss scale it needs from
// PyTorch's GradScaler start (c.loss_scale = 65536; 0 for f32 and bf16): the CLIs' --dtype, for
// the GPT and the Llama.
void set_matmul_dtype(train::TrainingConfig& c, std::string_view name);

// The model's shape; the training hyper-parameters are train::TrainingConfig's (nanoGPT's
// train.py and config/train_shakespeare_char.py).
struct GptConfig : train::TrainingConfig {
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 128;
  int block_size = 64;   // context length T
  int vocab_size = 65;   // tiny Shakespeare's characters
  double dropout = 0.0;  // on attention probabilities and on each block's two outputs
  Recompute recompute = Recompute::kNone;  // what the training step recomputes (memory)
  Attention attention = Attention::kFused;

  // "tiny": nanoGPT's CPU recipe (published validation loss about 1.88 after 2000 steps).
  // "baby": the 6-layer, 6-head, width-384 model of config/train_shakespeare_char.py (10.65 M
  //   parameters, published best validation loss 1.4697 after 5000 steps).
  // "gpt2": GPT-2 small's shape (12 layers, 12 heads, width 768; 85 M parameters on the
  //   characters) with context 256 and batch 8: the model that needs --fsdp, --recompute and
  //   bf16 to train on small devices (docs/memory.md).
  // "test": 2 layers, 4 heads, width 32, context 16, batch 4 (the reference test's size).
  // Another name: kInvalidArgument listing the presets.
  static GptConfig preset(const std::string& name);

  int head_dim() const { return n_embd / n_head; }
  // The parameter count nanoGPT reports (without the position embedding; the tied head once).
  int64_t num_parameters() const;
  // FLOPs per token as torchtitan counts them: 6 N + 12 L H Q T (N with the embeddings).
  double flops_per_token() const;
  // kInvalidArgument naming the field unless every size is positive, n_embd % n_head == 0,
  // dropout is in [0, 1) and dtype is f32, bf16 or f16.
  void validate() const;
};

}  // namespace tessel::gpt
