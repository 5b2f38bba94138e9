// A GPT-2-style language model written with tessel's ops: nanoGPT's model.py (bias=False) laid
// out on a (batch, model) mesh with Megatron's tensor parallelism.
//
//   Mesh mesh = Mesh::create({{"batch", 2}, {"model", 2}});
//   GptModel model(GptConfig::preset("tiny"), mesh);
//   std::vector<DTensor> params = model.init(/*seed=*/1337);
//   DTensor loss = model.loss(params, idx, targets);           // idx, targets: [B, T] i32
//
// Layouts (the parameter table of docs/gpt.md):
// - wte [V, C]: rows over `model` (vocabulary-parallel, 33/32 rows of 65 on two devices); used
//   by the token lookup (a Partial sum over `model`) and, tied, as the output head: logits
//   [B, T, V] sharded over `model` on V, whose cross-entropy never gathers them.
// - q, k, v [C, C] and the MLP's c_fc [C, 4C]: columns over `model` (whole heads per device);
//   attention's c_proj [C, C] and the MLP's c_proj [4C, C]: rows over `model`, so each block's
//   two outputs are Partial sums over `model`, reduced once by the next layer norm.
// - wpe, the layer norms: replicated.
// - Activations: rows over `batch` (data parallel); every gradient comes back in its
//   parameter's layout, the data-parallel sums reduced in fused buckets.
// With sequence_parallel, the layer norms and dropouts run on sequence shards over `model`
// ([B, T/m, C]) instead of redundantly on every model device.
// config().recompute chooses what a training step recomputes in its backward pass instead of
// keeping (recompute_grad.h): attention's [B, H, T, T] part, or whole blocks. The backward pass
// then calls this model again, so the model must outlive the gradient computation.
// config().fsdp stores every parameter sharded over `batch` as well (ZeRO-3, language_model.h):
// each block gathers its parameters when it starts, the gradients are reduce-scattered.
// config().dtype bf16 or f16: the matmuls of activations by weights run in it (project()); the
// attention's q k^T and probabilities times v stay f32.
// Mesh dimensions: `batch` and `model` are looked up by name; a missing one counts as size 1.
// The parameter registry (names, shapes, layouts, init, from_host), tokens() and loss() are
// LanguageModel's (language_model.h).
// n_head must be a multiple of the model dimension's size; the batch size of a call must be a
// multiple of the batch dimension's (else kInvalidArgument from the layouts).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpt_config.h"
#include "language_model.h"
#include "tessel/dtensor/dtensor.h"
#include "tessel/mesh/layout.h"
#include "tessel/runtime/runtime.h"

namespace tessel::gpt {

class GptModel : public LanguageModel {
 public:
  GptModel(GptConfig config, Mesh mesh, Runtime* runtime = nullptr, bool sequence_parallel = false);

  // Parameters (names(), shapes(), layouts()) in nanoGPT's order: "wte", "wpe",
  // "h.0.ln_1.weight", "h.0.attn.wq", ..., "ln_f.weight". init() is nanoGPT's: normal(0, 0.02),
  // the residual projections normal(0, 0.02 / sqrt(2 n_layer)), layer norm weights 1.
  const GptConfig& config() const { return config_; }
  int block_size() const override { return config_.block_size; }
  int vocab_size() const override { return config_.vocab_size; }
  // Logits [B, T, V] (vocabulary sharded over `model`): head(blocks(embed(idx), 0, n_layer)).
  DTensor logits(const std::vector<DTensor>& params, const DTensor& idx,
                 const ForwardOptions& options = {}) const override;

  // The pieces of logits() a pipeline stage runs (gpt_pipeline.h); each reads only the
  // parameters it uses (the others in `params` may be null). embed: token and position
  // embeddings of idx [B, T] (and their dropout), the residual stream [B, T, C]; blocks: layers
  // first .. last - 1 on it; head: the final layer norm and the tied head, logits [B, T, V].
  DTensor embed(const std::vector<DTensor>& params, const DTensor& idx,
                const ForwardOptions& options = {}) const;
  DTensor blocks(const std::vector<DTensor>& params, DTensor x, int first, int last,
                 const ForwardOptions& options = {}) const;
  DTensor head(const std::vector<DTensor>& params, const DTensor& x) const;

 private:
  // Where one block's parameters ("h.<layer>.<name>") are in the params vectors.
  struct BlockParams {
    size_t ln_1, attn_wq, attn_wk, attn_wv, attn_c_proj, ln_2, mlp_c_fc, mlp_c_proj;
  };

  // A block's inputs as block() takes them (and recompute_grad passes them): x, then the
  // block's parameters.
  enum BlockInput { kX, kLn1, kWq, kWk, kWv, kAttnProj, kLn2, kFc, kMlpProj, kBlockInputs };

  // Block `layer` on its inputs (BlockInput order; the parameters in their stored layouts).
  DTensor block(const std::vector<DTensor>& stored, int layer, const ForwardOptions& options) const;
  DTensor attention(const std::vector<DTensor>& in, int layer, const DTensor& h,
                    const ForwardOptions& options) const;
  // softmax(q k^T / sqrt(D)) (causal, dropped out) times v: attention's [B, H, T, T] part, from
  // {q, k, v}, each [B, T, heads, D]; one causal_attention op where fused_attention_.
  DTensor attention_core(const std::vector<DTensor>& qkv, int layer,
                         const ForwardOptions& options) const;
  // x @ w (w^T when transpose_w) in config().dtype (mixed_matmul, language_model.h).
  DTensor project(const DTensor& x, const DTensor& w, bool transpose_w = false) const;
  DTensor maybe_dropout(const DTensor& x, const ForwardOptions& options, uint64_t site) const;
  // The dropout seed of `site` (3 per layer) in a training step.
  static uint64_t dropout_seed(const ForwardOptions& options, uint64_t site);
  // embed() and head() with the token embedding already in its compute layout (logits() gathers
  // it once for both).
  DTensor embed_with(const DTensor& wte, const std::vector<DTensor>& params, const DTensor& idx,
                     const ForwardOptions& options) const;
  DTensor head_with(const DTensor& wte, const std::vector<DTensor>& params, const DTensor& x) const;
  // Layout of a [B, T, C] activation: rows over batch; with sequence parallelism T over model.
  Layout activation_layout() const;

  GptConfig config_;
  // config().attention is fused and the mesh's devices have its kernel (GPU devices: not yet).
  bool fused_attention_ = false;
  bool sequence_parallel_;
  size_t wte_ = 0, wpe_ = 0, ln_f_ = 0;  // indices of the parameters outside the blocks
  std::vector<BlockParams> blocks_;      // one per layer
};

}  // namespace tessel::gpt
