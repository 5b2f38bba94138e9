// The elementwise op family, unary half: negative, exp, log, tanh, relu, gelu (tanh approximation,
// "gelu"; exact erf form, "gelu_erf"), sigmoid, sqrt, rsqrt, square, abs, sin, cos, silu, cast, and
// the host-scalar forms add(x, double), multiply(x, double) and pow(x, double), registered as
// "add_scalar" / "multiply_scalar" / "pow_scalar" with the scalar in OpAttrs::operand (no rank-0
// DTensor is made: the scalar travels with the kernel). Beside them the derivative ops their
// gradients call, binary ops (grad, x) or (grad, y) -> grad * f' (relu_grad, tanh_grad, gelu_grad,
// gelu_erf_grad, sigmoid_grad, abs_grad, silu_grad), with ops_elementwise.cpp's broadcasting rule
// (binary_def).
//
// Sharding rule: the output has the input's sharding, no communication. Partial dims stay
// Partial where the op commutes with the pending reduction, else the input is demanded reduced:
//  - negative: sum and mean kept; max becomes min and min max (-max a_i = min -a_i); prod reduced.
//  - add_scalar: sum kept (the scalar is added on the first device of each sum group only, so it
//    is added once), mean, max and min kept (added to every term); prod reduced.
//  - multiply_scalar: sum and mean kept; max and min kept, swapped for a negative factor; prod
//    reduced.
//  - exp, log, tanh, relu, gelu, sigmoid, sqrt, rsqrt, square, abs, sin, cos, silu, pow_scalar,
//    cast: every Partial dim reduced (nonlinear; cast rounds).
//  - the derivative ops keep the gradient's linear Partial dims (they are linear in it).
// Kernels: one flat loop per (dtype, op) over elementwise_math.h's functor (elementwise.h), and
// the GPU kernel of the same functor beside it; cast between f32 and f64 is a loop, any other
// pair of dtypes goes through Tensor::astype.
#include <algorithm>
#include <optional>

#include "dtensor/framework/op_util.h"
#include "dtensor/ops/elementwise.h"
#include "dtensor/ops/op_families.h"
#include "tessel/core/parallel.h"
#include "tessel/dtensor/ops.h"

namespace tessel {
namespace detail {
namespace {

namespace ew = elementwise;

enum class PartialRule { kReduce, kNegate, kAddScalar, kScaleScalar };

// `operand`: multiply_scalar's factor (its sign decides whether max and min swap).
ShardingDecision unary_rule(const TensorSpec& in, PartialRule rule, double operand) {
  const Layout& l = in.layout;
  if (!l.is_partial()) return {{l}, l};
  std::vector<PartialDim> keep_in, keep_out;
  for (const PartialDim& p : l.partial()) {
    std::optional<ReduceOp> out;
    switch (p.op) {
      case ReduceOp::kSum:
      case ReduceOp::kMean:
        if (rule != PartialRule::kReduce) out = p.op;
        break;
      case ReduceOp::kMax:
      case ReduceOp::kMin: {
        const ReduceOp flip = p.op == ReduceOp::kMax ? ReduceOp::kMin : ReduceOp::kMax;
        if (rule == PartialRule::kNegate) out = flip;
        if (rule == PartialRule::kAddScalar) out = p.op;
        if (rule == PartialRule::kScaleScalar) out = operand < 0 ? flip : p.op;
        break;
      }
      case ReduceOp::kProd:
        break;
    }
    if (out) {
      keep_in.push_back(p);
      keep_out.push_back({p.mesh_dim, *out});
    }
  }
  ShardingDecision d;
  d.inputs.push_back(keep_in.size() == l.partial().size() ? l : l.with_partial(keep_in));
  d.output = l.with_partial(std::move(keep_out));
  return d;
}

OpDef unary_def(const char* name, PartialRule rule) {
  OpDef def;
  def.name = name;
  def.num_inputs = 1;
  def.infer = [name](const std::vector<TensorSpec>& in, const OpAttrs&) {
    require_float(in[0].dtype, name, "dtype");
    TensorSpec out;
    out.shape = in[0].shape;
    out.dtype = in[0].dtype;
    return out;
  };
  def.shard = [rule](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs& attrs) {
    return unary_rule(in[0], rule, attrs.operand.value_or(0.0));
  };
  return def;
}

// Registers unary op `name`: unary_def and add_elementwise.
template <typename F>
void add_unary(OpRegistry& registry, const char* name, PartialRule rule, VjpSaves saves,
               VjpFn vjp) {
  add_elementwise<F>(registry, unary_def(name, rule), saves, std::move(vjp));
}

// What the VJPs below read: x, the output y, or (derivative ops) input k.
constexpr VjpSaves kX = VjpSaves::of_inputs({0});
constexpr VjpSaves kY = VjpSaves::output_only();

void register_scalar_ops(OpRegistry& registry) {
  OpDef add = unary_def("add_scalar", PartialRule::kAddScalar);
  add.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                  const LocalContext& context) {
    const bool adds = first_in_sum_groups(*context.output_layout, context.mesh_offset);
    dispatch_float(out.dtype(), "add_scalar", [&]<typename T>() {
      if (!adds) {
        if (out.num_elements() > 0) std::copy_n(in[0].data<T>(), out.num_elements(), out.data<T>());
        return;
      }
      unary_loop<T>(in[0], out, ew::AddScalar{attrs.operand.value_or(0.0)});
    });
  };
  add.gpu_kernel = gpu_add_scalar_kernel();
  add.vjp = [](const VjpArgs& v) { return std::vector<DTensor>{v.grad}; };
  add.saves = VjpSaves::nothing();
  registry.add(std::move(add));

  OpDef mul = unary_def("multiply_scalar", PartialRule::kScaleScalar);
  mul.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                  const LocalContext&) {
    dispatch_float(out.dtype(), "multiply_scalar", [&]<typename T>() {
      unary_loop<T>(in[0], out, ew::MultiplyScalar{attrs.operand.value_or(0.0)});
    });
  };
  mul.gpu_kernel =
      gpu_unary_kernel("multiply_scalar", ew::index_in<ew::MultiplyScalar, ew::UnaryOps>);
  mul.vjp = [](const VjpArgs& v) {
    return std::vector<DTensor>{multiply(v.grad, v.attrs->operand.value_or(0.0))};
  };
  mul.saves = VjpSaves::nothing();
  registry.add(std::move(mul));
}

// Issue 34's unary ops and pow with a host-scalar exponent.
void register_more_unary_ops(OpRegistry& registry) {
  add_unary<ew::Square>(registry, "square", PartialRule::kReduce, kX, [](const VjpArgs& v) {
    return std::vector<DTensor>{multiply(multiply(v.grad, v.inputs[0]), 2.0)};
  });
  add_unary<ew::Abs>(registry, "abs", PartialRule::kReduce, kX, [](const VjpArgs& v) {
    return std::vector<DTensor>{call_op("abs_grad", {v.grad, v.inputs[0]})};
  });
  add_binary<ew::AbsGrad>(
      registry, "abs_grad", BinaryPartial::kFirst, VjpSaves::of_inputs({1}), [](const VjpArgs& v) {
        // Linear in the gradient; piecewise constant in x.
        return std::vector<DTensor>{call_op("abs_grad", {v.grad, v.inputs[1]}), DTensor()};
      });
  add_unary<ew::Sin>(registry, "sin", PartialRule::kReduce, kX, [](const VjpArgs& v) {
    return std::vector<DTensor>{multiply(v.grad, cos(v.inputs[0]))};
  });
  add_unary<ew::Cos>(registry, "cos", PartialRule::kReduce, kX, [](const VjpArgs& v) {
    return std::vector<DTensor>{negative(multiply(v.grad, sin(v.inputs[0])))};
  });
  add_unary<ew::Silu>(registry, "silu", PartialRule::kReduce, kX, [](const VjpArgs& v) {
    return std::vector<DTensor>{call_op("silu_grad", {v.grad, v.inputs[0]})};
  });
  add_binary<ew::SiluGrad>(registry, "silu_grad", BinaryPartial::kFirst, VjpSaves::nothing(),
                           nullptr);

  OpDef power = unary_def("pow_scalar", PartialRule::kReduce);
  power.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                    const LocalContext&) {
    dispatch_float(out.dtype(), "pow_scalar", [&]<typename T>() {
      unary_loop<T>(in[0], out, ew::PowScalar{attrs.operand.value_or(0.0)});
    });
  };
  power.gpu_kernel = gpu_unary_kernel("pow_scalar", ew::index_in<ew::PowScalar, ew::UnaryOps>);
  power.vjp = [](const VjpArgs& v) {
    // d x^e = e x^(e-1); e == 0: a constant (x^-1 would make 0 * inf = NaN at x == 0).
    const double e = v.attrs->operand.value_or(0.0);
    if (e == 0.0) return std::vector<DTensor>{DTensor()};
    const DTensor d = e == 1.0 ? v.grad : multiply(v.grad, multiply(pow(v.inputs[0], e - 1.0), e));
    return std::vector<DTensor>{d};
  };
  power.saves = kX;
  registry.add(std::move(power));
}

// out[i] = To(in[i]) over the intra-op threads: the f32 <-> bf16 casts around mixed-precision
// matmuls run on every activation (Tensor::astype's generic conversion is several times slower).
template <typename From, typename To>
void convert_contiguous(const Tensor& in, Tensor& out) {
  const From* src = in.data<From>();
  To* dst = out.data<To>();
  parallel_for(out.num_elements(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    convert(src + begin, dst + begin, end - begin);  // float16.h's vector conversions
  });
}

void register_cast(OpRegistry& registry) {
  OpDef def;
  def.name = "cast";
  def.num_inputs = 1;
  def.infer = [](const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
    TensorSpec out;
    out.shape = in[0].shape;
    out.dtype = attrs.dtype;
    return out;
  };
  // A widening float cast (bf16 -> f32, f32 -> f64, ...) is exact and monotonic: pending sums,
  // maxima and minima stay pending and are reduced in the wider dtype (mixed precision's bf16
  // partial products summed in f32). Any other cast reduces them first.
  def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs& attrs) {
    const bool widening = is_floating(in[0].dtype) && is_floating(attrs.dtype) &&
                          dtype_size(attrs.dtype) > dtype_size(in[0].dtype);
    return widening ? unary_rule(in[0], PartialRule::kScaleScalar, 1.0)
                    : unary_rule(in[0], PartialRule::kReduce, 0.0);
  };
  def.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs&, const LocalContext&) {
    const int64_t n = out.num_elements();
    if (n == 0) return;
    const DType from = in[0].dtype();
    const DType to = out.dtype();
    if (from == to) {
      out.copy_from(in[0]);
    } else if (from == DType::kF32 && to == DType::kF64) {
      std::copy_n(in[0].data<float>(), n, out.data<double>());
    } else if (from == DType::kF64 && to == DType::kF32) {
      std::copy_n(in[0].data<double>(), n, out.data<float>());
    } else if (from == DType::kF32 && to == DType::kBF16) {
      convert_contiguous<float, bfloat16>(in[0], out);
    } else if (from == DType::kBF16 && to == DType::kF32) {
      convert_contiguous<bfloat16, float>(in[0], out);
    } else if (from == DType::kF32 && to == DType::kF16) {
      convert_contiguous<float, float16>(in[0], out);
    } else if (from == DType::kF16 && to == DType::kF32) {
      convert_contiguous<float16, float>(in[0], out);
    } else {
      out.copy_from(in[0].astype(to));
    }
  };
  def.vjp = [](const VjpArgs& v) {
    const DType from = v.inputs[0].dtype();
    if (!is_floating(from) || !is_floating(v.output.dtype()))
      return std::vector<DTensor>{DTensor()};
    return std::vector<DTensor>{cast(v.grad, from)};
  };
  def.saves = VjpSaves::nothing();  // the dtypes only
  registry.add(std::move(def));
}

}  // namespace

void register_unary_ops(OpRegistry& registry) {
  add_unary<ew::Negative>(registry, "negative", PartialRule::kNegate, VjpSaves::nothing(),
                          [](const VjpArgs& v) { return std::vector<DTensor>{negative(v.grad)}; });
  add_unary<ew::Exp>(registry, "exp", PartialRule::kReduce, kY, [](const VjpArgs& v) {
    return std::vector<DTensor>{multiply(v.grad, v.output)};
  });
  add_unary<ew::Log>(registry, "log", PartialRule::kReduce, kX, [](const VjpArgs& v) {
    return std::vector<DTensor>{divide(v.grad, v.inputs[0])};
  });
  add_unary<ew::Sqrt>(registry, "sqrt", PartialRule::kReduce, kY, [](const VjpArgs& v) {
    // d sqrt(x) = 0.5 / sqrt(x).
    return std::vector<DTensor>{divide(multiply(v.grad, 0.5), v.output)};
  });
  add_unary<ew::Rsqrt>(registry, "rsqrt", PartialRule::kReduce,
                       VjpSaves::of_inputs({0}, /*with_output=*/true), [](const VjpArgs& v) {
                         // d x^(-1/2) = -0.5 x^(-1/2) / x.
                         return std::vector<DTensor>{
                             multiply(v.grad, divide(multiply(v.output, -0.5), v.inputs[0]))};
                       });

  // Each op with a derivative op: its VJP calls it on (grad, x) or (grad, y); the derivative op
  // is linear in the gradient (input 0), which may stay Partial.
  add_unary<ew::Tanh>(registry, "tanh", PartialRule::kReduce, kY, [](const VjpArgs& v) {
    return std::vector<DTensor>{call_op("tanh_grad", {v.grad, v.output})};
  });
  add_binary<ew::TanhGrad>(
      registry, "tanh_grad", BinaryPartial::kFirst, VjpSaves::of_inputs({0, 1}),
      [](const VjpArgs& v) {
        // d/dg = 1 - y^2; d/dy = -2 g y.
        return std::vector<DTensor>{
            call_op("tanh_grad", {v.grad, v.inputs[1]}),
            multiply(multiply(v.grad, v.inputs[0]), multiply(v.inputs[1], -2.0))};
      });
  add_unary<ew::Relu>(registry, "relu", PartialRule::kReduce, kX, [](const VjpArgs& v) {
    return std::vector<DTensor>{call_op("relu_grad", {v.grad, v.inputs[0]})};
  });
  add_binary<ew::ReluGrad>(
      registry, "relu_grad", BinaryPartial::kFirst, VjpSaves::of_inputs({1}), [](const VjpArgs& v) {
        return std::vector<DTensor>{call_op("relu_grad", {v.grad, v.inputs[1]}), DTensor()};
      });
  add_unary<ew::Gelu>(registry, "gelu", PartialRule::kReduce, kX, [](const VjpArgs& v) {
    return std::vector<DTensor>{call_op("gelu_grad", {v.grad, v.inputs[0]})};
  });
  add_binary<ew::GeluGrad>(registry, "gelu_grad", BinaryPartial::kFirst, VjpSaves::nothing(),
                           nullptr);
  add_unary<ew::GeluErf>(registry, "gelu_erf", PartialRule::kReduce, kX, [](const VjpArgs& v) {
    return std::vector<DTensor>{call_op("gelu_erf_grad", {v.grad, v.inputs[0]})};
  });
  add_binary<ew::GeluErfGrad>(registry, "gelu_erf_grad", BinaryPartial::kFirst, VjpSaves::nothing(),
                              nullptr);
  add_unary<ew::Sigmoid>(registry, "sigmoid", PartialRule::kReduce, kY, [](const VjpArgs& v) {
    return std::vector<DTensor>{call_op("sigmoid_grad", {v.grad, v.output})};
  });
  const VjpFn sigmoid_grad_vjp = [](const VjpArgs& v) {
    // d/dg = y (1 - y); d/dy = g (1 - 2y).
    const DTensor& y = v.inputs[1];
    return std::vector<DTensor>{
        call_op("sigmoid_grad", {v.grad, y}),
        multiply(multiply(v.grad, v.inputs[0]), add(multiply(y, -2.0), 1.0))};
  };
  add_binary<ew::SigmoidGrad>(registry, "sigmoid_grad", BinaryPartial::kFirst,
                              VjpSaves::of_inputs({0, 1}), sigmoid_grad_vjp);

  register_more_unary_ops(registry);
  register_scalar_ops(registry);
  register_cast(registry);
}

}  // namespace detail

DTensor negative(const DTensor& x) { return call_op("negative", {x}); }
DTensor exp(const DTensor& x) { return call_op("exp", {x}); }
DTensor log(const DTensor& x) { return call_op("log", {x}); }
DTensor tanh(const DTensor& x) { return call_op("tanh", {x}); }
DTensor relu(const DTensor& x) { return call_op("relu", {x}); }
DTensor gelu(const DTensor& x, bool approximate) {
  return call_op(approximate ? "gelu" : "gelu_erf", {x});
}
DTensor sigmoid(const DTensor& x) { return call_op("sigmoid", {x}); }
DTensor sqrt(const DTensor& x) { return call_op("sqrt", {x}); }
DTensor rsqrt(const DTensor& x) { return call_op("rsqrt", {x}); }

DTensor square(const DTensor& x) { return call_op("square", {x}); }
DTensor abs(const DTensor& x) { return call_op("abs", {x}); }
DTensor sin(const DTensor& x) { return call_op("sin", {x}); }
DTensor cos(const DTensor& x) { return call_op("cos", {x}); }
DTensor silu(const DTensor& x) { return call_op("silu", {x}); }

DTensor pow(const DTensor& x, double exponent) {
  return call_op("pow_scalar", {x}, {.operand = exponent});
}

DTensor cast(const DTensor& x, DType dtype) { return call_op("cast", {x}, {.dtype = dtype}); }

DTensor add(const DTensor& a, double b) { return call_op("add_scalar", {a}, {.operand = b}); }

DTensor multiply(const DTensor& a, double b) {
  return call_op("multiply_scalar", {a}, {.operand = b});
}

}  // namespace tessel
