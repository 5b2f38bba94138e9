// LlamaModel: parameters, their layouts and the forward pass (llama_model.h).
#include "llama_model.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "tessel/core/error.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/relayout.h"

namespace tessel::llama {
namespace {

// cos (or sin) of t * theta^(-2j/D) for t < block_size, j < D/2, as [block_size, 1, D/2].
Tensor rotation_table(const LlamaConfig& c, double (*fn)(double)) {
  const int64_t half = c.head_dim() / 2;
  std::vector<double> values;
  for (int64_t t = 0; t < c.block_size; ++t) {
    for (int64_t j = 0; j < half; ++j) {
      const double frequency = std::pow(c.rope_theta, -2.0 * double(j) / double(c.head_dim()));
      values.push_back(fn(double(t) * frequency));
    }
  }
  return Tensor::from_vector<double>(values, Shape{c.block_size, 1, half});
}

}  // namespace

LlamaModel::LlamaModel(LlamaConfig config, Mesh mesh, Runtime* runtime)
    : LanguageModel("llama", std::move(mesh), runtime), config_(std::move(config)) {
  config_.validate();
  if (config_.n_head % model_size() != 0) {
    throw Error(ErrorCode::kInvalidArgument, "llama",
                fmt::format("n_head {} is not a multiple of the model dimension's size {}: "
                            "heads are split whole",
                            config_.n_head, model_size()));
  }
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
  const Layout replicated = Layout::replicated(this->mesh(), 3);
  const Tensor cos_table = rotation_table(config_, [](double a) { return std::cos(a); });
  const Tensor sin_table = rotation_table(config_, [](double a) { return std::sin(a); });
  cos_f64_ = copy_to_mesh(cos_table, replicated, *this->runtime());
  sin_f64_ = copy_to_mesh(sin_table, replicated, *this->runtime());
  cos_f32_ = copy_to_mesh(cos_table.astype(DType::kF32), replicated, *this->runtime());
  sin_f32_ = copy_to_mesh(sin_table.astype(DType::kF32), replicated, *this->runtime());
}

Layout LlamaModel::residual_layout() const {
  return Layout({batch_dim(), unsharded(), unsharded()}, mesh());
}

DTensor LlamaModel::rms_norm(const DTensor& x, const DTensor& weight) const {
  const DTensor mean_square = reduce_mean(square(x), {-1}, /*keepdims=*/true);
  return multiply(multiply(x, rsqrt(add(mean_square, config_.norm_eps))), weight);
}

DTensor LlamaModel::rope(const DTensor& x) const {
  const Shape& s = x.shape();
  const int64_t t = s[1], half = s[3] / 2;
  const bool f64 = x.dtype() == DType::kF64;
  DTensor cos_t = f64 ? cos_f64_ : cos_f32_, sin_t = f64 ? sin_f64_ : sin_f32_;
  if (!f64 && x.dtype() != DType::kF32) {
    cos_t = cast(cos_t, x.dtype());
    sin_t = cast(sin_t, x.dtype());
  }
  if (t < config_.block_size) {
    cos_t = slice(cos_t, {0, 0, 0}, {t, 1, half});
    sin_t = slice(sin_t, {0, 0, 0}, {t, 1, half});
  }
  const DTensor x1 = slice(x, {0, 0, 0, 0}, {s[0], t, s[2], half});
  const DTensor x2 = slice(x, {0, 0, 0, half}, {s[0], t, s[2], half});
  return concat({subtract(multiply(x1, cos_t), multiply(x2, sin_t)),
                 add(multiply(x2, cos_t), multiply(x1, sin_t))},
                3);
}

DTensor LlamaModel::repeat_kv(const DTensor& x) const {
  const int64_t groups = config_.n_head / config_.n_kv_head;
  if (groups == 1) return x;
  const Shape& s = x.shape();
  const DTensor one = reshape(x, Shape{s[0], s[1], 1, s[2], s[3]});
  return reshape(concat(std::vector<DTensor>(static_cast<size_t>(groups), one), 2),
                 Shape{s[0], s[1] * groups, s[2], s[3]});
}

DTensor LlamaModel::attention(const std::vector<DTensor>& p, const LayerParams& l,
                              const DTensor& h) const {
  const int64_t batch = h.shape()[0], t = h.shape()[1];
  const int64_t heads = config_.n_head, d = config_.head_dim();
  // [B, T, n D] (columns over model: whole heads, or replicated kv heads) -> [B, T, n, D].
  const auto project = [&](size_t w, int64_t n) {
    return reshape(matmul(h, p[w]), Shape{batch, t, n, d});
  };
  const auto heads_first = [](const DTensor& x) { return transpose(x, {0, 2, 1, 3}); };
  const DTensor q = heads_first(rope(project(l.wq, heads)));
  const DTensor k = repeat_kv(heads_first(rope(project(l.wk, config_.n_kv_head))));
  const DTensor v = repeat_kv(heads_first(project(l.wv, config_.n_kv_head)));
  // With replicated kv heads, the matmuls take each device's query heads' share of k and v (a
  // local slice): no communication.
  const DTensor att = causal_softmax(matmul(q, k, false, true), 1.0 / std::sqrt(double(d)));
  const DTensor y = reshape(heads_first(matmul(att, v)), Shape{batch, t, heads * d});
  return matmul(y, p[l.wo]);  // row-parallel: Partial(sum) over model
}

DTensor LlamaModel::layer(const std::vector<DTensor>& p, const LayerParams& l,
                          const DTensor& x) const {
  // Each Partial residual is reduced once, here, for both the norm and the residual add.
  const DTensor r = relayout(x, residual_layout());
  const DTensor a =
      relayout(add(r, attention(p, l, rms_norm(r, p[l.attention_norm]))), residual_layout());
  const DTensor h = rms_norm(a, p[l.ffn_norm]);
  const DTensor ffn = matmul(multiply(silu(matmul(h, p[l.w1])), matmul(h, p[l.w3])), p[l.w2]);
  return add(a, ffn);  // Partial(sum) over model
}

DTensor LlamaModel::logits(const std::vector<DTensor>& p, const DTensor& idx,
                           const ForwardOptions& /*options*/) const {
  check_inputs(p, idx);
  // Token rows: a Partial sum over model (each device looks up the rows it holds).
  DTensor x = embedding_lookup(p[tok_embeddings_], idx);
  for (const LayerParams& l : layers_) x = layer(p, l, x);
  const DTensor h = rms_norm(relayout(x, residual_layout()), p[norm_]);
  const DTensor& head = p[config_.tie_embeddings ? tok_embeddings_ : output_];
  return matmul(h, head, false, true);  // [B, T, V], V over model
}

}  // namespace tessel::llama
