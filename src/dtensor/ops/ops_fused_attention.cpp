// The fused causal-attention op (registered by register_fused_attention_ops): causal
// self-attention in one op, flash attention's algorithm on the CPU, so that no [B, H, T, T] map
// of scores or probabilities lives in memory beyond one tile per thread.
//   "causal_attention"(q, k, v [B, T, H, D]) -> dropout(causal_softmax(q k^T, scale), rate,
//   seed) v, [B, T, H, D] (flash attention's layout: the projections' [B, T, C] output reshaped,
//   no transpose; each head's rows are strided by H * D): in each head, query i sees keys j <= i;
//   the scale in OpAttrs::scale (unset: 1), the dropout rate in OpAttrs::rate (unset: 0, in [0, 1))
//   and its seed in OpAttrs::seed. The dropout mask is the one the composed ops draw: element (b,
//   h, i, j) of the [B, H, T, T] probabilities is kept when random_uniform([B, H, T, T], seed) is
//   >= rate there (global indices), so the op equals matmul(dropout(causal_softmax(matmul(q',
//   k'^T), scale), rate, seed), v') on every mesh, x' = transpose(x, {0, 2, 1, 3}) ([B, H, T, D]),
//   transposed back (PyTorch's scaled_dot_product_attention(is_causal=True) on [B, H, T, D] views).
//
// Sharding rule: B and H keep q's sharding (k and v are demanded the same), T and D are demanded
// whole (every query reads every earlier key); a Partial input is reduced first. The output has
// q's layout so arranged.
//
// Kernel, per (b, h) and per tile of kTile queries: S = q_tile k[0, visible)^T (only the keys the
// tile's last query sees: the causal triangle's work, not the square's), P = the causal softmax of
// scale * S row by row, dropout applied in place, out_tile = P v[0, visible). The tiles of one
// thread reuse one [kTile, T] buffer.
//
// VJP: "causal_attention_grad"(q, k, v, out, g) -> [3, B, T, H, D] holding dq, dk, dv (one op,
// so the probabilities are recomputed once for all three; sliced apart by the VJP). Per tile:
// S and P again, A = P with dropout (Z: 0 or 1 / (1 - rate)), dA = g_tile v^T, dP = dA Z,
// dS = scale P (dP - rowsum(g_tile out_tile)) (rowsum(P dP) = rowsum(A dA) = rowsum(g out): the
// softmax gradient without a second pass over the row), dq_tile = dS k, dk += dS^T q_tile,
// dv += A^T g_tile. The VJP saves q, k, v and out: no [B, H, T, T] map, where the composed ops
// keep two (the probabilities before and after dropout) and make three more in their backward.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/counter_random.h"
#include "dtensor/ops/attention_geometry.h"
#include "dtensor/framework/op_util.h"
#include "dtensor/ops/cpu_row_math.h"
#include "dtensor/ops/op_families.h"
#include "tessel/core/blas.h"
#include "tessel/core/parallel.h"
#include "tessel/dtensor/ops.h"

namespace tessel {
namespace detail {
namespace {

constexpr std::string_view kCausalAttention = "causal_attention";
constexpr std::string_view kCausalAttentionGrad = "causal_attention_grad";

// Queries per tile: a [kTile, T] f32 tile of a 256-token context is 64 KiB, in L2 with the
// tile's q, out and g rows; small enough that the causal triangle skips most of the upper half.
constexpr int64_t kTile = 64;

// z[0, n) = the dropout factors of probabilities index .. index + n - 1: 0 (dropped) or
// keep_scale (dropout's 1 / (1 - rate)); float32 in vector lanes (cpu_row_math.h).
template <typename T>
void dropout_factors(const AttentionGeometry& g, uint64_t index, int64_t n, T keep_scale, T* z) {
  if constexpr (std::is_same_v<T, float>) {
    vec::dropout_factors(z, n, counter_stream(g.seed), index, keep_threshold(g.rate), keep_scale);
  } else {
    for (int64_t j = 0; j < n; ++j) {
      z[j] = uniform_at(g.seed, index + static_cast<uint64_t>(j)) >= g.rate ? keep_scale : T(0);
    }
  }
}

// P = the tile's probabilities (rows x keys, leading dimension keys) from the head's query rows
// i0 .. i0 + rows - 1 and its first `keys` key rows (q and k at the head's position 0, rows
// g.row_stride apart); S is scratch of the same size.
template <typename T>
void tile_probabilities(const AttentionGeometry& g, const T* q, const T* k, int64_t i0,
                        int64_t rows, int64_t keys, T* s, T* p) {
  blas_gemm(false, true, rows, keys, g.d, q + i0 * g.row_stride, g.row_stride, k, g.row_stride, s,
            keys);
  for (int64_t r = 0; r < rows; ++r) {
    vec::causal_softmax_row_of(s + r * keys, p + r * keys, keys, i0 + r + 1,
                               static_cast<T>(g.scale));
  }
}

template <typename T>
void attention_forward(const AttentionGeometry& g, const T* q, const T* k, const T* v, T* out) {
  const T keep_scale = static_cast<T>(1.0 / (1.0 - g.rate));
  const int64_t ld = g.row_stride;
  parallel_for(g.pairs, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> s(static_cast<size_t>(kTile * g.t)), p(s.size()), z(static_cast<size_t>(g.t));
    for (int64_t pair = begin; pair < end; ++pair) {
      const int64_t at = g.offset(pair);
      const uint64_t first = g.first_index(pair);
      for (int64_t i0 = 0; i0 < g.t; i0 += kTile) {
        const int64_t rows = std::min(kTile, g.t - i0), keys = i0 + rows;
        tile_probabilities(g, q + at, k + at, i0, rows, keys, s.data(), p.data());
        for (int64_t r = 0; r < rows && g.rate > 0; ++r) {
          const int64_t visible = i0 + r + 1;
          dropout_factors(g, first + static_cast<uint64_t>((i0 + r) * g.t), visible, keep_scale,
                          z.data());
          T* row = p.data() + r * keys;
          for (int64_t j = 0; j < visible; ++j) row[j] *= z[static_cast<size_t>(j)];
        }
        blas_gemm(false, false, rows, g.d, keys, p.data(), keys, v + at, ld, out + at + i0 * ld,
                  ld);
      }
    }
  });
}

// rows of n elements, `stride` apart: acc[r * stride + c] += add[r * n + c] (add contiguous).
template <typename T>
void accumulate_rows(T* acc, int64_t stride, const T* add, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    T* a = acc + r * stride;
    const T* b = add + r * n;
    for (int64_t c = 0; c < n; ++c) a[c] += b[c];
  }
}

template <typename T>
void attention_backward(const AttentionGeometry& g, const T* q, const T* k, const T* v,
                        const T* out, const T* grad, T* dq, T* dk, T* dv) {
  const T keep_scale = static_cast<T>(1.0 / (1.0 - g.rate));
  const T scale = static_cast<T>(g.scale);
  const int64_t ld = g.row_stride;
  parallel_for(g.pairs, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> s(static_cast<size_t>(kTile * g.t)), p(s.size());
    std::vector<T> z(static_cast<size_t>(g.t), T(1));     // a row's dropout factors (1 without)
    std::vector<T> part(static_cast<size_t>(g.t * g.d));  // one tile's share of dk or dv
    for (int64_t pair = begin; pair < end; ++pair) {
      const int64_t at = g.offset(pair);
      const uint64_t first = g.first_index(pair);
      for (int64_t i = 0; i < g.t; ++i) {
        std::fill_n(dk + at + i * ld, g.d, T(0));
        std::fill_n(dv + at + i * ld, g.d, T(0));
      }
      for (int64_t i0 = 0; i0 < g.t; i0 += kTile) {
        const int64_t rows = std::min(kTile, g.t - i0), keys = i0 + rows;
        const T* g_tile = grad + at + i0 * ld;
        const T* out_tile = out + at + i0 * ld;
        tile_probabilities(g, q + at, k + at, i0, rows, keys, s.data(), p.data());
        // s := dA = g_tile v^T (rows x keys).
        blas_gemm(false, true, rows, keys, g.d, g_tile, ld, v + at, ld, s.data(), keys);
        for (int64_t r = 0; r < rows; ++r) {
          T* pr = p.data() + r * keys;  // P, then A (P with dropout)
          T* sr = s.data() + r * keys;  // dA, then dS
          T inner = 0;                  // rowsum(g out) = rowsum(P dP)
          for (int64_t c = 0; c < g.d; ++c) inner += g_tile[r * ld + c] * out_tile[r * ld + c];
          const int64_t visible = i0 + r + 1;
          if (g.rate > 0) {
            dropout_factors(g, first + static_cast<uint64_t>((i0 + r) * g.t), visible, keep_scale,
                            z.data());
          }
          const T* zr = z.data();
          for (int64_t j = 0; j < visible; ++j) {
            sr[j] = scale * pr[j] * (sr[j] * zr[j] - inner);
            pr[j] *= zr[j];
          }
          std::fill(sr + visible, sr + keys, T(0));
        }
        blas_gemm(true, false, keys, g.d, rows, p.data(), keys, g_tile, ld, part.data(), g.d);
        accumulate_rows(dv + at, ld, part.data(), keys, g.d);
        blas_gemm(false, false, rows, g.d, keys, s.data(), keys, k + at, ld, dq + at + i0 * ld, ld);
        blas_gemm(true, false, keys, g.d, rows, s.data(), keys, q + at + i0 * ld, ld, part.data(),
                  g.d);
        accumulate_rows(dk + at, ld, part.data(), keys, g.d);
      }
    }
  });
}

// The first `count` operands (q, k, v; the gradient op's also out and d out) must be one shape
// [B, T, H, D] and one float dtype.
void check_operands(const std::vector<TensorSpec>& in, std::string_view op, size_t count) {
  const Shape& q = in[0].shape;
  bool same = q.rank() == 4;
  for (size_t i = 1; i < count; ++i) same = same && in[i].shape == q && in[i].dtype == in[0].dtype;
  if (!same) {
    std::string got;
    for (size_t i = 0; i < count; ++i) {
      got +=
          fmt::format("{}{} {}", i ? ", " : "", dtype_name(in[i].dtype), in[i].shape.to_string());
    }
    throw_invalid(op,
                  "{} must be one shape [batch, sequence, heads, head_dim] and one dtype, got {}",
                  count == 3 ? "q, k and v" : "q, k, v, the output and its gradient", got);
  }
  require_float(in[0].dtype, op, "dtype", NotFloat::kNeedsFloating);
}

// q's layout with T and D whole and no Partial: what every operand is demanded and the output
// gets.
Layout attention_layout(const Layout& q) {
  SpecList specs = spec_list(q);
  specs[1].clear();
  specs[3].clear();
  return make_layout(q.mesh(), specs);
}

void register_causal_attention_grad(OpRegistry& registry) {
  OpDef def;
  def.name = std::string(kCausalAttentionGrad);
  def.num_inputs = 5;  // q, k, v, out, d loss / d out
  def.infer = [](const std::vector<TensorSpec>& in, const OpAttrs&) {
    check_operands(in, kCausalAttentionGrad, 5);
    std::vector<int64_t> dims{3};
    for (int64_t n : in[0].shape.dims()) dims.push_back(n);
    return TensorSpec{Shape(dims), in[0].dtype, {}};
  };
  def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
    const Layout want = attention_layout(in[0].layout);
    SpecList stacked = spec_list(want);
    stacked.insert(stacked.begin(), std::vector<std::string>{});
    return ShardingDecision{{want, want, want, want, want}, make_layout(want.mesh(), stacked)};
  };
  def.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                  const LocalContext& context) {
    if (out.num_elements() == 0) return;
    const AttentionGeometry g =
        attention_geometry(in[0].shape(), context.input_blocks[0], context.input_shapes[0], attrs);
    const int64_t n = in[0].num_elements();
    dispatch_float(out.dtype(), kCausalAttentionGrad, [&]<typename T>() {
      T* d = out.data<T>();
      attention_backward(g, in[0].data<T>(), in[1].data<T>(), in[2].data<T>(), in[3].data<T>(),
                         in[4].data<T>(), d, d + n, d + 2 * n);
    });
  };
  registry.add(std::move(def));
}

}  // namespace

void register_fused_attention_ops(OpRegistry& registry) {
  OpDef def;
  def.name = std::string(kCausalAttention);
  def.num_inputs = 3;
  def.infer = [](const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
    check_operands(in, kCausalAttention, 3);
    const double rate = attrs.rate.value_or(0.0);
    if (!(rate >= 0.0 && rate < 1.0)) {
      throw_invalid(kCausalAttention, "dropout rate must be in [0, 1), got {}", rate);
    }
    const double scale = attrs.scale.value_or(1.0);
    if (!std::isfinite(scale)) {
      throw_invalid(kCausalAttention, "scale must be finite, got {}", scale);
    }
    return TensorSpec{in[0].shape, in[0].dtype, {}};
  };
  def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
    const Layout want = attention_layout(in[0].layout);
    return ShardingDecision{{want, want, want}, want};
  };
  def.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                  const LocalContext& context) {
    if (out.num_elements() == 0) return;
    const AttentionGeometry g =
        attention_geometry(out.shape(), context.output_block, context.output_shape, attrs);
    dispatch_float(out.dtype(), kCausalAttention, [&]<typename T>() {
      attention_forward(g, in[0].data<T>(), in[1].data<T>(), in[2].data<T>(), out.data<T>());
    });
  };
  def.vjp = [](const VjpArgs& a) {
    const DTensor stacked = call_op(
        kCausalAttentionGrad, {a.inputs[0], a.inputs[1], a.inputs[2], a.output, a.grad}, *a.attrs);
    const Shape& s = a.output.shape();
    std::vector<DTensor> grads;
    for (int64_t i = 0; i < 3; ++i) {
      grads.push_back(reshape(slice(stacked, {i, 0, 0, 0, 0}, {1, s[0], s[1], s[2], s[3]}), s));
    }
    return grads;
  };
  def.saves = VjpSaves::of_inputs({0, 1, 2}, /*with_output=*/true);
  registry.add(std::move(def));
  register_causal_attention_grad(registry);
}

}  // namespace detail

DTensor causal_attention(const DTensor& q, const DTensor& k, const DTensor& v, double scale,
                         double dropout_rate, uint64_t seed) {
  OpAttrs attrs;
  if (scale != 1.0) attrs.scale = scale;
  if (dropout_rate != 0.0) {
    attrs.rate = dropout_rate;
    attrs.seed = seed;
  }
  return call_op(detail::kCausalAttention, {q, k, v}, attrs);
}

}  // namespace tessel
