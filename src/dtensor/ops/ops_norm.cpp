// The normalisation op family (registered by register_norm_ops): layer_norm and rms_norm over
// the last axis, one pass forward and one pass backward instead of the eight (six) ops a
// composition from reduce_mean / rsqrt takes (each a pass over memory and an allocation, and
// the composition's backward computes gradients of the broadcast statistics too).
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
//   "rms_norm"(x, weight)             -> x / sqrt(mean(x^2) + epsilon) * weight (Llama's, Keras'
//                                       RMSNormalization), and "rms_norm_stats",
//                                       "rms_norm_grad", "rms_norm_weight_grad" as the layer
//                                       norm's with the mean taken as 0 (one set of kernels,
//                                       `centered` or not)
//
// Sharding rules (one line each):
//   layer_norm / layer_norm_grad (and the rms_norm ops alike): the last (normalised) axis is
//   demanded whole, every other axis
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

#include "dtensor/framework/op_util.h"
#include "dtensor/ops/cpu_row_math.h"
#include "dtensor/ops/cpu_vector_math.h"
#include "dtensor/ops/op_families.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/relayout.h"

namespace tessel {
namespace detail {
namespace {

// One normalisation's ops: its forward's, its statistics', its gradients' names, and whether the
// mean is subtracted (layer norm) or taken as 0 (RMS norm: its statistics' means are 0).
struct NormOps {
  std::string_view forward, stats, grad, weight_grad;
  bool centered;
};
constexpr NormOps kLayerNormOps{"layer_norm", "layer_norm_stats", "layer_norm_grad",
                                "layer_norm_weight_grad", true};
constexpr NormOps kRmsNormOps{"rms_norm", "rms_norm_stats", "rms_norm_grad", "rms_norm_weight_grad",
                              false};
// layer_norm with a bias: the same backward ops.
constexpr std::string_view kLayerNormBias = "layer_norm_with_bias";

// The gradient input in[index] must have x's (in[0]'s) shape and dtype.
void check_gradient_like_x(const std::vector<TensorSpec>& in, size_t index, std::string_view op) {
  const TensorSpec& g = in[index];
  if (g.shape != in[0].shape || g.dtype != in[0].dtype) {
    throw_invalid(op, "the gradient is {} {}, x is {} {}", dtype_name(g.dtype), g.shape.to_string(),
                  dtype_name(in[0].dtype), in[0].shape.to_string());
  }
}

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

// One row's statistics (not centered: mean 0, rstd from the mean square).
template <typename T>
void row_stats(const T* x, int64_t n, double epsilon, bool centered, double& mean, double& rstd) {
  double sum = 0;
  if (centered) {
    for (int64_t c = 0; c < n; ++c) sum += x[c];
  }
  mean = sum / static_cast<double>(n);
  double squares = 0;
  for (int64_t c = 0; c < n; ++c) {
    const double d = x[c] - mean;
    squares += d * d;
  }
  rstd = 1.0 / std::sqrt(squares / static_cast<double>(n) + epsilon);
}

void layer_norm_kernel(const std::vector<Tensor>& in, Tensor& out, double epsilon, bool centered) {
  const int64_t n = out.shape()[out.rank() - 1];
  if (n == 0 || out.num_elements() == 0) return;
  const int64_t rows = out.num_elements() / n;
  dispatch_float(out.dtype(), kLayerNormOps.forward, [&]<typename T>() {
    const T* x = in[0].data<T>();
    const T* w = in[1].data<T>();
    const T* b = in.size() > 2 ? in[2].data<T>() : nullptr;
    T* y = out.data<T>();
    parallel_for(rows, vec::rows_per_range(n), [&](int64_t first, int64_t last) {
      if constexpr (std::is_same_v<T, float>) {
        vec::layer_norm_rows(x + first * n, w, b, y + first * n, last - first, n, epsilon,
                             centered);
        return;
      }
      for (int64_t r = first; r < last; ++r) {
        const T* xr = x + r * n;
        T* yr = y + r * n;
        double mean, rstd;
        row_stats(xr, n, epsilon, centered, mean, rstd);
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
void layer_norm_stats_kernel(const Tensor& in, Tensor& out, double epsilon, bool centered) {
  const int64_t n = in.shape()[in.rank() - 1];
  if (n == 0 || in.num_elements() == 0) return;
  const int64_t rows = in.num_elements() / n;
  double* stats = out.data<double>();
  dispatch_float(in.dtype(), kLayerNormOps.stats, [&]<typename T>() {
    const T* x = in.data<T>();
    parallel_for(rows, vec::rows_per_range(n), [&](int64_t first, int64_t last) {
      if constexpr (std::is_same_v<T, float>) {
        vec::layer_norm_stats_rows(x + first * n, stats + 2 * first, last - first, n, epsilon,
                                   centered);
        return;
      }
      for (int64_t r = first; r < last; ++r) {
        row_stats(x + r * n, n, epsilon, centered, stats[2 * r], stats[2 * r + 1]);
      }
    });
  });
}

// dx = rstd * (g*w - mean(g*w) - xhat * mean(g*w * xhat)), per row (not centered: without the
// mean(g*w) term).
void layer_norm_grad_kernel(const std::vector<Tensor>& in, Tensor& out, bool centered) {
  const int64_t n = out.shape()[out.rank() - 1];
  if (n == 0 || out.num_elements() == 0) return;
  const int64_t rows = out.num_elements() / n;
  const double* stats = in[3].data<double>();
  dispatch_float(out.dtype(), kLayerNormOps.grad, [&]<typename T>() {
    const T* x = in[0].data<T>();
    const T* w = in[1].data<T>();
    const T* g = in[2].data<T>();
    T* dx = out.data<T>();
    parallel_for(rows, vec::rows_per_range(n), [&](int64_t first, int64_t last) {
      if constexpr (std::is_same_v<T, float>) {
        vec::layer_norm_grad_rows(x + first * n, w, g + first * n, stats + 2 * first,
                                  dx + first * n, last - first, n, centered);
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
        const double a = centered ? sum_gw / static_cast<double>(n) : 0.0;
        const double b = sum_gw_xhat / static_cast<double>(n);
        for (int64_t c = 0; c < n; ++c) {
          const double xhat = (xr[c] - mean) * rstd;
          dr[c] = static_cast<T>(rstd * (static_cast<double>(gr[c]) * w[c] - a - xhat * b));
        }
      }
    });
  });
}

// out[c] = sum over local rows of g * xhat (the statistics say whether x is centered).
void weight_grad_kernel(const std::vector<Tensor>& in, Tensor& out) {
  const int64_t n = out.num_elements();
  if (n == 0) return;
  const int64_t rows = in[0].num_elements() / n;
  const double* stats = in[2].data<double>();
  dispatch_float(out.dtype(), kLayerNormOps.weight_grad, [&]<typename T>() {
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

// The forward op `name`: (x, weight) or, with `with_bias`, (x, weight, bias); its VJP calls
// `ops`' gradients.
void register_norm(OpRegistry& registry, std::string_view name, bool with_bias, NormOps ops) {
  OpDef def;
  def.name = std::string(name);
  def.num_inputs = with_bias ? 3 : 2;
  def.infer = [name](const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
    check_norm_inputs(in, 1, in.size() - 1, name);
    const double epsilon = attrs.epsilon.value_or(0.0);
    if (!(epsilon >= 0) || !std::isfinite(epsilon)) {
      throw_invalid(name, "epsilon must be a finite number >= 0, got {}", epsilon);
    }
    return TensorSpec{in[0].shape, in[0].dtype, {}};
  };
  def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
    const Layout rows = rows_layout(in[0].layout);
    std::vector<Layout> inputs{rows};
    for (size_t i = 1; i < in.size(); ++i) inputs.push_back(Layout::replicated(rows.mesh(), 1));
    return ShardingDecision{inputs, rows};
  };
  def.kernel = [ops](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                     const LocalContext&) {
    layer_norm_kernel(in, out, attrs.epsilon.value_or(0.0), ops.centered);
  };
  // The backward pass reads x, weight and the statistics the tape computed (the bias's gradient
  // needs g only).
  def.saves = VjpSaves::of_inputs({0, 1});
  def.save = [ops](const std::vector<DTensor>& in, const DTensor&, const OpAttrs& attrs) {
    OpAttrs stats;
    stats.epsilon = attrs.epsilon;
    return std::vector<DTensor>{call_op(ops.stats, {in[0]}, stats)};
  };
  def.vjp_skips_unwanted = true;
  def.vjp = [ops](const VjpArgs& a) {
    const DTensor& x = a.inputs[0];
    const DTensor& stats = a.saved.at(0);
    // Both gradient ops demand g laid out as x's rows: relaid out once here, a Partial g (after a
    // column-parallel matmul's backward) is reduced once instead of by each op.
    const DTensor g = relayout(a.grad, rows_layout(x.layout()));
    a.grad_as_used = g;  // a second call for the weights' gradients reads it as it is
    std::vector<DTensor> grads{
        a.wants(0) ? call_op(ops.grad, {x, a.inputs[1], g, stats}) : DTensor(),
        a.wants(1) ? call_op(ops.weight_grad, {x, g, stats}) : DTensor()};
    if (a.inputs.size() > 2 && a.wants(2)) {
      std::vector<int64_t> rows(static_cast<size_t>(x.rank() - 1));
      for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
      grads.push_back(reduce_sum(g, rows));
    }
    return grads;
  };
  registry.add(std::move(def));
}

// `ops`' statistics op and its two gradient ops.
void register_norm_backward(OpRegistry& registry, NormOps ops) {
  const std::string_view stats_name = ops.stats, grad_name = ops.grad,
                         weight_name = ops.weight_grad;
  OpDef stats;
  stats.name = std::string(stats_name);
  stats.num_inputs = 1;
  stats.infer = [stats_name](const std::vector<TensorSpec>& in, const OpAttrs&) {
    check_norm_inputs(in, 1, 0, stats_name);
    return TensorSpec{stats_shape(in[0].shape), DType::kF64, {}};
  };
  stats.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
    const Layout rows = rows_layout(in[0].layout);
    return ShardingDecision{{rows}, rows};
  };
  stats.kernel = [ops](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                       const LocalContext&) {
    layer_norm_stats_kernel(in[0], out, attrs.epsilon.value_or(0.0), ops.centered);
  };
  registry.add(std::move(stats));

  OpDef grad;
  grad.name = std::string(grad_name);
  grad.num_inputs = 4;
  grad.infer = [grad_name](const std::vector<TensorSpec>& in, const OpAttrs&) {
    check_norm_inputs(in, 1, 1, grad_name);
    check_gradient_like_x(in, 2, grad_name);
    check_stats(in, 3, grad_name);
    return TensorSpec{in[0].shape, in[0].dtype, {}};
  };
  grad.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
    const Layout rows = rows_layout(in[0].layout);
    return ShardingDecision{{rows, Layout::replicated(rows.mesh(), 1), rows, rows}, rows};
  };
  grad.kernel = [ops](const std::vector<Tensor>& in, Tensor& out, const OpAttrs&,
                      const LocalContext&) { layer_norm_grad_kernel(in, out, ops.centered); };
  registry.add(std::move(grad));

  OpDef weight;
  weight.name = std::string(weight_name);
  weight.num_inputs = 3;
  weight.infer = [weight_name](const std::vector<TensorSpec>& in, const OpAttrs&) {
    check_norm_inputs(in, 0, 0, weight_name);
    check_gradient_like_x(in, 1, weight_name);
    check_stats(in, 2, weight_name);
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
  register_norm(registry, kLayerNormOps.forward, /*with_bias=*/false, kLayerNormOps);
  register_norm(registry, kLayerNormBias, /*with_bias=*/true, kLayerNormOps);
  register_norm_backward(registry, kLayerNormOps);
  register_norm(registry, kRmsNormOps.forward, /*with_bias=*/false, kRmsNormOps);
  register_norm_backward(registry, kRmsNormOps);
}

}  // namespace detail

DTensor layer_norm(const DTensor& x, const DTensor& weight, const DTensor& bias, double epsilon) {
  OpAttrs attrs;
  attrs.epsilon = epsilon;
  if (!bias.defined()) return call_op(detail::kLayerNormOps.forward, {x, weight}, attrs);
  return call_op(detail::kLayerNormBias, {x, weight, bias}, attrs);
}

DTensor rms_norm(const DTensor& x, const DTensor& weight, double epsilon) {
  OpAttrs attrs;
  attrs.epsilon = epsilon;
  return call_op(detail::kRmsNormOps.forward, {x, weight}, attrs);
}

}  // namespace tessel
