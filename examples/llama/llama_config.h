// The Llama's hyper-parameters: a Llama-style decoder (RMSNorm, rotary position embeddings,
// SwiGLU MLP, grouped-query attention, no biases) sized for tiny Shakespeare.
//
//   LlamaConfig c = LlamaConfig::preset("tiny");   // 4 layers, 4 heads / 2 kv heads, width 128
//   c.tie_embeddings = false;                      // any field may be changed before building
#pragma once

#include <cstdint>
#include <string>

#include "training_config.h"

namespace tessel::llama {

// The model's shape; the training hyper-parameters are train::TrainingConfig's (the GPT's).
struct LlamaConfig : train::TrainingConfig {
  int n_layer = 4;
  int n_head = 4;
  int n_kv_head = 2;  // grouped-query attention: n_head / n_kv_head query heads per kv head
  int n_embd = 128;
  int ffn_hidden = 384;        // the SwiGLU's hidden width
  int block_size = 64;         // context length T
  int vocab_size = 65;         // tiny Shakespeare's characters
  bool tie_embeddings = true;  // the token embedding serves as the output head
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;  // RMSNorm's

  // "tiny": the GPT's tiny recipe and parameter count (0.80 M: with n_kv_head = n_head / 2 and
  //   ffn_hidden = 3 n_embd a layer holds 12 n_embd^2 weights, as the GPT's; tied embeddings
  //   and no position table, so 795,904 parameters as GptConfig::preset("tiny") counts).
  // "test": 2 layers, 4 heads / 2 kv heads, width 32, ffn 96, context 16, batch 4, untied (the
  //   reference test's size, examples/llama/reference/).
  // Another name: kInvalidArgument listing the presets.
  static LlamaConfig preset(const std::string& name);

  int head_dim() const { return n_embd / n_head; }
  // Every parameter (the tied head once).
  int64_t num_parameters() const;
  // kInvalidArgument naming the field unless every size is positive, n_embd % n_head == 0,
  // n_head % n_kv_head == 0, head_dim is even (rotary pairs) and rope_theta, norm_eps > 0.
  void validate() const;
};

}  // namespace tessel::llama
