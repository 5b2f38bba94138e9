// The normalisation op family (registered by register_norm_ops): layer_norm over the last axis,
// one pass forward and one pass backward instead of the eight ops a composition from
// reduce_mean / rsqrt takes (each a pass over memory and an allocation).
//   "layer_norm"(x, weight), "layer_norm_with_bias"(x, weight, bias)
//                                    -> (x - mean) / sqrt(var + epsilon) * weight (+ bias)
//                                       (biased variance, as TF, PyTorch and nanoGPT; epsilon in
//                                       OpAttrs::epsilon)
//   "layer_norm_stats"(x)             -> f64 [..., 2]: each row's mean and rstd =
//                                       1 / sqrt(var + epsilon), as the forward kernel computes
//                                       them. What a tape keeps of a layer_norm call besides x and
//                                       weight (OpDef::save), so that the backward pass reads the
//                                       statistics instead of computing them in both its ops.
//   "layer_norm_grad"(x, weight, g, stats) -> dx
//   "layer_norm_weight_grad"(x, g, stats)  -> [C]: the sum over every row of g * (x - mean) * rstd
//
// Sharding rules (one line each):
//   layer_norm / layer_norm_grad: the last (normalised) axis is demanded whole, every other axis
//     keeps x's sharding (batch, and the sequence under sequence parallelism), Partial inputs are
//     reduced first (nonlinear); weight and bias are demanded replicated; the output is laid out
//     as x.
//   layer_norm_stats, and the stats input of the gradient ops: laid out as x's rows (the pair
//     axis whole).
//   layer_norm_weight_grad: x and g as above; the [C] output is replicated but Partial(sum) over
//     every mesh dimension that shards x's rows, so the weight's gradient joins the fused
//     gradient reduction (autodiff.h) instead of a collective of its own.
// Kernels accumulate each row's mean and variance in double (float32 rows: in float32 lanes, the
// vectorised loops of cpu_row_math.h; their statistics, kept in f64, are exactly the float32
// values the forward pass used), and split their rows over the intra-op threads
// (core/parallel.h); the weight gradient sums fixed blocks of rows
// and then the blocks in order, so that its result does not depend on the number of threads.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "tessel/core/parallel.h"

#include "dtensor/ops/cpu_row_math.h"
#include "dtensor/ops/cpu_vector_math.h"
#include "dtensor/ops/op_families.h"
#include "dtensor/framework/op_util.h"
#include "tessel/dtensor/ops.h"

namespace tessel {
namespace detail {
namespace {

constexpr std::string_view kLayerNorm = "layer_norm";
constexpr std::string_view kLayerNormBias = "layer_norm_with_bias";
constexpr std::string_view kLayerNormStats = "layer_norm_stats";
constexpr std::string_view kLayerNormGrad = "layer_norm_grad";
constexpr std::string_view kWeightGrad = "layer_norm_weight_grad";

// x must be at least 1-D with a non-empty last axis; `vectors` ([C] each) match its last axis.
void check_norm_inputs(const std::vector<TensorSpec>& in, size_t first_vector, size_t count,
                       std::string_view op) {
  const TensorSpec& x = in[0];
  if (x.shape.rank() < 1) {
    throw_invalid(op, "x must have rank >= 1 (normalised over the last axis), got shape {}",
                  x.shape.to_string());
  }
  require_float(x.dtype, op, "dtype");
  const int64_t channels = x.shape[x.shape.rank() - 1];
  for (size_t i = first_vector; i < first_vector + count; ++i) {
    if (in[i].shape != Shape({channels}) || in[i].dtype != x.dtype) {
      throw_invalid(op, "input {} must be {} [{}] (x's last axis and dtype), got {} {}", i,
                    dtype_name(x.dtype), channels, dtype_name(in[i].dtype),
                    in[i].shape.to_string());
    }
  }
}

// x's specs with the last axis whole and no Partial.
Layout rows_layout(const Layout& x) {
  SpecList specs = spec_list(x);
  specs.back().clear();
  return make_layout(x.mesh(), specs);
}

// The shape of x's statistics: x's rows, a (mean, rstd) pair each.
Shape stats_shape(const Shape& x) {
  std::vector<int64_t> dims = x.dims();
  dims.back() = 2;
  return Shape(std::move(dims));
}

// Input `k` must be the f64 statistics of x (input 0).
void check_stats(const std::vector<TensorSpec>& in, size_t k, std::string_view op) {
  if (in[k].shape != stats_shape(in[0].shape) || in[k].dtype != DType::kF64) {
    throw_invalid(op, "input {} must be x's statistics, f64 {}, got {} {}", k,
                  stats_shape(in[0].shape).to_string(), dtype_name(in[k].dtype),
                  in[k].shape.to_string());
  }
}

// Rows summed into one partial weight gradient.
constexpr int64_t kWeightGradBlock = 64;

// One row's statistics.
template <typename T>
void row_stats(const T* x, int64_t n, double epsilon, double& mean, double& rstd) {
  double sum = 0;
  for (int64_t c = 0; c < n; ++c) sum += x[c];
  mean = sum / static_cast<double>(n);
  double squares = 0;
  for (int64_t c = 0; c < n; ++c) {
    const double d = x[c] - mean;
    squares += d * d;
  }
  rstd = 1.0 / std::sqrt(squares / static_cast<double>(n) + epsilon);
}

void layer_norm_kernel(const std::vector<Tensor>& in, Tensor& out, double epsilon) {
  const int64_t n = out.shape()[out.rank() - 1];
  if (n == 0 || out.num_elements() == 0) return;
  const int64_t rows = out.num_elements() / n;
  dispatch_float(out.dtype(), kLayerNorm, [&]<typename T>() {
    const T* x = in[0].data<T>();
    const T* w = in[1].data<T>();
    const T* b = in.size() > 2 ? in[2].data<T>() : nullptr;
    T* y = out.data<T>();
    parallel_for(rows, vec::rows_per_range(n), [&](int64_t first, int64_t last) {
      if constexpr (std::is_same_v<T, float>) {
        vec::layer_norm_rows(x + first * n, w, b, y + first * n, last - first, n, epsilon);
        return;
      }
      for (int64_t r = first; r < last; ++r) {
        const T* xr = x + r * n;
        T* yr = y + r * n;
        double mean, rstd;
        row_stats(xr, n, epsilon, mean, rstd);
        const T m = static_cast<T>(mean), s = static_cast<T>(rstd);
        if (b != nullptr) {
          for (int64_t c = 0; c < n; ++c) yr[c] = (xr[c] - m) * s * w[c] + b[c];
        } else {
          for (int64_t c = 0; c < n; ++c) yr[c] = (xr[c] - m) * s * w[c];
        }
      }
    });
  });
}

// stats[2r], stats[2r + 1] = row r's mean and rstd.
void layer_norm_stats_kernel(const Tensor& in, Tensor& out, double epsilon) {
  const int64_t n = in.shape()[in.rank() - 1];
  if (n == 0 || in.num_elements() == 0) return;
  const int64_t rows = in.num_elements() / n;
  double* stats = out.data<double>();
  dispatch_float(in.dtype(), kLayerNormStats, [&]<typename T>() {
    const T* x = in.data<T>();
    parallel_for(rows, vec::rows_per_range(n), [&](int64_t first, int64_t last) {
      if constexpr (std::is_same_v<T, float>) {
        vec::layer_norm_stats_rows(x + first * n, stats + 2 * first, last - first, n, epsilon);
        return;
      }
      for (int64_t r = first; r < last; ++r) {
        row_stats(x + r * n, n, epsilon, stats[2 * r], stats[2 * r + 1]);
      }
    });
  });
}

// dx = rstd * (g*w - mean(g*w) - xhat * mean(g*w * xhat)), per row.
void layer_norm_grad_kernel(const std::vector<Tensor>& in, Tensor& out) {
  const int64_t n = out.shape()[out.rank() - 1];
  if (n == 0 || out.num_elements() == 0) return;
  const int64_t rows = out.num_elements() / n;
  const double* stats = in[3].data<double>();
  dispatch_float(out.dtype(), kLayerNormGrad, [&]<typename T>() {
    const T* x = in[0].data<T>();
    const T* w = in[1].data<T>();
    const T* g = in[2].data<T>();
    T* dx = out.data<T>();
    parallel_for(rows, vec::rows_per_range(n), [&](int64_t first, int64_t last) {
      if constexpr (std::is_same_v<T, float>) {
        vec::layer_norm_grad_rows(x + first * n, w, g + first * n, stats + 2 * first,
                                  dx + first * n, last - first, n);
        return;
      }
      for (int64_t r = first; r < last; ++r) {
        const T* xr = x + r * n;
        const T* gr = g + r * n;
        T* dr = dx + r * n;
        const double mean = stats[2 * r], rstd = stats[2 * r + 1];
        double sum_gw = 0, sum_gw_xhat = 0;
        for (int64_t c = 0; c < n; ++c) {
          const double gw = static_cast<double>(gr[c]) * w[c];
          sum_gw += gw;
          sum_gw_xhat += gw * (xr[c] - mean) * rstd;
        }
        const double a = sum_gw / static_cast<double>(n);
        const double b = sum_gw_xhat / static_cast<double>(n);
        for (int64_t c = 0; c < n; ++c) {
          const double xhat = (xr[c] - mean) * rstd;
          dr[c] = static_cast<T>(rstd * (static_cast<double>(gr[c]) * w[c] - a - xhat * b));
        }
      }
    });
  });
}

// out[c] = sum over local rows of g * xhat.
void weight_grad_kernel(const std::vector<Tensor>& in, Tensor& out) {
  const int64_t n = out.num_elements();
  if (n == 0) return;
  const int64_t rows = in[0].num_elements() / n;
  const double* stats = in[2].data<double>();
  dispatch_float(out.dtype(), kWeightGrad, [&]<typename T>() {
    const T* x = in[0].data<T>();
    const T* g = in[1].data<T>();
    // One partial sum per block of kWeightGradBlock rows, then the blocks in order.
    const int64_t blocks = (rows + kWeightGradBlock - 1) / kWeightGradBlock;
    std::vector<double> partial(static_cast<size_t>(blocks * n), 0.0);
    parallel_for(blocks, std::max<int64_t>(1, vec::rows_per_range(n) / kWeightGradBlock),
                 [&](int64_t first, int64_t last) {
                   for (int64_t k = first; k < last; ++k) {
                     double* acc = partial.data() + k * n;
                     const int64_t begin = k * kWeightGradBlock;
                     const int64_t end = std::min(rows, begin + kWeightGradBlock);
                     if constexpr (std::is_same_v<T, float>) {
                       vec::layer_norm_weight_grad_rows(x + begin * n, g + begin * n,
                                                        stats + 2 * begin, acc, end - begin, n);
                       continue;
                     }
                     for (int64_t r = k * kWeightGradBlock;
                          r < std::min(rows, (k + 1) * kWeightGradBlock); ++r) {
                       const T* xr = x + r * n;
                       const T* gr = g + r * n;
                       const double mean = stats[2 * r], rstd = stats[2 * r + 1];
                       for (int64_t c = 0; c < n; ++c) {
                         acc[c] += static_cast<double>(gr[c]) * (xr[c] - mean) * rstd;
                       }
                     }
                   }
                 });
    T* o = out.data<T>();
    for (int64_t c = 0; c < n; ++c) {
      double sum = 0;
      for (int64_t k = 0; k < blocks; ++k) sum += partial[static_cast<size_t>(k * n + c)];
      o[c] = static_cast<T>(sum);
    }
  });
}

// "layer_norm" (x, weight) or, with `with_bias`, "layer_norm_with_bias" (x, weight, bias).
void register_layer_norm(OpRegistry& registry, bool with_bias) {
  const std::string_view name = with_bias ? kLayerNormBias : kLayerNorm;
  OpDef def;
  def.name = std::string(name);
  def.num_inputs = with_bias ? 3 : 2;
  def.infer = [name](const std::vector<TensorSpec>& in, const OpAttrs&) {
    check_norm_inputs(in, 1, in.size() - 1, name);
    return TensorSpec{in[0].shape, in[0].dtype, {}};
  };
  def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
    const Layout rows = rows_layout(in[0].layout);
    std::vector<Layout> inputs{rows};
    for (size_t i = 1; i < in.size(); ++i) inputs.push_back(Layout::replicated(rows.mesh(), 1));
    return ShardingDecision{inputs, rows};
  };
  def.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                  const LocalContext&) { layer_norm_kernel(in, out, attrs.epsilon.value_or(0.0)); };
  // The backward pass reads x, weight and the statistics the tape computed (the bias's gradient
  // needs g only).
  def.saves = VjpSaves::of_inputs({0, 1});
  def.save = [](const std::vector<DTensor>& in, const DTensor&, const OpAttrs& attrs) {
    OpAttrs stats;
    stats.epsilon = attrs.epsilon;
    return std::vector<DTensor>{call_op(kLayerNormStats, {in[0]}, stats)};
  };
  def.vjp = [](const VjpArgs& a) {
    const DTensor& x = a.inputs[0];
    const DTensor& stats = a.saved.at(0);
    std::vector<DTensor> grads{call_op(kLayerNormGrad, {x, a.inputs[1], a.grad, stats}),
                               call_op(kWeightGrad, {x, a.grad, stats})};
    if (a.inputs.size() > 2) {
      std::vector<int64_t> rows(static_cast<size_t>(x.rank() - 1));
      for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
      grads.push_back(reduce_sum(a.grad, rows));
    }
    return grads;
  };
  registry.add(std::move(def));
}

void register_layer_norm_stats(OpRegistry& registry) {
  OpDef def;
  def.name = std::string(kLayerNormStats);
  def.num_inputs = 1;
  def.infer = [](const std::vector<TensorSpec>& in, const OpAttrs&) {
    check_norm_inputs(in, 1, 0, kLayerNormStats);
    return TensorSpec{stats_shape(in[0].shape), DType::kF64, {}};
  };
  def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
    const Layout rows = rows_layout(in[0].layout);
    return ShardingDecision{{rows}, rows};
  };
  def.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                  const LocalContext&) {
    layer_norm_stats_kernel(in[0], out, attrs.epsilon.value_or(0.0));
  };
  registry.add(std::move(def));
}

// The gradient g (input `k`) must be x's shape and dtype.
void check_gradient(const std::vector<TensorSpec>& in, size_t k, std::string_view op) {
  if (in[k].shape != in[0].shape || in[k].dtype != in[0].dtype) {
    throw_invalid(op, "the gradient is {} {}, x is {} {}", dtype_name(in[k].dtype),
                  in[k].shape.to_string(), dtype_name(in[0].dtype), in[0].shape.to_string());
  }
}

void register_layer_norm_grads(OpRegistry& registry) {
  OpDef grad;
  grad.name = std::string(kLayerNormGrad);
  grad.num_inputs = 4;
  grad.infer = [](const std::vector<TensorSpec>& in, const OpAttrs&) {
    check_norm_inputs(in, 1, 1, kLayerNormGrad);
    check_gradient(in, 2, kLayerNormGrad);
    check_stats(in, 3, kLayerNormGrad);
    return TensorSpec{in[0].shape, in[0].dtype, {}};
  };
  grad.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
    const Layout rows = rows_layout(in[0].layout);
    return ShardingDecision{{rows, Layout::replicated(rows.mesh(), 1), rows, rows}, rows};
  };
  grad.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs&,
                   const LocalContext&) { layer_norm_grad_kernel(in, out); };
  registry.add(std::move(grad));

  OpDef weight;
  weight.name = std::string(kWeightGrad);
  weight.num_inputs = 3;
  weight.infer = [](const std::vector<TensorSpec>& in, const OpAttrs&) {
    check_norm_inputs(in, 0, 0, kWeightGrad);
    check_gradient(in, 1, kWeightGrad);
    check_stats(in, 2, kWeightGrad);
    return TensorSpec{Shape({in[0].shape[in[0].shape.rank() - 1]}), in[0].dtype, {}};
  };
  weight.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
    const Layout rows = rows_layout(in[0].layout);
    std::vector<PartialDim> partial;
    for (const auto& dims : spec_list(rows)) {
      for (const std::string& d : dims) partial.push_back({d, ReduceOp::kSum});
    }
    return ShardingDecision{{rows, rows, rows},
                            Layout::replicated(rows.mesh(), 1).with_partial(std::move(partial))};
  };
  weight.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs&,
                     const LocalContext&) { weight_grad_kernel(in, out); };
  registry.add(std::move(weight));
}

}  // namespace

void register_norm_ops(OpRegistry& registry) {
  register_layer_norm(registry, /*with_bias=*/false);
  register_layer_norm(registry, /*with_bias=*/true);
  register_layer_norm_stats(registry);
  register_layer_norm_grads(registry);
}

}  // namespace detail

DTensor layer_norm(const DTensor& x, const DTensor& weight, const DTensor& bias, double epsilon) {
  OpAttrs attrs;
  attrs.epsilon = epsilon;
  if (!bias.defined()) return call_op(detail::kLayerNorm, {x, weight}, attrs);
  return call_op(detail::kLayerNormBias, {x, weight, bias}, attrs);
}

}  // namespace tessel
