// The nn op family (registered by register_nn_ops): softmax, log_softmax and
// sparse_softmax_cross_entropy_with_logits over the last (class) axis, plus the internal
// "sparse_softmax_cross_entropy_grad" that the cross entropy's VJP calls.
//
// Sharding rules (one line each):
//   softmax / log_softmax: the class axis is demanded unsharded, every other axis keeps its
//     sharding, a Partial input is reduced first (nonlinear); the output has the input's layout.
//   sparse_softmax_cross_entropy_with_logits(labels, logits): logits as softmax; the labels are
//     demanded in the logits' batch sharding (the logits decide); the loss has that layout.
//   sparse_softmax_cross_entropy_grad(labels, logits, g): (softmax - onehot) * g[..., None] is
//     linear in g, so a Partial(sum) g stays Partial: the output is the logits' layout plus g's
//     sum partial dims; other reduce ops are reduced first.
// Logits whose class axis is sharded never reach these rules: the public function takes the
// vocabulary-parallel path (ops_parallel_xent.cpp: Partial max and sum, no gather).
//
// Kernels run row by row over the local block (its last axis is whole), subtracting the row max
// before exponentiating. A label outside [0, classes) throws kInvalidArgument from the kernel: it
// surfaces at the next sync point (unpack, to_host, synchronize) naming the op, as TF's message
// "Received a label value of L which is outside the valid range of [0, C)".
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/errors.h"
#include "dtensor/framework/op_util.h"
#include "dtensor/ops/op_families.h"
#include "dtensor/ops/xent_names.h"
#include "tessel/dtensor/ops.h"

namespace tessel {
namespace detail {
namespace {

constexpr std::string_view kSoftmax = "softmax";
constexpr std::string_view kLogSoftmax = "log_softmax";

// The logits' specs with the class axis unsharded and no Partial.
SpecList class_axis_whole(const Layout& layout) {
  SpecList specs = spec_list(layout);
  specs.back().clear();
  return specs;
}

// ---- softmax / log_softmax ----------------------------------------------------------------

TensorSpec infer_softmax(const std::vector<TensorSpec>& in, std::string_view op) {
  if (in[0].shape.rank() < 1) {
    throw_invalid(op, "logits must have rank >= 1 (classes on the last axis), got shape {}",
                  in[0].shape.to_string());
  }
  require_float(in[0].dtype, op, "logits", NotFloat::kNeedsFloating);
  return {in[0].shape, in[0].dtype, {}};
}

ShardingDecision shard_softmax(const std::vector<TensorSpec>& in) {
  const Layout want = make_layout(in[0].layout.mesh(), class_axis_whole(in[0].layout));
  return {{want}, want};
}

// A row's largest value and the sum of e^(x - largest) over it: the start of softmax,
// log_softmax, the cross entropy and its gradient (subtracting the largest keeps every exponent
// at most 0). Each e^(x - largest) is also stored in `e` unless it is null.
template <typename T>
struct ExpSum {
  T most;
  T total;
};

template <typename T>
ExpSum<T> exp_sum(const T* x, int64_t classes, T* e = nullptr) {
  T most = -std::numeric_limits<T>::infinity();
  for (int64_t c = 0; c < classes; ++c) most = std::max(most, x[c]);
  T total = 0;
  for (int64_t c = 0; c < classes; ++c) {
    const T v = std::exp(x[c] - most);
    total += v;
    if (e != nullptr) e[c] = v;
  }
  return {most, total};
}

template <typename T, bool kLog>
void softmax_rows(const T* x, T* y, int64_t rows, int64_t classes) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * classes;
    T* yr = y + r * classes;
    const auto [most, total] = exp_sum(xr, classes, kLog ? nullptr : yr);
    if constexpr (kLog) {
      // (x - max) - log(total): subtracting max + log(total) at once loses digits for large x.
      const T lse = std::log(total);
      for (int64_t c = 0; c < classes; ++c) yr[c] = (xr[c] - most) - lse;
    } else {
      const T inv = T(1) / total;
      for (int64_t c = 0; c < classes; ++c) yr[c] *= inv;
    }
  }
}

template <bool kLog>
void softmax_kernel(const std::vector<Tensor>& in, Tensor& out, std::string_view op) {
  const int64_t classes = out.shape()[out.rank() - 1];
  if (classes == 0 || out.num_elements() == 0) return;
  const int64_t rows = out.num_elements() / classes;
  dispatch_float(out.dtype(), op, [&]<typename T>() {
    softmax_rows<T, kLog>(in[0].data<T>(), out.data<T>(), rows, classes);
  });
}

// ---- sparse_softmax_cross_entropy_with_logits -------------------------------------------

TensorSpec infer_xent(const std::vector<TensorSpec>& in, std::string_view op) {
  const TensorSpec& labels = in[0];
  const TensorSpec& logits = in[1];
  if (labels.dtype != DType::kI32 && labels.dtype != DType::kI64) {
    throw_invalid(op, "labels must be i32 or i64, got {}", dtype_name(labels.dtype));
  }
  require_float(logits.dtype, op, "logits", NotFloat::kNeedsFloating);
  const int rank = logits.shape.rank();
  if (rank < 1) {
    throw_invalid(op, "logits must have rank >= 1 (classes on the last axis), got shape {}",
                  logits.shape.to_string());
  }
  const std::vector<int64_t>& dims = logits.shape.dims();
  const Shape batch(std::vector<int64_t>(dims.begin(), dims.end() - 1));
  if (labels.shape != batch) {
    throw_invalid(op,
                  "labels shape {} must equal the logits shape {} without its last (class) "
                  "dimension, {}",
                  labels.shape.to_string(), logits.shape.to_string(), batch.to_string());
  }
  if (batch.num_elements() > 0 && dims.back() == 0) {
    throw_invalid(op, "Must have at least one class, but got logits shape {}",
                  logits.shape.to_string());
  }
  return {batch, logits.dtype, {}};
}

ShardingDecision shard_xent(const std::vector<TensorSpec>& in) {
  const Mesh& mesh = in[1].layout.mesh();
  SpecList logits = class_axis_whole(in[1].layout);
  const SpecList batch(logits.begin(), logits.end() - 1);
  const Layout out = make_layout(mesh, batch);
  return {{out, make_layout(mesh, logits)}, out};
}

template <typename L>
[[noreturn]] void bad_label(L label, int64_t classes, std::string_view op) {
  throw_invalid(op, "Received a label value of {} which is outside the valid range of [0, {})",
                static_cast<int64_t>(label), classes);
}

// loss[r] = log(sum exp(x - max)) - (x[label] - max)
template <typename T, typename L>
void xent_rows(const L* labels, const T* x, T* loss, int64_t rows, int64_t classes,
               std::string_view op) {
  for (int64_t r = 0; r < rows; ++r) {
    const L label = labels[r];
    if (label < 0 || static_cast<int64_t>(label) >= classes) bad_label(label, classes, op);
    const T* xr = x + r * classes;
    const auto [most, total] = exp_sum(xr, classes);
    loss[r] = std::log(total) - (xr[label] - most);
  }
}

void xent_kernel(const std::vector<Tensor>& in, Tensor& out) {
  const Tensor& labels = in[0];
  const Tensor& logits = in[1];
  const int64_t classes = logits.shape()[logits.rank() - 1];
  const int64_t rows = out.num_elements();
  if (rows == 0) return;
  dispatch_float(out.dtype(), kXent, [&]<typename T>() {
    dispatch_index(labels.dtype(), kXent, [&]<typename L>() {
      xent_rows<T, L>(labels.data<L>(), logits.data<T>(), out.data<T>(), rows, classes, kXent);
    });
  });
}

// ---- sparse_softmax_cross_entropy_grad(labels, logits, g) ---------------------------------

TensorSpec infer_xent_grad(const std::vector<TensorSpec>& in) {
  const TensorSpec batch = infer_xent({in[0], in[1]}, kXentGrad);
  if (in[2].shape != batch.shape || in[2].dtype != in[1].dtype) {
    throw_invalid(kXentGrad, "the gradient is {} {}, the loss is {} {}", in[2].shape.to_string(),
                  dtype_name(in[2].dtype), batch.shape.to_string(), dtype_name(in[1].dtype));
  }
  return {in[1].shape, in[1].dtype, {}};
}

ShardingDecision shard_xent_grad(const std::vector<TensorSpec>& in) {
  const Mesh& mesh = in[1].layout.mesh();
  const SpecList logits = class_axis_whole(in[1].layout);
  const SpecList batch(logits.begin(), logits.end() - 1);
  const Layout batch_layout = make_layout(mesh, batch);
  // g's pending sums stay pending (the output is linear in g) where no axis is sharded over
  // that mesh dim; other pending reductions are done first.
  const Layout logits_layout = make_layout(mesh, logits);
  std::vector<PartialDim> keep;
  for (const PartialDim& p : in[2].layout.partial()) {
    if (p.op == ReduceOp::kSum && !shards_over(logits_layout, p.mesh_dim)) keep.push_back(p);
  }
  return {{batch_layout, logits_layout, batch_layout.with_partial(keep)},
          logits_layout.with_partial(keep)};
}

template <typename T, typename L>
void xent_grad_rows(const L* labels, const T* x, const T* g, T* dx, int64_t rows, int64_t classes,
                    std::string_view op) {
  for (int64_t r = 0; r < rows; ++r) {
    const L label = labels[r];
    if (label < 0 || static_cast<int64_t>(label) >= classes) bad_label(label, classes, op);
    const T* xr = x + r * classes;
    T* dr = dx + r * classes;
    const T scale = g[r] / exp_sum(xr, classes, dr).total;
    for (int64_t c = 0; c < classes; ++c) dr[c] *= scale;
    dr[label] -= g[r];
  }
}

void xent_grad_kernel(const std::vector<Tensor>& in, Tensor& out) {
  const int64_t classes = out.shape()[out.rank() - 1];
  if (out.num_elements() == 0) return;
  const int64_t rows = out.num_elements() / classes;
  dispatch_float(out.dtype(), kXentGrad, [&]<typename T>() {
    dispatch_index(in[0].dtype(), kXentGrad, [&]<typename L>() {
      xent_grad_rows<T, L>(in[0].data<L>(), in[1].data<T>(), in[2].data<T>(), out.data<T>(), rows,
                           classes, kXentGrad);
    });
  });
}

}  // namespace

// softmax and log_softmax differ only in the kernel's flavour and their VJP.
template <bool kLog>
void add_softmax(OpRegistry& registry, std::string_view name,
                 std::function<std::vector<DTensor>(const VjpArgs&)> vjp) {
  OpDef def;
  def.name = std::string(name);
  def.num_inputs = 1;
  def.infer = [name](const std::vector<TensorSpec>& in, const OpAttrs&) {
    return infer_softmax(in, name);
  };
  def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
    return shard_softmax(in);
  };
  def.kernel = [name](const std::vector<Tensor>& in, Tensor& out, const OpAttrs&,
                      const LocalContext&) { softmax_kernel<kLog>(in, out, name); };
  def.vjp = std::move(vjp);
  def.saves = VjpSaves::output_only();
  registry.add(std::move(def));
}

void register_nn_ops(OpRegistry& registry) {
  // s * (g - sum(g * s, -1, keepdims))
  add_softmax<false>(registry, kSoftmax, [](const VjpArgs& a) {
    const DTensor& s = a.output;
    const int64_t last = s.rank() - 1;
    const DTensor inner = reduce_sum(multiply(a.grad, s), {last}, /*keepdims=*/true);
    return std::vector<DTensor>{multiply(s, subtract(a.grad, inner))};
  });
  // g - softmax * sum(g, -1, keepdims)
  add_softmax<true>(registry, kLogSoftmax, [](const VjpArgs& a) {
    const int64_t last = a.output.rank() - 1;
    const DTensor total = reduce_sum(a.grad, {last}, /*keepdims=*/true);
    return std::vector<DTensor>{subtract(a.grad, multiply(exp(a.output), total))};
  });
  {
    OpDef def;
    def.name = std::string(kXent);
    def.num_inputs = 2;
    def.infer = [](const std::vector<TensorSpec>& in, const OpAttrs&) {
      return infer_xent(in, kXent);
    };
    def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
      return shard_xent(in);
    };
    def.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs&,
                    const LocalContext&) { xent_kernel(in, out); };
    // labels: not differentiable; logits: (softmax - onehot(labels)) * g[..., None].
    def.vjp = [](const VjpArgs& a) {
      return std::vector<DTensor>{DTensor(),
                                  call_op(kXentGrad, {a.inputs[0], a.inputs[1], a.grad})};
    };
    def.saves = VjpSaves::of_inputs({0, 1});
    registry.add(std::move(def));
  }
  {
    OpDef def;
    def.name = std::string(kXentGrad);
    def.num_inputs = 3;
    def.infer = [](const std::vector<TensorSpec>& in, const OpAttrs&) {
      return infer_xent_grad(in);
    };
    def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
      return shard_xent_grad(in);
    };
    def.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs&,
                    const LocalContext&) { xent_grad_kernel(in, out); };
    // Second-order gradients of the cross entropy are not provided.
    registry.add(std::move(def));
  }
}

}  // namespace detail

DTensor softmax(const DTensor& logits) { return call_op(detail::kSoftmax, {logits}); }

DTensor log_softmax(const DTensor& logits) { return call_op(detail::kLogSoftmax, {logits}); }

DTensor sparse_softmax_cross_entropy_with_logits(const DTensor& labels, const DTensor& logits) {
  // A sharded class axis: the vocabulary-parallel path (ops_parallel_xent.cpp), no gather.
  if (logits.defined() && labels.defined() && logits.rank() >= 1 &&
      !detail::spec_list(logits.layout()).back().empty()) {
    return detail::vocab_parallel_cross_entropy(labels, logits);
  }
  return call_op(detail::kXent, {labels, logits});
}

}  // namespace tessel
