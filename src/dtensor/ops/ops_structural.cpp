// The structural op family (issue 34; registered by register_structural_ops):
//   pad(x): x with OpAttrs::value (unset: 0) around it, the padded shape in OpAttrs::shape and the
//     padding before each dim in OpAttrs::begin (pad() takes numpy's (before, after) pairs).
//   cumsum(x): the running sum along OpAttrs::axis (unset: 0), OpAttrs::exclusive leaving each
//     element out of its own sum, OpAttrs::reverse summing from the end (tf.math.cumsum).
//   one_hot(indices): OpAttrs::depth classes on a new axis at OpAttrs::axis (unset: -1, the
//     last), OpAttrs::on_value (unset: 1) at the index and OpAttrs::off_value (unset: 0)
//     elsewhere, in OpAttrs::dtype; an index outside [0, depth) gives off_value (tf.one_hot).
//   top_k(x): the i64 indices of the OpAttrs::top_k largest values along the last axis, largest
//     first, the lower index first on ties, NaN the largest. top_k() (ops.h) gathers the values
//     with take_along_axis (ops_gather.cpp), whose gradient is the values' into x.
//
// Sharding rules (the axis an op works along must be unsharded: a layout with it sharded has no
// rule, kUnimplemented, and the sharding fallback gathers it; every other dim keeps its spec):
//   pad: the padded dims; a Partial input stays Partial when the constant is 0 (zeros are every
//     reduction's terms of a zero), else it is reduced first.
//   cumsum: the summed axis; a Partial(sum) stays Partial (cumsum is linear), other Partials are
//     reduced first.
//   one_hot: the indices keep their specs (no Partial), the new axis is unsharded.
//   top_k: the last axis; a Partial input is reduced first.
// Gradients: pad's is the slice of g; cumsum's is the cumsum of g in the other direction
// (exclusive as the call); one_hot and top_k have none (integer inputs, or integer outputs).
// Kernels split their blocks over the intra-op threads (cumsum by column ranges, one_hot and
// top_k by rows). No GPU kernels: they run host-staged on GPU devices.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "dtensor/framework/op_util.h"
#include "dtensor/ops/op_families.h"
#include "tessel/core/parallel.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/relayout.h"

namespace tessel {
namespace detail {
namespace {

// Elements one intra-op thread handles at the least.
constexpr int64_t kGrainElements = int64_t{1} << 14;

// ---- pad -------------------------------------------------------------------------------------
constexpr std::string_view kPad = "pad";

void check_padding(size_t dim, int64_t before, int64_t after, const Shape& x) {
  if (before < 0 || after < 0) {
    throw_invalid(kPad, "paddings[{}] = ({}, {}) is negative (x has shape {})", dim, before, after,
                  x.to_string());
  }
}

TensorSpec infer_pad(const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
  const Shape& x = in[0].shape;
  const size_t rank = static_cast<size_t>(x.rank());
  if (attrs.begin.size() != rank || attrs.shape.size() != rank) {
    throw_invalid(kPad,
                  "needs the padding before each of the {} dims in attrs.begin and the padded "
                  "shape in attrs.shape, got [{}] and [{}]",
                  rank, fmt::join(attrs.begin, ","), fmt::join(attrs.shape, ","));
  }
  for (size_t d = 0; d < rank; ++d) {
    check_padding(d, attrs.begin[d], attrs.shape[d] - x[static_cast<int>(d)] - attrs.begin[d], x);
  }
  return {Shape(attrs.shape), in[0].dtype, {}};
}

ShardingDecision pad_rule(const std::vector<TensorSpec>& in, const TensorSpec& out,
                          const OpAttrs& attrs) {
  const Layout& x = in[0].layout;
  const SpecList specs = spec_list(x);
  for (int d = 0; d < out.shape.rank(); ++d) {
    const bool padded = out.shape[d] != in[0].shape[d];
    if (padded && !specs[static_cast<size_t>(d)].empty()) working_axis_sharded(d, "x");
  }
  const Layout want = attrs.value.value_or(0.0) == 0.0 ? x : x.without_partial();
  return {{want}, want};
}

// The padded dims are whole in both blocks and the others equal, so x's block goes at `begin`.
void pad_kernel(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                const LocalContext&) {
  out.fill(attrs.value.value_or(0.0));
  if (in[0].num_elements() == 0) return;
  out.block(attrs.begin, in[0].shape().dims()).copy_from(in[0]);
}

// ---- cumsum ----------------------------------------------------------------------------------
constexpr std::string_view kCumsum = "cumsum";

int64_t cumsum_axis(const OpAttrs& attrs, int rank) {
  return normalize_axis(attrs.axis.value_or(0), rank, kCumsum);
}

ShardingDecision cumsum_rule(const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
  const Layout& x = in[0].layout;
  const int64_t axis = cumsum_axis(attrs, x.rank());
  if (!spec_list(x)[static_cast<size_t>(axis)].empty()) working_axis_sharded(axis, "x");
  bool sums = true;
  for (const PartialDim& p : x.partial()) sums = sums && p.op == ReduceOp::kSum;
  const Layout want = sums ? x : x.without_partial();
  return {{want}, want};
}

// out [outer, n, inner]: the running sums of x along n.
template <typename T>
void cumsum_block(const T* x, T* out, const AxisExtents& s, bool exclusive, bool reverse) {
  const int64_t inner = s.inner;
  parallel_over_columns(s.outer, inner, s.n, [&](int64_t o, int64_t c0, int64_t c1) {
    const int64_t base = o * s.n * inner;
    for (int64_t step = 0; step < s.n; ++step) {
      const int64_t k = reverse ? s.n - 1 - step : step;
      const int64_t prev = reverse ? k + 1 : k - 1;  // the row summed before k
      T* to = out + base + k * inner;
      const T* last_sum = out + base + prev * inner;
      const T* own = x + base + (exclusive ? prev : k) * inner;
      for (int64_t c = c0; c < c1; ++c) {
        if (step == 0) {
          to[c] = exclusive ? T(0) : own[c];
        } else {
          to[c] = last_sum[c] + own[c];
        }
      }
    }
  });
}

void cumsum_kernel(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                   const LocalContext&) {
  const AxisExtents s = axis_extents(out.shape(), cumsum_axis(attrs, out.rank()));
  dispatch_number(out.dtype(), kCumsum, [&]<typename T>() {
    cumsum_block(in[0].data<T>(), out.data<T>(), s, attrs.exclusive, attrs.reverse);
  });
}

// ---- one_hot ---------------------------------------------------------------------------------
constexpr std::string_view kOneHot = "one_hot";

// Calls f.template operator()<T>() for one_hot's output dtypes.
template <typename F>
void dispatch_one_hot(DType dtype, F&& f) {
  if (dtype == DType::kBool) return f.template operator()<bool>();
  dispatch_number(dtype, kOneHot, f);
}

// An on or off value that the integer or bool dtype cannot hold: kInvalidArgument.
void check_fill_value(double value, DType dtype, std::string_view what) {
  if (is_floating(dtype)) return;
  const bool ok = dtype == DType::kBool ? value == 0.0 || value == 1.0
                                        : value == std::trunc(value) && std::abs(value) < 9.2e18;
  if (!ok) {
    throw_invalid(kOneHot, "{} {} is not a value of {}", what, value, dtype_name(dtype));
  }
}

TensorSpec infer_one_hot(const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
  require_index(in[0].dtype, kOneHot);
  if (!attrs.depth || *attrs.depth < 0) {
    throw_invalid(kOneHot, "depth must be set and >= 0, got {}",
                  attrs.depth ? std::to_string(*attrs.depth) : "none");
  }
  dispatch_one_hot(attrs.dtype, []<typename T>() {});
  check_fill_value(attrs.on_value.value_or(1.0), attrs.dtype, "on_value");
  check_fill_value(attrs.off_value.value_or(0.0), attrs.dtype, "off_value");
  const int rank = in[0].shape.rank();
  const int64_t axis = normalize_axis(attrs.axis.value_or(-1), rank + 1, kOneHot);
  std::vector<int64_t> dims = in[0].shape.dims();
  dims.insert(dims.begin() + axis, *attrs.depth);
  return {Shape(dims), attrs.dtype, {}};
}

ShardingDecision one_hot_rule(const std::vector<TensorSpec>& in, const TensorSpec& out,
                              const OpAttrs& attrs) {
  const Layout indices = in[0].layout.without_partial();
  const int64_t axis = normalize_axis(attrs.axis.value_or(-1), out.shape.rank(), kOneHot);
  SpecList specs = spec_list(indices);
  specs.insert(specs.begin() + axis, std::vector<std::string>{});
  return {{indices}, make_layout(indices.mesh(), specs)};
}

void one_hot_kernel(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                    const LocalContext&) {
  const int64_t axis = normalize_axis(attrs.axis.value_or(-1), out.rank(), kOneHot);
  const AxisExtents s = axis_extents(out.shape(), axis);  // n: the depth
  dispatch_index(in[0].dtype(), kOneHot, [&]<typename I>() {
    dispatch_one_hot(out.dtype(), [&]<typename T>() {
      const I* indices = in[0].data<I>();
      T* o = out.data<T>();
      const T on = static_cast<T>(attrs.on_value.value_or(1.0));
      const T off = static_cast<T>(attrs.off_value.value_or(0.0));
      const auto rows = [&](int64_t first, int64_t last) {
        for (int64_t r = first; r < last; ++r) {
          T* block = o + r * s.n * s.inner;
          std::fill(block, block + s.n * s.inner, off);
          for (int64_t i = 0; i < s.inner; ++i) {
            const int64_t c = static_cast<int64_t>(indices[r * s.inner + i]);
            if (c >= 0 && c < s.n) block[c * s.inner + i] = on;
          }
        }
      };
      parallel_for(s.outer,
                   std::max<int64_t>(1, kGrainElements / std::max<int64_t>(s.n * s.inner, 1)),
                   rows);
    });
  });
}

// ---- top_k -----------------------------------------------------------------------------------
constexpr std::string_view kTopK = "top_k";

TensorSpec infer_top_k(const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
  const Shape& x = in[0].shape;
  if (x.rank() < 1) throw_invalid(kTopK, "the input must have rank >= 1, got a scalar");
  dispatch_number(in[0].dtype, kTopK, []<typename T>() {});
  if (!attrs.top_k) throw_invalid(kTopK, "needs k in attrs.top_k");
  const int64_t k = *attrs.top_k;
  const int64_t n = x[x.rank() - 1];
  if (k < 0) throw_invalid(kTopK, "k {} is negative", k);
  if (k > n) {
    throw_invalid(kTopK, "k {} is larger than the last axis ({} elements) of input {}", k, n,
                  x.to_string());
  }
  std::vector<int64_t> dims = x.dims();
  dims.back() = k;
  return {Shape(dims), DType::kI64, {}};
}

ShardingDecision top_k_rule(const std::vector<TensorSpec>& in) {
  const Layout x = in[0].layout.without_partial();
  if (!spec_list(x).back().empty()) working_axis_sharded(x.rank() - 1, "x");
  return {{x}, x};
}

// Whether element a of `row` comes before element b: larger first, NaN the largest, the lower
// index first on ties (a strict weak order, NaNs equal among themselves).
template <typename T>
bool ranks_before(const T* row, int64_t a, int64_t b) {
  const T va = row[a];
  const T vb = row[b];
  if constexpr (std::is_floating_point_v<T>) {
    const bool na = std::isnan(va);
    const bool nb = std::isnan(vb);
    if (na || nb) return na && (!nb || a < b);
  }
  return va != vb ? va > vb : a < b;
}

void top_k_kernel(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                  const LocalContext&) {
  const Tensor& x = in[0];
  const int64_t n = x.shape()[x.rank() - 1];
  const int64_t k = *attrs.top_k;
  const int64_t rows = n == 0 ? 0 : x.num_elements() / n;
  int64_t* o = out.data<int64_t>();
  dispatch_number(x.dtype(), kTopK, [&]<typename T>() {
    const T* p = x.data<T>();
    const auto sort_rows = [&](int64_t first, int64_t last) {
      std::vector<int64_t> order(static_cast<size_t>(n));
      for (int64_t r = first; r < last; ++r) {
        const T* row = p + r * n;
        std::iota(order.begin(), order.end(), int64_t{0});
        std::partial_sort(order.begin(), order.begin() + k, order.end(),
                          [row](int64_t a, int64_t b) { return ranks_before(row, a, b); });
        std::copy_n(order.begin(), k, o + r * k);
      }
    };
    parallel_for(rows, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(n, 1)), sort_rows);
  });
}

// ---- registration ----------------------------------------------------------------------------

OpAttrs cumsum_attrs(int64_t axis, bool exclusive, bool reverse) {
  OpAttrs attrs;
  attrs.axis = axis;
  attrs.exclusive = exclusive;
  attrs.reverse = reverse;
  return attrs;
}

std::vector<DTensor> no_gradient(const VjpArgs&) { return {DTensor()}; }

}  // namespace

void register_structural_ops(OpRegistry& registry) {
  {
    OpDef def;
    def.name = std::string(kPad);
    def.infer = infer_pad;
    def.shard = pad_rule;
    def.kernel = pad_kernel;
    def.vjp = [](const VjpArgs& a) {
      return std::vector<DTensor>{slice(a.grad, a.attrs->begin, a.inputs[0].shape().dims())};
    };
    registry.add(std::move(def));
  }
  {
    OpDef def;
    def.name = std::string(kCumsum);
    def.infer = [](const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
      cumsum_axis(attrs, in[0].shape.rank());
      dispatch_number(in[0].dtype, kCumsum, []<typename T>() {});
      return TensorSpec{in[0].shape, in[0].dtype, {}};
    };
    def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs& attrs) {
      return cumsum_rule(in, attrs);
    };
    def.kernel = cumsum_kernel;
    def.vjp = [](const VjpArgs& a) {
      const OpAttrs& at = *a.attrs;
      return std::vector<DTensor>{
          call_op(kCumsum, {a.grad}, cumsum_attrs(at.axis.value_or(0), at.exclusive, !at.reverse))};
    };
    registry.add(std::move(def));
  }
  {
    OpDef def;
    def.name = std::string(kOneHot);
    def.infer = infer_one_hot;
    def.shard = one_hot_rule;
    def.kernel = one_hot_kernel;
    def.vjp = no_gradient;
    registry.add(std::move(def));
  }
  {
    OpDef def;
    def.name = std::string(kTopK);
    def.infer = infer_top_k;
    def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
      return top_k_rule(in);
    };
    def.kernel = top_k_kernel;
    def.vjp = no_gradient;
    registry.add(std::move(def));
  }
}

}  // namespace detail

DTensor pad(const DTensor& x, const std::vector<std::pair<int64_t, int64_t>>& paddings,
            double constant_value) {
  if (!x.defined()) detail::throw_invalid(detail::kPad, "input 0 is a null DTensor");
  if (static_cast<int>(paddings.size()) != x.rank()) {
    detail::throw_invalid(detail::kPad, "paddings has {} pairs for x of rank {} (shape {})",
                          paddings.size(), x.rank(), x.shape().to_string());
  }
  OpAttrs attrs;
  for (size_t d = 0; d < paddings.size(); ++d) {
    const auto [before, after] = paddings[d];
    detail::check_padding(d, before, after, x.shape());
    attrs.begin.push_back(before);
    attrs.shape.push_back(before + x.shape()[static_cast<int>(d)] + after);
  }
  attrs.value = constant_value;
  return call_op(detail::kPad, {x}, attrs);
}

DTensor cumsum(const DTensor& x, int64_t axis, bool exclusive, bool reverse) {
  return call_op(detail::kCumsum, {x}, detail::cumsum_attrs(axis, exclusive, reverse));
}

DTensor one_hot(const DTensor& indices, int64_t depth, double on_value, double off_value,
                int64_t axis, DType dtype) {
  OpAttrs attrs;
  attrs.depth = depth;
  attrs.on_value = on_value;
  attrs.off_value = off_value;
  attrs.axis = axis;
  attrs.dtype = dtype;
  return call_op(detail::kOneHot, {indices}, attrs);
}

TopK top_k(const DTensor& x, int64_t k) {
  // The last axis whole and no Partial first: both ops then run on x's blocks as they are, and x
  // moves once.
  DTensor whole = x;
  if (x.defined() && x.rank() >= 1) {
    detail::SpecList specs = detail::spec_list(x.layout());
    specs.back().clear();
    const Layout want = detail::make_layout(x.layout().mesh(), specs);
    if (want != x.layout()) whole = relayout(x, want);
  }
  OpAttrs attrs;
  attrs.top_k = k;
  DTensor indices = call_op(detail::kTopK, {whole}, attrs);
  return {take_along_axis(whole, indices, -1), std::move(indices)};
}

}  // namespace tessel
