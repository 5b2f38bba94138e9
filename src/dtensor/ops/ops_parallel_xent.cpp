// Vocabulary-parallel cross-entropy (registered by register_parallel_xent_ops): the loss of
// logits whose class axis is sharded, computed without ever gathering the logits (Megatron's
// vocab-parallel cross-entropy, PyTorch's loss_parallel). sparse_softmax_cross_entropy_with_logits
// (ops_nn.cpp) takes this path when the class axis of its logits is sharded:
//
//   m     = stop_gradient(reduce_max(logits, -1))   Partial(max) over the class mesh dims
//   parts = "xent_parts"(labels, logits, m)         [..., 2], Partial(sum) over the same dims:
//           parts[..., 0] = sum over this device's classes of exp(x - m)
//           parts[..., 1] = x[label] - m on the device holding the label's class, else 0
//   loss  = "sparse_softmax_cross_entropy_with_logits.vocab_parallel"(parts, labels)
//           log(parts[..., 0]) - parts[..., 1], checking each label against the class count
//
// So the class axis costs two all-reduces of [rows] and [rows, 2] values (the max and the parts),
// never one of the logits. loss = logsumexp(x) - x[label] whatever m is, so treating m as a
// constant (stop_gradient) gives the exact gradient: d logits = (softmax - onehot) * g, computed
// by "xent_parts_grad" on the class shards from the reduced parts.
//
// Sharding rules: labels, m and the parts' leading axes follow the logits' batch specs (the logits
// decide); the parts' last axis is whole. Kernels find their classes' global offset from the
// logits block. A label outside [0, classes) is skipped by the parts (no device holds its class)
// and throws kInvalidArgument from the last stage's kernel, so that it surfaces at the next sync
// point with TF's message, as the unsharded op's does.
#include <cmath>

#include "dtensor/framework/op_util.h"
#include "dtensor/ops/op_families.h"
#include "dtensor/ops/xent_names.h"
#include "tessel/dtensor/ops.h"

namespace tessel {
namespace detail {
namespace {

// The logits' specs without the class axis, no Partial.
SpecList batch_specs(const Layout& logits) {
  SpecList specs = spec_list(logits);
  specs.pop_back();
  return specs;
}

Layout with_pair_axis(const Mesh& mesh, SpecList specs, std::vector<PartialDim> partial = {}) {
  specs.push_back({});
  return make_layout(mesh, specs, std::move(partial));
}

Shape with_pair(const Shape& batch) {
  std::vector<int64_t> dims = batch.dims();
  dims.push_back(2);
  return Shape(dims);
}

void check_label(int64_t label, int64_t classes, std::string_view op) {
  if (label < 0 || label >= classes) {
    throw_invalid(op, "Received a label value of {} which is outside the valid range of [0, {})",
                  label, classes);
  }
}

// The logits block's geometry: its rows, its classes, the first one's global index, and the
// global class count.
struct ClassBlock {
  int64_t rows, local, offset, classes;
};
ClassBlock class_block(const Tensor& logits, const LocalContext& context) {
  const int rank = logits.rank();
  ClassBlock b;
  b.local = logits.shape()[rank - 1];
  b.rows = b.local == 0 ? 0 : logits.num_elements() / b.local;
  b.offset = context.input_blocks[1].offsets.back();
  b.classes = context.input_shapes[1][rank - 1];
  return b;
}

void parts_kernel(const std::vector<Tensor>& in, Tensor& out, const LocalContext& context) {
  const ClassBlock b = class_block(in[1], context);
  const int64_t rows = out.num_elements() / 2;
  dispatch_float(out.dtype(), kXentParts, [&]<typename T>() {
    dispatch_index(in[0].dtype(), kXentParts, [&]<typename L>() {
      const L* labels = in[0].data<L>();
      const T* x = in[1].data<T>();
      const T* m = in[2].data<T>();
      T* o = out.data<T>();
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t label = static_cast<int64_t>(labels[r]);
        const T* xr = x + r * b.local;
        T total = 0;
        for (int64_t c = 0; c < b.local; ++c) total += std::exp(xr[c] - m[r]);
        const int64_t mine = label - b.offset;
        o[2 * r] = total;
        o[2 * r + 1] = mine >= 0 && mine < b.local ? xr[mine] - m[r] : T(0);
      }
    });
  });
}

// d logits = g_sum * exp(x - m) + g_pick * onehot(label), per row.
void parts_grad_kernel(const std::vector<Tensor>& in, Tensor& out, const LocalContext& context) {
  const ClassBlock b = class_block(in[1], context);
  dispatch_float(out.dtype(), kXentPartsGrad, [&]<typename T>() {
    dispatch_index(in[0].dtype(), kXentPartsGrad, [&]<typename L>() {
      const L* labels = in[0].data<L>();
      const T* x = in[1].data<T>();
      const T* m = in[2].data<T>();
      const T* g = in[3].data<T>();
      T* d = out.data<T>();
      for (int64_t r = 0; r < b.rows; ++r) {
        const T* xr = x + r * b.local;
        T* dr = d + r * b.local;
        for (int64_t c = 0; c < b.local; ++c) dr[c] = g[2 * r] * std::exp(xr[c] - m[r]);
        const int64_t mine = static_cast<int64_t>(labels[r]) - b.offset;
        if (mine >= 0 && mine < b.local) dr[mine] += g[2 * r + 1];
      }
    });
  });
}

TensorSpec infer_parts(const std::vector<TensorSpec>& in, std::string_view op) {
  const TensorSpec& labels = in[0];
  const TensorSpec& logits = in[1];
  if (labels.dtype != DType::kI32 && labels.dtype != DType::kI64) {
    throw_invalid(op, "labels must be i32 or i64, got {}", dtype_name(labels.dtype));
  }
  require_float(logits.dtype, op, "logits", NotFloat::kNeedsFloating);
  const std::vector<int64_t>& dims = logits.shape.dims();
  if (dims.empty()) throw_invalid(op, "logits must have rank >= 1, got a scalar");
  const Shape batch(std::vector<int64_t>(dims.begin(), dims.end() - 1));
  if (labels.shape != batch || in[2].shape != batch || in[2].dtype != logits.dtype) {
    throw_invalid(op, "labels {} and max {} must be the logits' {} without the class axis",
                  labels.shape.to_string(), in[2].shape.to_string(), logits.shape.to_string());
  }
  return {batch, logits.dtype, {}};
}

void register_parts(OpRegistry& registry) {
  OpDef parts;
  parts.name = std::string(kXentParts);
  parts.num_inputs = 3;
  parts.infer = [](const std::vector<TensorSpec>& in, const OpAttrs&) {
    TensorSpec batch = infer_parts(in, kXentParts);
    return TensorSpec{with_pair(batch.shape), batch.dtype, {}};
  };
  parts.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
    const Layout logits = in[1].layout.without_partial();
    const Mesh& mesh = logits.mesh();
    const Layout batch = make_layout(mesh, batch_specs(logits));
    const SpecList specs = spec_list(logits);
    std::vector<PartialDim> partial;
    for (const std::string& d : specs.back()) partial.push_back({d, ReduceOp::kSum});
    return ShardingDecision{{batch, logits, batch},
                            with_pair_axis(mesh, batch_specs(logits), std::move(partial))};
  };
  parts.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs&,
                    const LocalContext& context) { parts_kernel(in, out, context); };
  parts.vjp = [](const VjpArgs& a) {
    return std::vector<DTensor>{
        DTensor(), call_op(kXentPartsGrad, {a.inputs[0], a.inputs[1], a.inputs[2], a.grad}),
        DTensor()};
  };
  parts.saves = VjpSaves::of_inputs({0, 1, 2});
  registry.add(std::move(parts));

  OpDef grad;
  grad.name = std::string(kXentPartsGrad);
  grad.num_inputs = 4;
  grad.infer = [](const std::vector<TensorSpec>& in, const OpAttrs&) {
    const TensorSpec batch = infer_parts(in, kXentPartsGrad);
    if (in[3].shape != with_pair(batch.shape) || in[3].dtype != batch.dtype) {
      throw_invalid(kXentPartsGrad, "the gradient is {}, the parts are {}", in[3].shape.to_string(),
                    with_pair(batch.shape).to_string());
    }
    return TensorSpec{in[1].shape, in[1].dtype, {}};
  };
  grad.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
    const Layout logits = in[1].layout.without_partial();
    const Layout batch = make_layout(logits.mesh(), batch_specs(logits));
    return ShardingDecision{
        {batch, logits, batch, with_pair_axis(logits.mesh(), batch_specs(logits))}, logits};
  };
  grad.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs&,
                   const LocalContext& context) { parts_grad_kernel(in, out, context); };
  registry.add(std::move(grad));
}

// loss = log(parts[..., 0]) - parts[..., 1]; its gradient (g / parts[..., 0], -g).
void register_finish(OpRegistry& registry) {
  const auto check = [](const TensorSpec& parts, std::string_view op) {
    const std::vector<int64_t>& dims = parts.shape.dims();
    if (dims.empty() || dims.back() != 2) {
      throw_invalid(op, "parts must be [..., 2], got {}", parts.shape.to_string());
    }
    return Shape(std::vector<int64_t>(dims.begin(), dims.end() - 1));
  };
  const auto pair_layout = [](const Layout& l) {
    SpecList specs = spec_list(l);
    specs.back().clear();
    return make_layout(l.mesh(), specs);
  };
  OpDef finish;
  finish.name = std::string(kXentFinish);
  finish.num_inputs = 2;  // parts, labels
  finish.infer = [check](const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
    const Shape batch = check(in[0], kXentFinish);
    if (in[1].shape != batch || (in[1].dtype != DType::kI32 && in[1].dtype != DType::kI64)) {
      throw_invalid(kXentFinish, "labels must be i32 or i64 {}, got {} {}", batch.to_string(),
                    dtype_name(in[1].dtype), in[1].shape.to_string());
    }
    if (!attrs.vocab_size) throw_invalid(kXentFinish, "needs the class count in attrs.vocab_size");
    return TensorSpec{batch, in[0].dtype, {}};
  };
  finish.shard = [pair_layout](const std::vector<TensorSpec>& in, const TensorSpec&,
                               const OpAttrs&) {
    const Layout parts = pair_layout(in[0].layout);
    SpecList specs = spec_list(parts);
    specs.pop_back();
    const Layout batch = make_layout(parts.mesh(), specs);
    return ShardingDecision{{parts, batch}, batch};
  };
  finish.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                     const LocalContext&) {
    const int64_t classes = attrs.vocab_size.value_or(0);
    dispatch_float(out.dtype(), kXentFinish, [&]<typename T>() {
      dispatch_index(in[1].dtype(), kXentFinish, [&]<typename L>() {
        const T* p = in[0].data<T>();
        const L* labels = in[1].data<L>();
        T* o = out.data<T>();
        const int64_t rows = out.num_elements();
        for (int64_t r = 0; r < rows; ++r) {
          check_label(static_cast<int64_t>(labels[r]), classes, kXentFinish);
          o[r] = std::log(p[2 * r]) - p[2 * r + 1];
        }
      });
    });
  };
  finish.vjp = [](const VjpArgs& a) {
    return std::vector<DTensor>{call_op(kXentFinishGrad, {a.inputs[0], a.grad}), DTensor()};
  };
  finish.saves = VjpSaves::of_inputs({0});
  registry.add(std::move(finish));

  OpDef grad;
  grad.name = std::string(kXentFinishGrad);
  grad.num_inputs = 2;
  grad.infer = [check](const std::vector<TensorSpec>& in, const OpAttrs&) {
    if (in[1].shape != check(in[0], kXentFinishGrad) || in[1].dtype != in[0].dtype) {
      throw_invalid(kXentFinishGrad, "the gradient is {}, the loss is {}", in[1].shape.to_string(),
                    check(in[0], kXentFinishGrad).to_string());
    }
    return TensorSpec{in[0].shape, in[0].dtype, {}};
  };
  grad.shard = [pair_layout](const std::vector<TensorSpec>& in, const TensorSpec&,
                             const OpAttrs&) {
    const Layout parts = pair_layout(in[0].layout);
    SpecList specs = spec_list(parts);
    specs.pop_back();
    return ShardingDecision{{parts, make_layout(parts.mesh(), specs)}, parts};
  };
  grad.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs&,
                   const LocalContext&) {
    dispatch_float(out.dtype(), kXentFinishGrad, [&]<typename T>() {
      const T* p = in[0].data<T>();
      const T* g = in[1].data<T>();
      T* o = out.data<T>();
      const int64_t rows = in[1].num_elements();
      for (int64_t r = 0; r < rows; ++r) {
        o[2 * r] = g[r] / p[2 * r];
        o[2 * r + 1] = -g[r];
      }
    });
  };
  registry.add(std::move(grad));
}

}  // namespace

void register_parallel_xent_ops(OpRegistry& registry) {
  register_parts(registry);
  register_finish(registry);
}

DTensor vocab_parallel_cross_entropy(const DTensor& labels, const DTensor& logits) {
  const DTensor most = stop_gradient(reduce_max(logits, {logits.rank() - 1}));
  OpAttrs attrs;
  attrs.vocab_size = logits.shape()[logits.rank() - 1];
  return call_op(kXentFinish, {call_op(kXentParts, {labels, logits, most}), labels}, attrs);
}

}  // namespace detail
}  // namespace tessel
