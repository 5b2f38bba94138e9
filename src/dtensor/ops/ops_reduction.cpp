// The reduction op family (registered by register_reduction_ops): reduce_sum, reduce_mean,
// reduce_max, and the internal ops their gradients are built from.
//
// Sharding rules:
//   - an unreduced axis keeps its sharding; a reduced axis that is sharded over mesh dims makes
//     the output Partial over those dims (sum and mean: Partial(sum), the mean kernel dividing
//     its local sum by the GLOBAL count of the reduced elements; max: Partial(max)). No
//     communication ever happens inside a reduction: the pending reduction is left to the
//     consumer (a rank-0 result of a sharded input is Partial over the input's mesh dims).
//   - a Partial input: sum and mean are linear and keep Partial(sum) / Partial(mean) pending;
//     other pending ops (max, min, prod) are reduced first. reduce_max keeps a Partial(max)
//     input pending (max of maxima) and reduces every other pending op first.
//
// Gradients:
//   - reduce_sum: the gradient broadcast back over the reduced axes ("reduce_sum_grad", which
//     keeps the gradient's sharding on the unreduced axes and the input's on the reduced ones,
//     so the broadcast needs no communication);
//   - reduce_mean: the same, times 1 / (global count of the reduced elements);
//   - reduce_max: TensorFlow's rule (_MinOrMaxGrad): the gradient goes to every position that
//     equals the maximum, split equally among ties: dx = g * (x == max) / count(x == max).
//     Built from "reduce_max_ties" (the 0/1 indicator), reduce_sum (the tie count, Partial when
//     the reduced axes are sharded) and "reduce_max_grad" (indicator * g / count).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/errors.h"
#include "dtensor/ops/op_families.h"
#include "dtensor/framework/op_util.h"
#include "tessel/dtensor/ops.h"

namespace tessel {
namespace detail {
namespace {

enum class Kind { kSum, kMean, kMax };

std::string_view kind_name(Kind kind) {
  switch (kind) {
    case Kind::kSum:
      return "reduce_sum";
    case Kind::kMean:
      return "reduce_mean";
    case Kind::kMax:
      return "reduce_max";
  }
  return "reduce";
}

// ---- axes ------------------------------------------------------------------------------------

// The shape after reducing: reduced axes dropped, or kept with extent 1.
Shape reduced_shape(const Shape& shape, const std::vector<bool>& mask, bool keepdims) {
  std::vector<int64_t> dims;
  for (int d = 0; d < shape.rank(); ++d) {
    if (!mask[static_cast<size_t>(d)]) {
      dims.push_back(shape[d]);
    } else if (keepdims) {
      dims.push_back(1);
    }
  }
  return Shape(dims);
}

// The layout of a reduced value whose input had `specs` (reduced axes dropped or unsharded).
SpecList reduced_specs(const SpecList& specs, const std::vector<bool>& mask, bool keepdims) {
  SpecList out;
  for (size_t d = 0; d < specs.size(); ++d) {
    if (!mask[d]) {
      out.push_back(specs[d]);
    } else if (keepdims) {
      out.emplace_back();
    }
  }
  return out;
}

int64_t reduced_count(const Shape& shape, const std::vector<bool>& mask) {
  int64_t count = 1;
  for (int d = 0; d < shape.rank(); ++d) {
    if (mask[static_cast<size_t>(d)]) count *= shape[d];
  }
  return count;
}

std::vector<PartialDim> partial_with(const Layout& layout, std::initializer_list<ReduceOp> ops) {
  std::vector<PartialDim> kept;
  for (const PartialDim& p : layout.partial()) {
    if (std::find(ops.begin(), ops.end(), p.op) != ops.end()) kept.push_back(p);
  }
  return kept;
}

// ---- strided loops ---------------------------------------------------------------------------

// An iteration space over `shape` with the element strides of two operands, adjacent
// dimensions merged where both operands allow it (so the inner loop is as long as possible).
struct Loop2 {
  std::vector<int64_t> shape;
  std::vector<int64_t> s0, s1;
};

Loop2 collapse(const std::vector<int64_t>& shape, const std::vector<int64_t>& s0,
               const std::vector<int64_t>& s1) {
  Loop2 l;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!l.shape.empty() && l.s0.back() == s0[d] * shape[d] && l.s1.back() == s1[d] * shape[d]) {
      l.shape.back() *= shape[d];
      l.s0.back() = s0[d];
      l.s1.back() = s1[d];
      continue;
    }
    l.shape.push_back(shape[d]);
    l.s0.push_back(s0[d]);
    l.s1.push_back(s1[d]);
  }
  return l;
}

// Calls inner(offset0, offset1, count, stride0, stride1) once per run of the innermost
// dimension. Nothing for an empty space; one call of count 1 for rank 0.
template <typename F>
void for_each_run(const Loop2& l, F&& inner) {
  for (int64_t e : l.shape) {
    if (e == 0) return;
  }
  if (l.shape.empty()) {
    inner(int64_t{0}, int64_t{0}, int64_t{1}, int64_t{0}, int64_t{0});
    return;
  }
  const size_t r = l.shape.size();
  const int64_t n = l.shape[r - 1];
  std::vector<int64_t> idx(r - 1, 0);
  int64_t o0 = 0, o1 = 0;
  while (true) {
    inner(o0, o1, n, l.s0[r - 1], l.s1[r - 1]);
    size_t d = r - 1;
    while (d > 0) {
      --d;
      if (++idx[d] < l.shape[d]) {
        o0 += l.s0[d];
        o1 += l.s1[d];
        break;
      }
      o0 -= l.s0[d] * (l.shape[d] - 1);
      o1 -= l.s1[d] * (l.shape[d] - 1);
      idx[d] = 0;
      if (d == 0) return;
    }
    if (r == 1) return;
  }
}

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

// Strides of the reduced block (keepdims shape of `in_shape`) seen from the input's
// dimensions: 0 along reduced axes.
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in_shape,
                                       const std::vector<bool>& mask) {
  std::vector<int64_t> kept(in_shape.size());
  for (size_t d = 0; d < in_shape.size(); ++d) kept[d] = mask[d] ? 1 : in_shape[d];
  std::vector<int64_t> s = row_major_strides(kept);
  for (size_t d = 0; d < in_shape.size(); ++d) {
    if (mask[d]) s[d] = 0;
  }
  return s;
}

// ---- kernels ---------------------------------------------------------------------------------

struct Plus {
  double operator()(double a, double b) const { return a + b; }
};
template <typename T>
struct KeepMax {  // a NaN b is skipped
  T operator()(T a, T b) const { return b > a ? b : a; }
};

// `acc` combined with the n elements of `in` at stride si. A contiguous sum keeps eight running
// sums, so that its additions do not wait on each other and vectorise (a single running sum is
// one dependent addition per element: 4-5x slower than NumPy's pairwise sum).
template <typename T, typename Acc, typename Op>
Acc reduce_run(Acc acc, const T* in, int64_t n, int64_t si, Op op) {
  int64_t j = 0;
  if constexpr (std::is_same_v<Op, Plus>) {
    if (si == 1 && n >= 16) {
      Acc lanes[8] = {};
      for (; j + 8 <= n; j += 8) {
        for (int k = 0; k < 8; ++k) lanes[k] += static_cast<Acc>(in[j + k]);
      }
      acc += ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
             ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    }
  }
  for (; j < n; ++j) acc = op(acc, static_cast<Acc>(in[j * si]));
  return acc;
}

// out (the reduced block, contiguous) = op-reduction of `in` over the masked axes, accumulated
// in Acc: double for sums, so that a float sum of millions of elements (a gradient's squared
// norm, a loss's mean) keeps about float's precision instead of losing digits with every
// addition as a running float sum does (1e-4 relative for 600 k elements; NumPy's pairwise sum
// and the GPU kernel stay near 1e-7).
template <typename T, typename Acc, typename Op>
void reduce_block(const Tensor& in_tensor, Tensor& out, const std::vector<bool>& mask, Acc init,
                  Op op) {
  const Tensor in_c = in_tensor.contiguous();
  const T* in = in_c.data<T>();
  // Accumulating in T (maxima, double sums), straight into the output; else in a scratch copy.
  std::vector<Acc> scratch;
  Acc* o = nullptr;
  if constexpr (std::is_same_v<Acc, T>) {
    o = out.data<T>();
  } else {
    scratch.resize(static_cast<size_t>(out.num_elements()));
    o = scratch.data();
  }
  std::fill(o, o + out.num_elements(), init);
  const std::vector<int64_t>& shape = in_c.shape().dims();
  const Loop2 l = collapse(shape, broadcast_strides(shape, mask), row_major_strides(shape));
  for_each_run(l, [&](int64_t oo, int64_t io, int64_t n, int64_t so, int64_t si) {
    if (so == 0) {
      o[oo] = reduce_run(o[oo], in + io, n, si, op);
    } else {
      for (int64_t j = 0; j < n; ++j) {
        o[oo + j * so] = op(o[oo + j * so], static_cast<Acc>(in[io + j * si]));
      }
    }
  });
  if constexpr (!std::is_same_v<Acc, T>) {
    std::transform(scratch.begin(), scratch.end(), out.data<T>(),
                   [](Acc a) { return static_cast<T>(a); });
  }
}

void reduce_kernel(Kind kind, const std::vector<Tensor>& inputs, Tensor& output,
                   const OpAttrs& attrs, const LocalContext& context) {
  const std::vector<bool> mask = reduced_mask(attrs.axes, context.input_shapes[0], kind_name(kind));
  dispatch_float(output.dtype(), kind_name(kind), [&]<typename T>() {
    if (kind == Kind::kMax) {
      reduce_block<T, T>(inputs[0], output, mask, -std::numeric_limits<T>::infinity(),
                         KeepMax<T>{});
      return;
    }
    reduce_block<T, double>(inputs[0], output, mask, 0.0, Plus{});
    if (kind == Kind::kMean) {
      const T count = static_cast<T>(reduced_count(context.input_shapes[0], mask));
      T* o = output.data<T>();
      const int64_t n = output.num_elements();
      for (int64_t i = 0; i < n; ++i) o[i] /= count;
    }
  });
}

// ---- infer and rules -------------------------------------------------------------------------

TensorSpec reduce_infer(Kind kind, const std::vector<TensorSpec>& inputs, const OpAttrs& attrs) {
  const TensorSpec& in = inputs[0];
  require_float(in.dtype, kind_name(kind), "dtype");
  const std::vector<bool> mask = reduced_mask(attrs.axes, in.shape, kind_name(kind));
  return {reduced_shape(in.shape, mask, attrs.keepdims), in.dtype, {}};
}

ShardingDecision reduce_rule(Kind kind, const std::vector<TensorSpec>& inputs,
                             const OpAttrs& attrs) {
  const Layout& in = inputs[0].layout;
  const std::vector<bool> mask = reduced_mask(attrs.axes, inputs[0].shape, kind_name(kind));
  // Pending reductions the op commutes with stay pending; the others are done first.
  std::vector<PartialDim> partial = kind == Kind::kMax
                                        ? partial_with(in, {ReduceOp::kMax})
                                        : partial_with(in, {ReduceOp::kSum, ReduceOp::kMean});
  ShardingDecision d;
  d.inputs.push_back(in.with_partial(partial));
  const SpecList specs = spec_list(in);
  const ReduceOp pending = kind == Kind::kMax ? ReduceOp::kMax : ReduceOp::kSum;
  for (size_t a = 0; a < specs.size(); ++a) {
    if (!mask[a]) continue;
    for (const std::string& dim : specs[a]) partial.push_back({dim, pending});
  }
  d.output = make_layout(in.mesh(), reduced_specs(specs, mask, attrs.keepdims), std::move(partial));
  return d;
}

// ---- reduce_sum_grad: g broadcast back over the reduced axes, times attrs.scale ----------------
// Input: g (the reduction's output, keepdims or not). attrs: axes / keepdims of the forward op,
// shape = the forward input's shape, scale = the factor, layout = the forward input's layout
// (the preferred sharding of the reduced axes; optional).

constexpr std::string_view kSumGrad = "reduce_sum_grad";

TensorSpec sum_grad_infer(const std::vector<TensorSpec>& inputs, const OpAttrs& attrs) {
  const Shape x_shape(attrs.shape);
  require_float(inputs[0].dtype, kSumGrad, "dtype");
  const std::vector<bool> mask = reduced_mask(attrs.axes, x_shape, kSumGrad);
  const Shape want = reduced_shape(x_shape, mask, attrs.keepdims);
  if (inputs[0].shape != want) {
    throw_invalid(kSumGrad, "gradient of shape {} does not match the reduced shape {} of {}",
                  inputs[0].shape.to_string(), want.to_string(), x_shape.to_string());
  }
  return {x_shape, inputs[0].dtype, {}};
}

// The layout of the broadcast value: unreduced axes sharded like the gradient, reduced axes
// like `preferred` where those mesh dims are free, else unsharded.
ShardingDecision sum_grad_rule(const std::vector<TensorSpec>& inputs, const OpAttrs& attrs) {
  const Layout& g = inputs[0].layout;
  const Shape x_shape(attrs.shape);
  const std::vector<bool> mask = reduced_mask(attrs.axes, x_shape, kSumGrad);
  const std::vector<PartialDim> partial = partial_with(g, {ReduceOp::kSum, ReduceOp::kMean});
  SpecList g_specs = spec_list(g);
  const SpecList preferred = attrs.layout && attrs.layout->rank() == x_shape.rank()
                                 ? spec_list(*attrs.layout)
                                 : SpecList(static_cast<size_t>(x_shape.rank()));
  std::vector<std::string> used;
  for (const auto& s : g_specs) used.insert(used.end(), s.begin(), s.end());
  for (const PartialDim& p : partial) used.push_back(p.mesh_dim);
  SpecList out;
  size_t gi = 0;
  for (size_t a = 0; a < mask.size(); ++a) {
    if (!mask[a]) {
      out.push_back(g_specs[gi++]);
      continue;
    }
    if (attrs.keepdims) g_specs[gi++].clear();  // the extent-1 axis: unsharded
    bool free = true;
    for (const std::string& dim : preferred[a]) {
      free = free && std::find(used.begin(), used.end(), dim) == used.end();
    }
    out.push_back(free ? preferred[a] : std::vector<std::string>{});
    if (free) used.insert(used.end(), preferred[a].begin(), preferred[a].end());
  }
  ShardingDecision d;
  d.inputs.push_back(make_layout(g.mesh(), g_specs, partial));
  d.output = make_layout(g.mesh(), out, partial);
  return d;
}

void sum_grad_kernel(const std::vector<Tensor>& inputs, Tensor& output, const OpAttrs& attrs,
                     const LocalContext& context) {
  const std::vector<bool> mask = reduced_mask(attrs.axes, context.output_shape, kSumGrad);
  dispatch_float(output.dtype(), kSumGrad, [&]<typename T>() {
    const Tensor g_c = inputs[0].contiguous();
    const T* g = g_c.data<T>();
    T* o = output.data<T>();
    const T scale = static_cast<T>(attrs.scale.value_or(0.0));
    const std::vector<int64_t>& shape = output.shape().dims();
    const Loop2 l = collapse(shape, row_major_strides(shape), broadcast_strides(shape, mask));
    for_each_run(l, [&](int64_t oo, int64_t go, int64_t n, int64_t so, int64_t sg) {
      for (int64_t j = 0; j < n; ++j) o[oo + j * so] = scale * g[go + j * sg];
    });
  });
}

// ---- reduce_max_ties (x, y): 1 where x equals its maximum y, else 0 ---------------------------
// ---- reduce_max_grad (ties, g, count): ties * g / count -------------------------------------
// Both keep the first input's sharding; the reduced-shape inputs are demanded with that
// sharding on the unreduced axes and nothing pending.

constexpr std::string_view kMaxTies = "reduce_max_ties";
constexpr std::string_view kMaxGrad = "reduce_max_grad";

TensorSpec max_helper_infer(std::string_view op, const std::vector<TensorSpec>& inputs,
                            const OpAttrs& attrs) {
  const TensorSpec& x = inputs[0];
  require_float(x.dtype, op, "dtype");
  const std::vector<bool> mask = reduced_mask(attrs.axes, x.shape, op);
  const Shape want = reduced_shape(x.shape, mask, attrs.keepdims);
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (inputs[i].shape != want || inputs[i].dtype != x.dtype) {
      throw_invalid(op, "input {} is {} {}, expected {} {} (the reduction of {})", i,
                    inputs[i].shape.to_string(), dtype_name(inputs[i].dtype), want.to_string(),
                    dtype_name(x.dtype), x.shape.to_string());
    }
  }
  return {x.shape, x.dtype, {}};
}

ShardingDecision max_helper_rule(const std::vector<TensorSpec>& inputs, const OpAttrs& attrs) {
  const Layout x = inputs[0].layout.without_partial();
  const std::vector<bool> mask = reduced_mask(attrs.axes, inputs[0].shape, kMaxTies);
  const Layout reduced = make_layout(x.mesh(), reduced_specs(spec_list(x), mask, attrs.keepdims));
  ShardingDecision d;
  d.inputs.push_back(x);
  for (size_t i = 1; i < inputs.size(); ++i) d.inputs.push_back(reduced);
  d.output = x;
  return d;
}

// reduce_max_ties or reduce_max_grad without its VJP: the inference and the rule above.
OpDef max_helper_def(std::string_view name, int num_inputs, OpDef::Kernel kernel) {
  OpDef def;
  def.name = std::string(name);
  def.num_inputs = num_inputs;
  def.infer = [name](const std::vector<TensorSpec>& in, const OpAttrs& a) {
    return max_helper_infer(name, in, a);
  };
  def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs& a) {
    return max_helper_rule(in, a);
  };
  def.kernel = std::move(kernel);
  return def;
}

void max_ties_kernel(const std::vector<Tensor>& inputs, Tensor& output, const OpAttrs& attrs,
                     const LocalContext& context) {
  const std::vector<bool> mask = reduced_mask(attrs.axes, context.output_shape, kMaxTies);
  dispatch_float(output.dtype(), kMaxTies, [&]<typename T>() {
    const Tensor x_c = inputs[0].contiguous();
    const Tensor y_c = inputs[1].contiguous();
    const T* x = x_c.data<T>();
    const T* y = y_c.data<T>();
    T* o = output.data<T>();
    const std::vector<int64_t>& shape = output.shape().dims();
    const Loop2 l = collapse(shape, row_major_strides(shape), broadcast_strides(shape, mask));
    for_each_run(l, [&](int64_t oo, int64_t yo, int64_t n, int64_t so, int64_t sy) {
      for (int64_t j = 0; j < n; ++j) {
        o[oo + j * so] = x[oo + j * so] == y[yo + j * sy] ? T(1) : T(0);
      }
    });
  });
}

void max_grad_kernel(const std::vector<Tensor>& inputs, Tensor& output, const OpAttrs& attrs,
                     const LocalContext& context) {
  const std::vector<bool> mask = reduced_mask(attrs.axes, context.output_shape, kMaxGrad);
  dispatch_float(output.dtype(), kMaxGrad, [&]<typename T>() {
    const Tensor t_c = inputs[0].contiguous();
    const Tensor g_c = inputs[1].contiguous();
    const Tensor c_c = inputs[2].contiguous();
    const T* ties = t_c.data<T>();
    const T* g = g_c.data<T>();
    const T* count = c_c.data<T>();
    T* o = output.data<T>();
    const std::vector<int64_t>& shape = output.shape().dims();
    const Loop2 l = collapse(shape, row_major_strides(shape), broadcast_strides(shape, mask));
    for_each_run(l, [&](int64_t oo, int64_t go, int64_t n, int64_t so, int64_t sg) {
      for (int64_t j = 0; j < n; ++j) {
        const T t = ties[oo + j * so];
        o[oo + j * so] = t != T(0) ? t * g[go + j * sg] / count[go + j * sg] : T(0);
      }
    });
  });
}

// ---- gradients -------------------------------------------------------------------------------

// attrs with the axes normalised (sorted, non-negative) for the input rank.
OpAttrs normalized(const OpAttrs& attrs, const Shape& x_shape, std::string_view op) {
  const std::vector<bool> mask = reduced_mask(attrs.axes, x_shape, op);
  OpAttrs out;
  for (size_t a = 0; a < mask.size(); ++a) {
    if (mask[a]) out.axes.push_back(static_cast<int64_t>(a));
  }
  out.keepdims = attrs.keepdims;
  return out;
}

std::vector<DTensor> sum_or_mean_vjp(Kind kind, const VjpArgs& args) {
  const DTensor& x = args.inputs[0];
  OpAttrs attrs = normalized(*args.attrs, x.shape(), kind_name(kind));
  attrs.shape = x.shape().dims();
  attrs.layout = x.layout();
  attrs.scale = 1.0;
  if (kind == Kind::kMean) {
    const int64_t count = reduced_count(x.shape(), reduced_mask(attrs.axes, x.shape(), kSumGrad));
    attrs.scale = 1.0 / static_cast<double>(count);
  }
  return {call_op(kSumGrad, {args.grad}, attrs)};
}

std::vector<DTensor> max_vjp(const VjpArgs& args) {
  const DTensor& x = args.inputs[0];
  const OpAttrs attrs = normalized(*args.attrs, x.shape(), "reduce_max");
  const DTensor ties = call_op(kMaxTies, {x, args.output}, attrs);
  const DTensor count = reduce_sum(ties, attrs.axes, attrs.keepdims);
  return {call_op(kMaxGrad, {ties, args.grad, count}, attrs)};
}

void add_reduction(OpRegistry& registry, Kind kind) {
  OpDef def;
  def.name = std::string(kind_name(kind));
  def.num_inputs = 1;
  def.infer = [kind](const std::vector<TensorSpec>& in, const OpAttrs& a) {
    return reduce_infer(kind, in, a);
  };
  def.shard = [kind](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs& a) {
    return reduce_rule(kind, in, a);
  };
  def.kernel = [kind](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& a,
                      const LocalContext& c) { reduce_kernel(kind, in, out, a, c); };
  if (kind == Kind::kMax) {
    def.vjp = max_vjp;
    def.saves = VjpSaves::of_inputs({0}, /*with_output=*/true);
  } else {
    def.vjp = [kind](const VjpArgs& args) { return sum_or_mean_vjp(kind, args); };
    def.saves = VjpSaves::nothing();
  }
  registry.add(std::move(def));
}

}  // namespace

void register_reduction_ops(OpRegistry& registry) {
  add_reduction(registry, Kind::kSum);
  add_reduction(registry, Kind::kMean);
  add_reduction(registry, Kind::kMax);

  OpDef sum_grad;
  sum_grad.name = std::string(kSumGrad);
  sum_grad.num_inputs = 1;
  sum_grad.infer = sum_grad_infer;
  sum_grad.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs& a) {
    return sum_grad_rule(in, a);
  };
  sum_grad.kernel = sum_grad_kernel;
  // Linear: its gradient is the reduction it undoes, times the same factor.
  sum_grad.vjp = [](const VjpArgs& args) {
    const OpAttrs& a = *args.attrs;
    DTensor r = reduce_sum(args.grad, a.axes, a.keepdims);
    const double scale = a.scale.value_or(0.0);
    return std::vector<DTensor>{scale == 1.0 ? r : multiply(r, scale)};
  };
  sum_grad.saves = VjpSaves::nothing();
  registry.add(std::move(sum_grad));

  OpDef ties = max_helper_def(kMaxTies, 2, max_ties_kernel);
  // A step function: zero gradient almost everywhere.
  ties.vjp = [](const VjpArgs& args) {
    return std::vector<DTensor>{zeros_like(args.inputs[0]), zeros_like(args.inputs[1])};
  };
  ties.saves = VjpSaves::nothing();
  registry.add(std::move(ties));

  OpDef max_grad = max_helper_def(kMaxGrad, 3, max_grad_kernel);
  // Linear in g: d/dg = ties / count summed back over the reduced axes; ties and count are
  // piecewise constant (zero gradient).
  max_grad.vjp = [](const VjpArgs& args) {
    const OpAttrs& a = *args.attrs;
    const DTensor& ties = args.inputs[0];
    const DTensor dg = call_op(kMaxGrad, {ties, ones_like(args.inputs[1]), args.inputs[2]}, a);
    return std::vector<DTensor>{zeros_like(ties),
                                reduce_sum(multiply(dg, args.grad), a.axes, a.keepdims),
                                zeros_like(args.inputs[2])};
  };
  max_grad.saves = VjpSaves::of_inputs({0, 2});
  registry.add(std::move(max_grad));
}

}  // namespace detail

namespace {

DTensor reduce(std::string_view op, const DTensor& x, const std::vector<int64_t>& axes,
               bool keepdims) {
  return call_op(op, {x}, {.axes = axes, .keepdims = keepdims});
}

}  // namespace

DTensor reduce_sum(const DTensor& x, const std::vector<int64_t>& axes, bool keepdims) {
  return reduce("reduce_sum", x, axes, keepdims);
}

DTensor reduce_mean(const DTensor& x, const std::vector<int64_t>& axes, bool keepdims) {
  return reduce("reduce_mean", x, axes, keepdims);
}

DTensor reduce_max(const DTensor& x, const std::vector<int64_t>& axes, bool keepdims) {
  return reduce("reduce_max", x, axes, keepdims);
}

}  // namespace tessel
