// GptModel: parameters, their layouts and the forward pass (gpt_model.h).
#include "gpt_model.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "tessel/core/error.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/recompute_grad.h"
#include "tessel/dtensor/relayout.h"

namespace tessel::gpt {
namespace {

// fn(inputs), computed again in the backward pass instead of kept when `recompute`
// (recompute_grad.h).
DTensor call_maybe_recomputed(bool recompute, const DTensorFunction& fn,
                              const std::vector<DTensor>& inputs) {
  return recompute ? recompute_grad(fn)(inputs) : fn(inputs);
}

}  // namespace

GptModel::GptModel(GptConfig config, Mesh mesh, Runtime* runtime, bool sequence_parallel)
    : LanguageModel("gpt", std::move(mesh), runtime, config.fsdp),
      config_(std::move(config)),
      sequence_parallel_(sequence_parallel) {
  config_.validate();
  fused_attention_ =
      attention_on(config_.attention, this->mesh().device_type()) == Attention::kFused;
  const int64_t c = config_.n_embd;
  const double init_std = 0.02;  // nanoGPT's normal(0, 0.02)
  const double residual_std = 0.02 / std::sqrt(2.0 * config_.n_layer);
  const std::string& m = model_dim();
  const std::string& u = unsharded();
  wte_ = add_parameter("wte", Shape{config_.vocab_size, c}, {m, u}, init_std);
  wpe_ = add_parameter("wpe", Shape{config_.block_size, c}, {u, u}, init_std);
  for (int l = 0; l < config_.n_layer; ++l) {
    const std::string h = fmt::format("h.{}.", l);
    BlockParams b{};
    b.ln_1 = add_parameter(h + "ln_1.weight", Shape{c}, {u}, 0);
    b.attn_wq = add_parameter(h + "attn.wq", Shape{c, c}, {u, m}, init_std);
    b.attn_wk = add_parameter(h + "attn.wk", Shape{c, c}, {u, m}, init_std);
    b.attn_wv = add_parameter(h + "attn.wv", Shape{c, c}, {u, m}, init_std);
    b.attn_c_proj = add_parameter(h + "attn.c_proj", Shape{c, c}, {m, u}, residual_std);
    b.ln_2 = add_parameter(h + "ln_2.weight", Shape{c}, {u}, 0);
    b.mlp_c_fc = add_parameter(h + "mlp.c_fc", Shape{c, 4 * c}, {u, m}, init_std);
    b.mlp_c_proj = add_parameter(h + "mlp.c_proj", Shape{4 * c, c}, {m, u}, residual_std);
    blocks_.push_back(b);
  }
  ln_f_ = add_parameter("ln_f.weight", Shape{c}, {u}, 0);
  require_whole_heads(config_.n_head);
}

Layout GptModel::activation_layout() const {
  return Layout({batch_dim(), sequence_parallel_ ? model_dim() : unsharded(), unsharded()}, mesh());
}

DTensor GptModel::project(const DTensor& x, const DTensor& w, bool transpose_w) const {
  return mixed_matmul(x, w, config_.dtype, transpose_w);
}

DTensor GptModel::maybe_dropout(const DTensor& x, const ForwardOptions& options,
                                uint64_t site) const {
  if (!options.training || config_.dropout == 0) return x;
  return dropout(x, config_.dropout, dropout_seed(options, site));
}

uint64_t GptModel::dropout_seed(const ForwardOptions& options, uint64_t site) {
  return options.dropout_seed * 1000003 + site;
}

DTensor GptModel::attention_core(const std::vector<DTensor>& qkv, int layer,
                                 const ForwardOptions& options) const {
  const double scale = 1.0 / std::sqrt(double(config_.head_dim()));
  const bool drop = options.training && config_.dropout > 0;
  return causal_self_attention(qkv[0], qkv[1], qkv[2], scale, fused_attention_,
                               drop ? config_.dropout : 0.0,
                               dropout_seed(options, 3 * static_cast<uint64_t>(layer)));
}

DTensor GptModel::attention(const std::vector<DTensor>& in, int layer, const DTensor& h,
                            const ForwardOptions& options) const {
  const int64_t batch = h.shape()[0], t = h.shape()[1];
  const int64_t heads = config_.n_head, d = config_.head_dim();
  // [B, T, C] (C over model: whole heads) -> [B, T, heads, D] (a view).
  const auto split_heads = [&](const DTensor& x) { return reshape(x, Shape{batch, t, heads, d}); };
  const std::vector<DTensor> qkv{split_heads(project(h, in[kWq])), split_heads(project(h, in[kWk])),
                                 split_heads(project(h, in[kWv]))};
  // Selective recomputation: the backward pass computes the [B, H, T, T] maps again from q, k, v.
  const DTensor out = call_maybe_recomputed(
      config_.recompute == Recompute::kSelective && !fused_attention_,
      [this, layer, options](const std::vector<DTensor>& in) {
        return attention_core(in, layer, options);
      },
      qkv);
  const DTensor y = reshape(out, Shape{batch, t, heads * d});
  return project(y, in[kAttnProj]);  // row-parallel: Partial(sum) over model
}

DTensor GptModel::block(const std::vector<DTensor>& stored, int layer,
                        const ForwardOptions& options) const {
  // The block's parameters in their compute layouts (with fsdp, all-gathered here, inside what
  // full recomputation runs again: the gathered copies are then dropped after the block's
  // forward pass and gathered again in its backward pass).
  const BlockParams& b = blocks_[static_cast<size_t>(layer)];
  std::vector<DTensor> in = gathered(
      std::vector<DTensor>(stored.begin() + kLn1, stored.begin() + kBlockInputs),
      {b.ln_1, b.attn_wq, b.attn_wk, b.attn_wv, b.attn_c_proj, b.ln_2, b.mlp_c_fc, b.mlp_c_proj});
  in.insert(in.begin() + kX, stored[kX]);
  const DTensor& x = in[kX];
  const Layout whole_sequence({batch_dim(), unsharded(), unsharded()}, mesh());
  // With sequence parallelism the norms run on sequence shards; the column-parallel matmuls
  // take the whole sequence (all-gather) and the row-parallel outputs go back to sequence
  // shards (reduce-scatter) instead of being all-reduced.
  const auto to_block_input = [&](const DTensor& h) {
    return sequence_parallel_ ? relayout(h, whole_sequence) : h;
  };
  const auto to_residual = [&](const DTensor& out) {
    return sequence_parallel_ ? relayout(out, activation_layout()) : out;
  };
  const uint64_t site = 3 * static_cast<uint64_t>(layer);
  DTensor a = attention(in, layer, to_block_input(layer_norm(x, in[kLn1])), options);
  DTensor r = add(x, maybe_dropout(to_residual(a), options, site + 1));
  const DTensor h2 = to_block_input(layer_norm(r, in[kLn2]));
  const DTensor m = project(gelu(project(h2, in[kFc]), /*approximate=*/false), in[kMlpProj]);
  return add(r, maybe_dropout(to_residual(m), options, site + 2));
}

DTensor GptModel::logits(const std::vector<DTensor>& p, const DTensor& idx,
                         const ForwardOptions& options) const {
  check_inputs(p, idx);
  const DTensor wte = gathered(p[wte_], wte_);  // once for the lookup and the tied head
  return head_with(wte, p,
                   blocks(p, embed_with(wte, p, idx, options), 0, config_.n_layer, options));
}

DTensor GptModel::embed(const std::vector<DTensor>& p, const DTensor& idx,
                        const ForwardOptions& options) const {
  check_inputs(p, idx);
  return embed_with(gathered(p[wte_], wte_), p, idx, options);
}

DTensor GptModel::head(const std::vector<DTensor>& p, const DTensor& x) const {
  return head_with(gathered(p[wte_], wte_), p, x);
}

DTensor GptModel::embed_with(const DTensor& wte, const std::vector<DTensor>& p, const DTensor& idx,
                             const ForwardOptions& options) const {
  const int64_t t = idx.shape().dim(1);
  const DTensor wpe = gathered(p[wpe_], wpe_);
  const DTensor pos = t == config_.block_size ? wpe : slice(wpe, {0, 0}, {t, config_.n_embd});
  // Token rows: a Partial sum over model (each device looks up the rows it holds); the position
  // embedding is added once.
  DTensor x = add(embedding_lookup(wte, idx), pos);
  if (sequence_parallel_) x = relayout(x, activation_layout());
  return maybe_dropout(x, options, 3 * static_cast<uint64_t>(config_.n_layer));
}

DTensor GptModel::blocks(const std::vector<DTensor>& p, DTensor x, int first, int last,
                         const ForwardOptions& options) const {
  if (first < 0 || last > config_.n_layer || first > last) {
    throw Error(ErrorCode::kInvalidArgument, component(),
                fmt::format("layers {} .. {} are not a range of the {} layers", first, last - 1,
                            config_.n_layer));
  }
  for (int l = first; l < last; ++l) {
    const BlockParams& b = blocks_[static_cast<size_t>(l)];
    const std::vector<DTensor> in{
        x,         p[b.ln_1],     p[b.attn_wq],   p[b.attn_wk], p[b.attn_wv], p[b.attn_c_proj],
        p[b.ln_2], p[b.mlp_c_fc], p[b.mlp_c_proj]};
    // Full recomputation: the backward pass runs the block again from its input (and weights).
    x = call_maybe_recomputed(
        config_.recompute == Recompute::kFull,
        [this, l, options](const std::vector<DTensor>& again) { return block(again, l, options); },
        in);
  }
  return x;
}

DTensor GptModel::head_with(const DTensor& wte, const std::vector<DTensor>& p,
                            const DTensor& x) const {
  DTensor h = layer_norm(x, gathered(p[ln_f_], ln_f_));
  if (sequence_parallel_) {
    h = relayout(h, Layout({batch_dim(), unsharded(), unsharded()}, mesh()));
  }
  return project(h, wte, /*transpose_w=*/true);  // tied head: [B, T, V], V over model
}

}  // namespace tessel::gpt
