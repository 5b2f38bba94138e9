// The sampling op family (registered by register_sampling_ops): what generation needs.
//   "argmax"(x) -> i64 index of the largest value along OpAttrs::axis (the first one on ties; a
//     NaN counts as the largest, as numpy's argmax), the axis removed from the shape.
//   "sample_categorical"(logits [..., C]) -> i64 [...]: one class per row drawn from
//     softmax(logits * scale) restricted to the top_k largest logits (OpAttrs::scale = 1 /
//     temperature, unset: 1; OpAttrs::top_k, unset or 0: every class). Row r's draw uses element r
//     of Tensor::random_uniform(rows' shape, seed): the same sample on every mesh and layout.
//
// Sharding rule: the axis reduced over (the class axis) is gathered; every other axis keeps its
// sharding; a Partial input is reduced first. Neither op is differentiable (integer outputs).
#include <algorithm>
#include <cmath>
#include <vector>

#include "dtensor/ops/op_families.h"
#include "dtensor/framework/op_util.h"
#include "tessel/dtensor/ops.h"

namespace tessel {
namespace detail {
namespace {

constexpr std::string_view kArgmax = "argmax";
constexpr std::string_view kSample = "sample_categorical";

// x's layout with dimension `axis` whole and no Partial; the output's: that dimension removed.
ShardingDecision reduce_axis_rule(const Layout& x, int64_t axis) {
  SpecList specs = spec_list(x);
  specs[static_cast<size_t>(axis)].clear();
  const Layout in = make_layout(x.mesh(), specs);
  specs.erase(specs.begin() + axis);
  return {{in}, make_layout(x.mesh(), specs)};
}

Shape without_axis(const Shape& shape, int64_t axis) {
  std::vector<int64_t> dims = shape.dims();
  dims.erase(dims.begin() + axis);
  return Shape(dims);
}

int64_t argmax_axis(const TensorSpec& x, const OpAttrs& attrs) {
  if (x.shape.rank() < 1) throw_invalid(kArgmax, "the input must have rank >= 1, got a scalar");
  return normalize_axis(attrs.axis.value_or(-1), x.shape.rank(), kArgmax);
}

void argmax_kernel(const Tensor& x, Tensor& out, int64_t axis) {
  const std::vector<int64_t>& dims = x.shape().dims();
  const int64_t n = dims[static_cast<size_t>(axis)];
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(axis) + 1; d < dims.size(); ++d) inner *= dims[d];
  const int64_t outer = n == 0 ? 0 : x.num_elements() / (n * inner);
  int64_t* o = out.data<int64_t>();
  dispatch_float(x.dtype(), kArgmax, [&]<typename T>() {
    const T* p = x.data<T>();
    for (int64_t a = 0; a < outer; ++a) {
      for (int64_t b = 0; b < inner; ++b) {
        const T* row = p + a * n * inner + b;
        int64_t best = 0;
        for (int64_t i = 1; i < n && !std::isnan(row[best * inner]); ++i) {
          if (std::isnan(row[i * inner]) || row[i * inner] > row[best * inner]) best = i;
        }
        o[a * inner + b] = best;
      }
    }
  });
}

void sample_kernel(const Tensor& logits, Tensor& out, const OpAttrs& attrs,
                   const LocalContext& context) {
  const int64_t rows = out.num_elements();
  if (rows == 0) return;
  const int64_t classes = logits.shape()[logits.rank() - 1];
  const double scale = attrs.scale.value_or(1.0);
  const int64_t k = attrs.top_k.value_or(0) > 0 ? std::min(*attrs.top_k, classes) : classes;
  const Box& block = context.output_block;
  const Tensor u = Tensor::random_uniform_block(context.output_shape, block.offsets, block.extents,
                                                DType::kF64, attrs.seed.value_or(0));
  int64_t* o = out.data<int64_t>();
  dispatch_float(logits.dtype(), kSample, [&]<typename T>() {
    const T* p = logits.data<T>();
    std::vector<double> z(static_cast<size_t>(classes));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < classes; ++c) z[static_cast<size_t>(c)] = scale * p[r * classes + c];
      double cut = -INFINITY;  // the k-th largest: classes below it get no probability
      if (k < classes) {
        std::vector<double> sorted = z;
        std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<>());
        cut = sorted[static_cast<size_t>(k - 1)];
      }
      const double most = *std::max_element(z.begin(), z.end());
      double total = 0;
      for (double& v : z) total += (v = v >= cut ? std::exp(v - most) : 0.0);
      const double target = u.data<double>()[r] * total;
      int64_t pick = classes - 1;
      double run = 0;
      for (int64_t c = 0; c < classes; ++c) {
        run += z[static_cast<size_t>(c)];
        if (run > target && z[static_cast<size_t>(c)] > 0) {
          pick = c;
          break;
        }
      }
      while (pick > 0 && z[static_cast<size_t>(pick)] == 0) --pick;  // rounding at the end
      o[r] = pick;
    }
  });
}

}  // namespace

void register_sampling_ops(OpRegistry& registry) {
  OpDef argmax;
  argmax.name = std::string(kArgmax);
  argmax.num_inputs = 1;
  argmax.infer = [](const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
    const int64_t axis = argmax_axis(in[0], attrs);
    require_float(in[0].dtype, kArgmax, "dtype");
    if (in[0].shape[static_cast<int>(axis)] == 0) {
      throw_invalid(kArgmax, "axis {} of {} is empty: no largest value", axis,
                    in[0].shape.to_string());
    }
    return TensorSpec{without_axis(in[0].shape, axis), DType::kI64, {}};
  };
  argmax.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs& attrs) {
    return reduce_axis_rule(in[0].layout.without_partial(), argmax_axis(in[0], attrs));
  };
  argmax.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                     const LocalContext&) {
    argmax_kernel(in[0], out, normalize_axis(attrs.axis.value_or(-1), in[0].rank(), kArgmax));
  };
  argmax.vjp = [](const VjpArgs&) { return std::vector<DTensor>{DTensor()}; };
  argmax.saves = VjpSaves::nothing();
  registry.add(std::move(argmax));

  OpDef sample;
  sample.name = std::string(kSample);
  sample.num_inputs = 1;
  sample.infer = [](const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
    const int rank = in[0].shape.rank();
    if (rank < 1 || in[0].shape[rank - 1] == 0) {
      throw_invalid(kSample, "logits must be [..., classes] with at least one class, got {}",
                    in[0].shape.to_string());
    }
    require_float(in[0].dtype, kSample, "logits");
    if (attrs.scale && !(*attrs.scale > 0 && std::isfinite(*attrs.scale))) {
      throw_invalid(kSample, "the scale (1 / temperature) must be finite and > 0, got {}",
                    *attrs.scale);
    }
    if (attrs.top_k && *attrs.top_k < 0) throw_invalid(kSample, "top_k must be >= 0, got {}", *attrs.top_k);
    return TensorSpec{without_axis(in[0].shape, rank - 1), DType::kI64, {}};
  };
  sample.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
    return reduce_axis_rule(in[0].layout.without_partial(), in[0].shape.rank() - 1);
  };
  sample.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                     const LocalContext& context) { sample_kernel(in[0], out, attrs, context); };
  sample.vjp = [](const VjpArgs&) { return std::vector<DTensor>{DTensor()}; };
  sample.saves = VjpSaves::nothing();
  registry.add(std::move(sample));
}

}  // namespace detail

DTensor argmax(const DTensor& x, int64_t axis) {
  OpAttrs attrs;
  attrs.axis = axis;
  return call_op(detail::kArgmax, {x}, attrs);
}

DTensor sample_categorical(const DTensor& logits, uint64_t seed, double temperature,
                           int64_t top_k) {
  if (!(temperature > 0) || !std::isfinite(temperature)) {
    detail::throw_invalid(detail::kSample, "temperature must be finite and > 0, got {}",
                          temperature);
  }
  if (top_k < 0) detail::throw_invalid(detail::kSample, "top_k must be >= 0, got {}", top_k);
  OpAttrs attrs;
  attrs.seed = seed;
  if (temperature != 1.0) attrs.scale = 1.0 / temperature;
  if (top_k > 0) attrs.top_k = top_k;
  return call_op(detail::kSample, {logits}, attrs);
}

}  // namespace tessel
