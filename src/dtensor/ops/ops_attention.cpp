// The attention op family (registered by register_attention_ops): causal_softmax, the masked
// softmax of causal self-attention in one pass, instead of a [T, T] mask tensor, an add and a
// softmax; and rotary_embedding, the rotary position embedding (RoPE) of queries and keys in one
// pass, instead of slices, four products by broadcast cos/sin tables and a concat (whose
// backward would also compute the tables' gradients).
//   "causal_softmax"(scores [..., Tq, Tk]) -> softmax of scale * scores over the last axis
//   (OpAttrs::scale, unset: 1; attention's 1 / sqrt(head_dim) without a pass of its own), where
//   key j is visible
//   to query i when j <= i + (Tk - Tq) (the last query sees every key); invisible keys get
//   probability 0 (nanoGPT's masked_fill(-inf) before the softmax). A query that sees no key
//   (Tq > Tk) gets a row of zeros.
//
// Sharding rule: the key axis (last) is demanded whole; every other axis keeps its sharding
// (batch, heads, and the query axis: a kernel finds its rows' global positions from its block's
// offsets); a Partial input is reduced first (nonlinear). The output has the input's layout.
// VJP: "causal_softmax_grad"(s, g) -> scale * s * (g - sum(g * s, -1)) in one pass (softmax's
// gradient; masked entries have s = 0, so theirs is 0), with the same rule. float32 rows run the
// vectorised loops of cpu_row_math.h.
//
//   "rotary_embedding"(x [..., T, heads, D]) -> in each head, the pairs (x_j, x_{j + D/2}), j <
//   D/2, at position t (x's index on axis -3) rotated by the angle a = t * theta^(-2j/D):
//   y_j = x_j cos a - x_{j+D/2} sin a, y_{j+D/2} = x_{j+D/2} cos a + x_j sin a ("rotate_half", as
//   Hugging Face's Llama and GPT-NeoX). OpAttrs::value: theta (> 0); OpAttrs::scale: +1, or -1
//   for the rotation back (the VJP: a rotation's transpose is its inverse).
// Sharding rule: the last axis (D) is demanded whole (a pair spans both halves); every other axis
// keeps its sharding, the position axis included (a kernel finds its rows' global positions from
// its block's offset); a Partial input is reduced first. The output has the input's layout.
// Kernels compute the block's cos/sin table [T_local, D/2] in double once, then rotate.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "dtensor/framework/op_util.h"
#include "dtensor/ops/cpu_row_math.h"
#include "dtensor/ops/cpu_vector_math.h"
#include "dtensor/ops/op_families.h"
#include "tessel/core/parallel.h"
#include "tessel/dtensor/ops.h"

namespace tessel {
namespace detail {
namespace {

constexpr std::string_view kCausalSoftmax = "causal_softmax";
constexpr std::string_view kCausalSoftmaxGrad = "causal_softmax_grad";
constexpr std::string_view kRotaryEmbedding = "rotary_embedding";

// One row of the gradient: dx = scale * s * (g - sum(g * s)) over the visible keys, 0 after.
template <typename T>
void causal_grad_row(const T* s, const T* g, T* dx, int64_t keys, int64_t visible, T scale) {
  visible = std::clamp<int64_t>(visible, 0, keys);
  T inner = 0;
  for (int64_t j = 0; j < visible; ++j) inner += g[j] * s[j];
  for (int64_t j = 0; j < visible; ++j) dx[j] = scale * s[j] * (g[j] - inner);
  std::fill(dx + visible, dx + keys, T(0));
}

// Calls row(r, visible) for every row r of the output block (rows of `keys`), `visible` the
// number of keys its query sees, split over the intra-op threads.
template <typename Row>
void for_each_query_row(const Tensor& out, const LocalContext& context, const Row& row) {
  const int rank = out.rank();
  const int64_t keys = out.shape()[rank - 1];
  const int64_t local_queries = out.shape()[rank - 2];
  if (out.num_elements() == 0) return;
  const int64_t queries = context.output_shape[rank - 2];
  const int64_t first_query = context.output_block.offsets[static_cast<size_t>(rank - 2)];
  const int64_t rows = out.num_elements() / keys;
  parallel_for(rows, vec::rows_per_range(keys), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      row(r, first_query + r % local_queries + (keys - queries) + 1);
    }
  });
}

void causal_softmax_kernel(const Tensor& in, Tensor& out, double scale,
                           const LocalContext& context) {
  const int64_t keys = out.rank() > 0 ? out.shape()[out.rank() - 1] : 0;
  dispatch_float(out.dtype(), kCausalSoftmax, [&]<typename T>() {
    const T* x = in.data<T>();
    T* y = out.data<T>();
    for_each_query_row(out, context, [&](int64_t r, int64_t visible) {
      vec::causal_softmax_row_of(x + r * keys, y + r * keys, keys, visible, static_cast<T>(scale));
    });
  });
}

void causal_softmax_grad_kernel(const Tensor& s_in, const Tensor& g_in, Tensor& out, double scale,
                                const LocalContext& context) {
  const int64_t keys = out.rank() > 0 ? out.shape()[out.rank() - 1] : 0;
  dispatch_float(out.dtype(), kCausalSoftmaxGrad, [&]<typename T>() {
    const T* s = s_in.data<T>();
    const T* g = g_in.data<T>();
    T* dx = out.data<T>();
    for_each_query_row(out, context, [&](int64_t r, int64_t visible) {
      const int64_t at = r * keys;
      if constexpr (std::is_same_v<T, float>) {
        vec::softmax_grad_row(s + at, g + at, dx + at, keys, static_cast<T>(scale));
      } else {
        causal_grad_row(s + at, g + at, dx + at, keys, visible, static_cast<T>(scale));
      }
    });
  });
}

// The layout the ops demand of their inputs and give their output: x's with the last axis (the
// keys; rotary_embedding's head_dim) whole and no Partial.
Layout keys_whole(const Layout& x) {
  SpecList specs = spec_list(x);
  specs.back().clear();
  return make_layout(x.mesh(), specs);
}

void register_causal_softmax_grad(OpRegistry& registry) {
  OpDef def;
  def.name = std::string(kCausalSoftmaxGrad);
  def.num_inputs = 2;
  def.infer = [](const std::vector<TensorSpec>& in, const OpAttrs&) {
    if (in[0].shape.rank() < 2 || in[1].shape != in[0].shape || in[1].dtype != in[0].dtype) {
      throw_invalid(kCausalSoftmaxGrad,
                    "the softmax output ({} {}) and its gradient ({} {}) must be one shape of "
                    "rank >= 2 and one dtype",
                    dtype_name(in[0].dtype), in[0].shape.to_string(), dtype_name(in[1].dtype),
                    in[1].shape.to_string());
    }
    require_float(in[0].dtype, kCausalSoftmaxGrad, "dtype");
    return TensorSpec{in[0].shape, in[0].dtype, {}};
  };
  def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
    const Layout want = keys_whole(in[0].layout);
    return ShardingDecision{{want, want}, want};
  };
  def.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                  const LocalContext& context) {
    causal_softmax_grad_kernel(in[0], in[1], out, attrs.scale.value_or(1.0), context);
  };
  registry.add(std::move(def));
}

// y = x rotated per position (direction +1) or back (-1); x and y [..., T, heads, D] blocks.
void rotary_kernel(const Tensor& in, Tensor& out, double theta, double direction,
                   const LocalContext& context) {
  const int rank = out.rank();
  if (out.num_elements() == 0) return;
  const int64_t d = out.shape()[rank - 1], half = d / 2, heads = out.shape()[rank - 2];
  const int64_t positions = out.shape()[rank - 3];
  const int64_t first = context.output_block.offsets[static_cast<size_t>(rank - 3)];
  std::vector<double> cos_table(static_cast<size_t>(positions * half));
  std::vector<double> sin_table(cos_table.size());
  for (int64_t j = 0; j < half; ++j) {
    const double frequency =
        std::pow(theta, -2.0 * static_cast<double>(j) / static_cast<double>(d));
    for (int64_t t = 0; t < positions; ++t) {
      const double angle = static_cast<double>(first + t) * frequency;
      cos_table[static_cast<size_t>(t * half + j)] = std::cos(angle);
      sin_table[static_cast<size_t>(t * half + j)] = direction * std::sin(angle);
    }
  }
  const int64_t rows = out.num_elements() / d;  // one row per (..., t, head)
  dispatch_float(out.dtype(), kRotaryEmbedding, [&]<typename T>() {
    const T* x = in.data<T>();
    T* y = out.data<T>();
    parallel_for(rows, vec::rows_per_range(d), [&](int64_t b, int64_t e) {
      std::vector<T> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
      int64_t loaded = -1;
      for (int64_t r = b; r < e; ++r) {
        const int64_t t = (r / heads) % positions;
        if (t != loaded) {
          for (int64_t j = 0; j < half; ++j) {
            c[static_cast<size_t>(j)] =
                static_cast<T>(cos_table[static_cast<size_t>(t * half + j)]);
            s[static_cast<size_t>(j)] =
                static_cast<T>(sin_table[static_cast<size_t>(t * half + j)]);
          }
          loaded = t;
        }
        const T* x1 = x + r * d;
        const T* x2 = x1 + half;
        T* y1 = y + r * d;
        T* y2 = y1 + half;
        for (int64_t j = 0; j < half; ++j) {
          y1[j] = x1[j] * c[static_cast<size_t>(j)] - x2[j] * s[static_cast<size_t>(j)];
          y2[j] = x2[j] * c[static_cast<size_t>(j)] + x1[j] * s[static_cast<size_t>(j)];
        }
      }
    });
  });
}

void register_rotary_embedding(OpRegistry& registry) {
  OpDef def;
  def.name = std::string(kRotaryEmbedding);
  def.num_inputs = 1;
  def.infer = [](const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
    const Shape& s = in[0].shape;
    if (s.rank() < 3 || s[s.rank() - 1] % 2 != 0) {
      throw_invalid(kRotaryEmbedding,
                    "x must be [..., positions, heads, head_dim] with an even head_dim, got {}",
                    s.to_string());
    }
    require_float(in[0].dtype, kRotaryEmbedding, "dtype");
    const double theta = attrs.value.value_or(0.0);
    if (!(theta > 0) || !std::isfinite(theta)) {
      throw_invalid(kRotaryEmbedding, "theta must be a finite number > 0, got {}", theta);
    }
    return TensorSpec{s, in[0].dtype, {}};
  };
  def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
    const Layout want = keys_whole(in[0].layout);
    return ShardingDecision{{want}, want};
  };
  def.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                  const LocalContext& context) {
    rotary_kernel(in[0], out, attrs.value.value_or(0.0), attrs.scale.value_or(1.0), context);
  };
  def.vjp = [](const VjpArgs& a) {
    OpAttrs back = *a.attrs;
    back.scale = -a.attrs->scale.value_or(1.0);
    return std::vector<DTensor>{call_op(kRotaryEmbedding, {a.grad}, back)};
  };
  registry.add(std::move(def));
}

}  // namespace

void register_attention_ops(OpRegistry& registry) {
  OpDef def;
  def.name = std::string(kCausalSoftmax);
  def.num_inputs = 1;
  def.infer = [](const std::vector<TensorSpec>& in, const OpAttrs&) {
    if (in[0].shape.rank() < 2) {
      throw_invalid(kCausalSoftmax, "scores must have rank >= 2 ([..., queries, keys]), got {}",
                    in[0].shape.to_string());
    }
    require_float(in[0].dtype, kCausalSoftmax, "dtype");
    return TensorSpec{in[0].shape, in[0].dtype, {}};
  };
  def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
    const Layout want = keys_whole(in[0].layout);
    return ShardingDecision{{want}, want};
  };
  def.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                  const LocalContext& context) {
    causal_softmax_kernel(in[0], out, attrs.scale.value_or(1.0), context);
  };
  def.vjp = [](const VjpArgs& a) {
    return std::vector<DTensor>{call_op(kCausalSoftmaxGrad, {a.output, a.grad}, *a.attrs)};
  };
  def.saves = VjpSaves::output_only();  // the probabilities; the scores are not kept
  registry.add(std::move(def));
  register_causal_softmax_grad(registry);
  register_rotary_embedding(registry);
}

}  // namespace detail

DTensor causal_softmax(const DTensor& scores, double scale) {
  OpAttrs attrs;
  if (scale != 1.0) attrs.scale = scale;
  return call_op(detail::kCausalSoftmax, {scores}, attrs);
}

DTensor rotary_embedding(const DTensor& x, double theta) {
  OpAttrs attrs;
  attrs.value = theta;
  return call_op(detail::kRotaryEmbedding, {x}, attrs);
}

}  // namespace tessel
