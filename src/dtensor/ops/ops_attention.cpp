// The attention op family (registered by register_attention_ops): causal_softmax, the masked
// softmax of causal self-attention in one pass, instead of a [T, T] mask tensor, an add and a
// softmax.
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
// VJP: scale * s * (g - sum(g * s, -1)), as softmax's; masked entries have s = 0, so their
// gradient is 0.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "dtensor/ops/cpu_vector_math.h"
#include "dtensor/ops/op_families.h"
#include "dtensor/framework/op_util.h"
#include "tessel/core/parallel.h"
#include "tessel/dtensor/ops.h"

namespace tessel {
namespace detail {
namespace {

constexpr std::string_view kCausalSoftmax = "causal_softmax";

// One query row: softmax over the first `visible` keys, zeros after.
template <typename T>
void causal_row(const T* x, T* y, int64_t keys, int64_t visible, T scale) {
  visible = std::clamp<int64_t>(visible, 0, keys);
  T most = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < visible; ++j) most = std::max(most, scale * x[j]);
  T total = 0;
  if constexpr (std::is_same_v<T, float>) {  // the exps in one vectorised pass
    for (int64_t j = 0; j < visible; ++j) y[j] = scale * x[j] - most;
    vec::exp(y, y, visible);
    for (int64_t j = 0; j < visible; ++j) total += y[j];
  } else {
    for (int64_t j = 0; j < visible; ++j) {
      y[j] = std::exp(scale * x[j] - most);
      total += y[j];
    }
  }
  const T inv = visible > 0 ? T(1) / total : T(0);
  for (int64_t j = 0; j < visible; ++j) y[j] *= inv;
  std::fill(y + visible, y + keys, T(0));
}

void causal_softmax_kernel(const Tensor& in, Tensor& out, double scale,
                           const LocalContext& context) {
  const int rank = out.rank();
  const int64_t keys = out.shape()[rank - 1];
  const int64_t local_queries = out.shape()[rank - 2];
  if (out.num_elements() == 0) return;
  const int64_t queries = context.output_shape[rank - 2];
  const int64_t first_query = context.output_block.offsets[static_cast<size_t>(rank - 2)];
  const int64_t matrices = out.num_elements() / (keys * local_queries);
  dispatch_float(out.dtype(), kCausalSoftmax, [&]<typename T>() {
    const T* x = in.data<T>();
    T* y = out.data<T>();
    const int64_t rows = matrices * local_queries;
    parallel_for(rows, vec::rows_per_range(keys), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t i = r % local_queries;
        causal_row(x + r * keys, y + r * keys, keys, first_query + i + (keys - queries) + 1,
                   static_cast<T>(scale));
      }
    });
  });
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
    SpecList specs = spec_list(in[0].layout);
    specs.back().clear();
    const Layout want = make_layout(in[0].layout.mesh(), specs);
    return ShardingDecision{{want}, want};
  };
  def.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                  const LocalContext& context) {
    causal_softmax_kernel(in[0], out, attrs.scale.value_or(1.0), context);
  };
  def.vjp = [](const VjpArgs& a) {
    const DTensor& s = a.output;
    const double scale = a.attrs->scale.value_or(1.0);
    const DTensor inner = reduce_sum(multiply(a.grad, s), {s.rank() - 1}, /*keepdims=*/true);
    const DTensor g = multiply(s, subtract(a.grad, inner));
    return std::vector<DTensor>{scale == 1.0 ? g : multiply(g, scale)};
  };
  registry.add(std::move(def));
}

}  // namespace detail

DTensor causal_softmax(const DTensor& scores, double scale) {
  OpAttrs attrs;
  if (scale != 1.0) attrs.scale = scale;
  return call_op(detail::kCausalSoftmax, {scores}, attrs);
}

}  // namespace tessel
