// A Llama-style language model written with tessel's ops: RMSNorm, rotary position embeddings
// (RoPE), a SwiGLU MLP, grouped-query attention, no biases, tied or untied embeddings; laid out
// on a (batch, model) mesh with Megatron's tensor parallelism, as the GPT (gpt_model.h).
//
//   Mesh mesh = Mesh::create({{"batch", 2}, {"model", 2}});
//   LlamaModel model(LlamaConfig::preset("tiny"), mesh);
//   std::vector<DTensor> params = model.init(/*seed=*/1337);
//   DTensor loss = model.loss(params, idx, targets);           // idx, targets: [B, T] i32
//
// The model (B batch, T time, C width, H heads, K kv heads, D = C / H, F the SwiGLU's width):
//   x = tok_embeddings[idx]; per layer x += attention(rms_norm(x)), x += ffn(rms_norm(x));
//   logits = rms_norm(x) @ W^T, W = tok_embeddings (tied) or output.
//   rms_norm(x) = x * rsqrt(mean(x^2) + eps) * weight (the rms_norm op). ffn(h) = (silu(h @ w1)
//   * (h @ w3)) @ w2. Attention: q = rope(h @ wq) [B, T, H, D], k = rope(h @ wk), v = h @ wv
//   [B, T, K, D]; query head j attends with kv head j / (H / K), the kv heads repeated to the
//   query heads (Llama's repeat_kv: a concat of H / K copies); causal_softmax(q k^T / sqrt(D)) v
//   as one fused causal_attention op on the [B, T, heads, D] views (the composed ops on GPU
//   devices: gpt::attention_on), merged and projected by wo. rope (the rotary_embedding op)
//   rotates the pairs (j, j + D/2) of each head at position t by t * theta^(-2j/D)
//   ("rotate_half", as Hugging Face's Llama).
//
// Layouts (docs/llama.md):
// - tok_embeddings [V, C] and output [V, C]: rows over `model` (vocabulary-parallel lookup and
//   head: logits [B, T, V] sharded over `model` on V, never gathered by the cross-entropy).
// - wq [C, H D], w1 and w3 [C, F]: columns over `model` (whole heads; the SwiGLU's hidden
//   units); wo [H D, C] and w2 [F, C]: rows over `model`, so each layer's two outputs are
//   Partial sums over `model`.
// - wk, wv [C, K D]: columns over `model` when K is a multiple of the `model` size (whole kv
//   heads beside their query heads), else replicated (every device computes every kv head and
//   its query heads take theirs).
// - The norms: replicated. Activations: rows over `batch` (data parallel). The residual
//   stream is reduced once before each norm (an all-reduce of the Partial sum, two per layer as
//   Megatron's), so the norm and the residual add use the same whole value.
// config().dtype bf16 or f16: the matmuls of activations by weights (the projections, the
// SwiGLU's and the head) run in it (mixed_matmul); attention's q k^T and probabilities times v,
// the norms and RoPE stay f32, as in the GPT.
// n_head must be a multiple of the model dimension's size (kInvalidArgument). Mesh dimensions and
// the parameter registry (init, from_host, tokens, loss) as LanguageModel's
// (examples/gpt/language_model.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "language_model.h"
#include "llama_config.h"
#include "tessel/dtensor/dtensor.h"
#include "tessel/mesh/layout.h"
#include "tessel/runtime/runtime.h"

namespace tessel::llama {

using gpt::ForwardOptions;

class LlamaModel : public gpt::LanguageModel {
 public:
  LlamaModel(LlamaConfig config, Mesh mesh, Runtime* runtime = nullptr);

  // Parameters (names(), shapes(), layouts()) in Llama's order: "tok_embeddings",
  // "layers.0.attention_norm.weight", "layers.0.attention.wq", .wk, .wv, .wo,
  // "layers.0.ffn_norm.weight", "layers.0.feed_forward.w1", .w2, .w3, ..., "norm.weight",
  // "output" (untied only). init(): normal(0, 0.02), wo and w2 normal(0, 0.02 / sqrt(2
  // n_layer)), the norm weights 1.
  const LlamaConfig& config() const { return config_; }
  // Whether wk and wv are sharded over `model` (n_kv_head a multiple of its size).
  bool kv_heads_sharded() const { return kv_heads_sharded_; }
  int block_size() const override { return config_.block_size; }
  int vocab_size() const override { return config_.vocab_size; }
  // Logits [B, T, V] (vocabulary sharded over `model`). options: no effect (no dropout).
  DTensor logits(const std::vector<DTensor>& params, const DTensor& idx,
                 const ForwardOptions& options = {}) const override;

 private:
  // Where one layer's parameters ("layers.<i>.<name>") are in the params vectors.
  struct LayerParams {
    size_t attention_norm, wq, wk, wv, wo, ffn_norm, w1, w2, w3;
  };

  DTensor layer(const std::vector<DTensor>& p, const LayerParams& l, const DTensor& x) const;
  DTensor attention(const std::vector<DTensor>& p, const LayerParams& l, const DTensor& h) const;
  // x @ w (w^T when transpose_w) in config().dtype (mixed_matmul, language_model.h).
  DTensor project(const DTensor& x, const DTensor& w, bool transpose_w = false) const;
  // [B, T, K, D] -> [B, T, H, D]: kv head k serves query heads k g .. k g + g - 1.
  DTensor repeat_kv(const DTensor& x) const;
  // The residual stream [B, T, C]: rows over batch, whole (not Partial) over model.
  Layout residual_layout() const;

  LlamaConfig config_;
  bool kv_heads_sharded_;
  size_t tok_embeddings_ = 0, norm_ = 0, output_ = 0;  // output_: untied only
  std::vector<LayerParams> layers_;
};

}  // namespace tessel::llama
