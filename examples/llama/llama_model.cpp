// LlamaModel: parameters, their layouts and the forward pass (llama_model.h).
#include "llama_model.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "gpt_config.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/relayout.h"

namespace tessel::llama {

LlamaModel::LlamaModel(LlamaConfig config, Mesh mesh, Runtime* runtime)
    : LanguageModel("llama", std::move(mesh), runtime, config.fsdp), config_(std::move(config)) {
  config_.validate();
  require_whole_heads(config_.n_head);
  kv_heads_sharded_ = config_.n_kv_head % model_size() == 0;
  const int64_t c = config_.n_embd, f = config_.ffn_hidden;
  const int64_t q_width = int64_t{config_.n_head} * config_.head_dim();
  const int64_t kv_width = int64_t{config_.n_kv_head} * config_.head_dim();
  const double init_std = 0.02;
  const double residual_std = 0.02 / std::sqrt(2.0 * config_.n_layer);
  const std::string& m = model_dim();
  const std::string& u = unsharded();
  const std::string& kv = kv_heads_sharded_ ? m : u;
  tok_embeddings_ = add_parameter("tok_embeddings", Shape{config_.vocab_size, c}, {m, u}, init_std);
  for (int i = 0; i < config_.n_layer; ++i) {
    const std::string prefix = fmt::format("layers.{}.", i);
    LayerParams l{};
    l.attention_norm = add_parameter(prefix + "attention_norm.weight", Shape{c}, {u}, 0);
    l.wq = add_parameter(prefix + "attention.wq", Shape{c, q_width}, {u, m}, init_std);
    l.wk = add_parameter(prefix + "attention.wk", Shape{c, kv_width}, {u, kv}, init_std);
    l.wv = add_parameter(prefix + "attention.wv", Shape{c, kv_width}, {u, kv}, init_std);
    l.wo = add_parameter(prefix + "attention.wo", Shape{q_width, c}, {m, u}, residual_std);
    l.ffn_norm = add_parameter(prefix + "ffn_norm.weight", Shape{c}, {u}, 0);
    l.w1 = add_parameter(prefix + "feed_forward.w1", Shape{c, f}, {u, m}, init_std);
    l.w2 = add_parameter(prefix + "feed_forward.w2", Shape{f, c}, {m, u}, residual_std);
    l.w3 = add_parameter(prefix + "feed_forward.w3", Shape{c, f}, {u, m}, init_std);
    layers_.push_back(l);
  }
  norm_ = add_parameter("norm.weight", Shape{c}, {u}, 0);
  if (!config_.tie_embeddings) {
    output_ = add_parameter("output", Shape{config_.vocab_size, c}, {m, u}, init_std);
  }
}

Layout LlamaModel::residual_layout() const {
  return Layout({batch_dim(), unsharded(), unsharded()}, mesh());
}

DTensor LlamaModel::repeat_kv(const DTensor& x) const {
  const int64_t groups = config_.n_head / config_.n_kv_head;
  if (groups == 1) return x;
  const Shape& s = x.shape();  // [B, T, K, D]
  const DTensor one = reshape(x, Shape{s[0], s[1], s[2], 1, s[3]});
  return reshape(concat(std::vector<DTensor>(static_cast<size_t>(groups), one), 3),
                 Shape{s[0], s[1], s[2] * groups, s[3]});
}

DTensor LlamaModel::project(const DTensor& x, const DTensor& w, bool transpose_w) const {
  return gpt::mixed_matmul(x, w, config_.dtype, transpose_w);
}

DTensor LlamaModel::attention(const std::vector<DTensor>& p, const LayerParams& l,
                              const DTensor& h) const {
  const int64_t batch = h.shape()[0], t = h.shape()[1];
  const int64_t heads = config_.n_head, d = config_.head_dim();
  // [B, T, n D] (columns over model: whole heads, or replicated kv heads) -> [B, T, n, D].
  const auto heads_of = [&](size_t w, int64_t n) {
    return reshape(project(h, gathered(p[w], w)), Shape{batch, t, n, d});
  };
  const DTensor q = rotary_embedding(heads_of(l.wq, heads), config_.rope_theta);
  const DTensor k =
      repeat_kv(rotary_embedding(heads_of(l.wk, config_.n_kv_head), config_.rope_theta));
  const DTensor v = repeat_kv(heads_of(l.wv, config_.n_kv_head));
  // One fused op on the [B, T, heads, D] views (no [B, H, T, T] map kept), or the composed ops
  // on [B, heads, T, D] where it has no kernel. With replicated kv heads, either takes each
  // device's query heads' share of k and v (a local slice): no communication.
  const double scale = 1.0 / std::sqrt(double(d));
  const bool fused =
      gpt::attention_on(gpt::Attention::kFused, mesh().device_type()) == gpt::Attention::kFused;
  const DTensor y =
      reshape(gpt::causal_self_attention(q, k, v, scale, fused), Shape{batch, t, heads * d});
  return project(y, gathered(p[l.wo], l.wo));  // row-parallel: Partial(sum) over model
}

DTensor LlamaModel::layer(const std::vector<DTensor>& p, const LayerParams& l,
                          const DTensor& x) const {
  // Each Partial residual is reduced once, here, for both the norm and the residual add.
  // With fsdp the layer's parameters are gathered from their shards together as it starts (one
  // fused all-gather; their gradients are reduce-scattered together too, language_model.h).
  const std::vector<size_t> mine{l.attention_norm, l.wq, l.wk, l.wv, l.wo,
                                 l.ffn_norm,       l.w1, l.w2, l.w3};
  std::vector<DTensor> stored;
  for (size_t index : mine) stored.push_back(p[index]);
  std::vector<DTensor> q = p;
  const std::vector<DTensor> moved = gathered(stored, mine);
  for (size_t i = 0; i < mine.size(); ++i) q[mine[i]] = moved[i];
  const auto w = [&](size_t index) { return q[index]; };
  const DTensor r = relayout(x, residual_layout());
  const DTensor a =
      relayout(add(r, attention(q, l, rms_norm(r, w(l.attention_norm), config_.norm_eps))),
               residual_layout());
  const DTensor h = rms_norm(a, w(l.ffn_norm), config_.norm_eps);
  const DTensor ffn = project(multiply(silu(project(h, w(l.w1))), project(h, w(l.w3))), w(l.w2));
  return add(a, ffn);  // Partial(sum) over model
}

DTensor LlamaModel::logits(const std::vector<DTensor>& p, const DTensor& idx,
                           const ForwardOptions& /*options*/) const {
  check_inputs(p, idx);
  // Token rows: a Partial sum over model (each device looks up the rows it holds).
  const DTensor embeddings = gathered(p[tok_embeddings_], tok_embeddings_);
  DTensor x = embedding_lookup(embeddings, idx);
  for (const LayerParams& l : layers_) x = layer(p, l, x);
  const DTensor h =
      rms_norm(relayout(x, residual_layout()), gathered(p[norm_], norm_), config_.norm_eps);
  const DTensor head = config_.tie_embeddings ? embeddings : gathered(p[output_], output_);
  return project(h, head, true);  // [B, T, V], V over model
}

}  // namespace tessel::llama
