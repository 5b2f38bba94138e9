// Bindings of the SPMD op layer with TensorFlow's names and keyword names (ops.h): elementwise
// (add, subtract, multiply, divide, maximum, minimum, negative, exp, log, tanh, relu, gelu,
// sigmoid, sqrt, rsqrt, cast), matmul, einsum, reductions, softmax / log_softmax /
// sparse_softmax_cross_entropy_with_logits, conv2d / max_pool2d / avg_pool2d, shape ops,
// embedding_lookup, the creation ops and the indexing and structural ops (gather,
// take_along_axis, scatter_add, pad, cumsum, one_hot, top_k);
// Python operators on DTensor; and the op registry (op_registry.h): call_op, plan_op
// (TensorSpec -> ShardingDecision), OpAttrs, the replicate fallback and the op names.
//
// Conversions only. Every op releases the GIL while it dispatches (relayouts of its inputs wait
// for the devices). Every DTensor returned keeps its Runtime alive (as bind_dtensor.cpp does).
// Python scalars: add(x, 2.0) and multiply(x, 2.0) use C++'s host-scalar overloads; the
// operators `x - 2.0`, `2.0 - x`, `x / 2.0`, `2.0 / x` convert the scalar to a replicated rank-0
// DTensor of x's dtype on x's mesh (TF's convert_to_tensor) and call subtract / divide.
//
// tessel.zeros / random_uniform / random_normal keep their host forms (tessel.Tensor, from
// bind_core.cpp's Tensor.zeros / ...) as second overloads: a call without a Layout is the host
// form, so the package's existing host-tensor API is unchanged, except inside
// `with tessel.default_mesh(mesh):`, where it is the C++ form without a layout (replicated on the
// default mesh, as TF DTensor places creation ops); ones and fill without a layout likewise.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <pybind11/operators.h>

#include "casters.h"
#include "fast_calls.h"
#include "tessel/core/error.h"
#include "tessel/core/tensor.h"
#include "tessel/dtensor/dtensor.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/ops.h"
#include "tessel/runtime/runtime.h"

namespace tessel::python {

// `holder` keeps the Python object of t's Runtime alive (a Runtime made in Python may otherwise
// go before whatever points at its devices); shared with bind_autodiff.cpp.
namespace {

// Only a Runtime some Python object stands for can be collected under a DTensor; the global
// one (and any other only C++ owns) has none, and wrapping it for every result would cost an
// object and a patient entry per op.
void keep_alive_if_owned(py::handle holder, Runtime* runtime) {
  static const py::detail::type_info* runtime_type = py::detail::get_type_info(typeid(Runtime));
  if (runtime == nullptr) return;
  if (py::handle owner = py::detail::get_object_handle(runtime, runtime_type)) {
    py::detail::keep_alive_impl(holder, owner);
  }
}

}  // namespace

void keep_runtime_alive(py::handle holder, const DTensor& t) {
  keep_alive_if_owned(holder, t.defined() ? &t.runtime() : nullptr);
}

const py::detail::type_info* dtensor_type_info() {
  static const py::detail::type_info* info = py::detail::get_type_info(typeid(DTensor));
  return info;
}

// A DTensor as a Python object that keeps its Runtime alive (shared with bind_autodiff.cpp).
// py::cast would look the DTensor type up by name on every call: this is every op's result.
py::object wrap_dtensor(DTensor tensor) {
  Runtime* runtime = tensor.defined() ? &tensor.runtime() : nullptr;
  const auto move_out = [](const void* p) -> void* {
    return new DTensor(std::move(*static_cast<DTensor*>(const_cast<void*>(p))));
  };
  auto obj = py::reinterpret_steal<py::object>(
      py::detail::type_caster_generic::cast(&tensor, py::return_value_policy::move, py::handle(),
                                            dtensor_type_info(), nullptr, move_out));
  if (!obj) throw py::error_already_set();
  keep_alive_if_owned(obj, runtime);
  return obj;
}

py::list wrap_dtensors(std::vector<DTensor> tensors) {
  py::list out;
  for (DTensor& t : tensors) out.append(wrap_dtensor(std::move(t)));
  return out;
}

namespace {

// fn() with the GIL released, its DTensor wrapped.
template <class Fn>
py::object run(Fn&& fn) {
  DTensor out;
  {
    py::gil_scoped_release release;
    out = fn();
  }
  return wrap_dtensor(std::move(out));
}

// TF's `axis`: None (every axis), an int, or a sequence of ints. An empty sequence means "no
// axis" in TF but "every axis" in C++: refused rather than silently reinterpreted.
std::vector<int64_t> to_axes(py::handle axis, const char* op) {
  if (axis.is_none()) return {};
  if (py::isinstance<py::int_>(axis) || py::hasattr(axis, "__index__")) {
    return {axis.cast<int64_t>()};
  }
  if (!py::detail::is_plain_sequence(axis)) {
    throw py::type_error(std::string(op) + ": axis must be None, an int or a list of ints");
  }
  auto axes = axis.cast<std::vector<int64_t>>();
  if (axes.empty()) {
    throw Error(ErrorCode::kInvalidArgument, op,
                "axis=[] (reduce over no axis) is not supported; axis=None reduces every axis");
  }
  return axes;
}

// A Python scalar as a replicated rank-0 DTensor like `like` (dtype, mesh, runtime).
DTensor scalar_like(double value, const DTensor& like) {
  return fill(Shape(std::vector<int64_t>{}), value, Layout::replicated(like.layout().mesh(), 0),
              like.dtype(), &like.runtime());
}

// ---- ops.h --------------------------------------------------------------------------------

using Binary = DTensor (*)(const DTensor&, const DTensor&);
using Unary = DTensor (*)(const DTensor&);

void bind_binary(py::module_& m, const char* name, Binary fn) {
  m.def(
      name, [fn](const DTensor& x, const DTensor& y) { return run([&] { return fn(x, y); }); },
      py::arg("x"), py::arg("y"));
}

void bind_unary(py::module_& m, const char* name, Unary fn, const char* arg = "x") {
  m.def(
      name, [fn](const DTensor& x) { return run([&] { return fn(x); }); }, py::arg(arg));
}

void bind_elementwise(py::module_& m) {
  bind_binary(m, "add", &tessel::add);
  m.def(
      "add", [](const DTensor& x, double y) { return run([&] { return add(x, y); }); },
      py::arg("x"), py::arg("y"), "x + a host scalar (added once to a Partial sum).");
  bind_binary(m, "subtract", &tessel::subtract);
  bind_binary(m, "multiply", &tessel::multiply);
  m.def(
      "multiply", [](const DTensor& x, double y) { return run([&] { return multiply(x, y); }); },
      py::arg("x"), py::arg("y"), "x * a host scalar.");
  bind_binary(m, "divide", &tessel::divide);
  bind_binary(m, "maximum", &tessel::maximum);
  bind_binary(m, "minimum", &tessel::minimum);

  bind_unary(m, "negative", &tessel::negative);
  bind_unary(m, "exp", &tessel::exp);
  bind_unary(m, "log", &tessel::log);
  bind_unary(m, "tanh", &tessel::tanh);
  bind_unary(m, "relu", &tessel::relu, "features");
  m.def(
      "gelu",
      [](const DTensor& features, bool approximate) {
        return run([&] { return gelu(features, approximate); });
      },
      py::arg("features"), py::arg("approximate") = true,
      "GELU: the tanh approximation (approximate=True) or the exact erf form (False).");
  bind_unary(m, "sigmoid", &tessel::sigmoid);
  bind_unary(m, "sqrt", &tessel::sqrt);
  bind_unary(m, "rsqrt", &tessel::rsqrt);
  m.def(
      "cast", [](const DTensor& x, DType dtype) { return run([&] { return cast(x, dtype); }); },
      py::arg("x"), py::arg("dtype"));
}

void bind_linalg(py::module_& m) {
  m.def(
      "matmul",
      [](const DTensor& a, const DTensor& b, bool transpose_a, bool transpose_b) {
        return run([&] { return matmul(a, b, transpose_a, transpose_b); });
      },
      py::arg("a"), py::arg("b"), py::arg("transpose_a") = false, py::arg("transpose_b") = false,
      "[..., m, k] x [..., k, n] (transpose_a / transpose_b: the last two axes swapped).");
  m.def(
      "einsum",
      [](const std::string& equation, const DTensor& a, const DTensor& b) {
        return run([&] { return einsum(equation, a, b); });
      },
      py::arg("equation"), py::arg("a"), py::arg("b"),
      "Two-operand einsum, e.g. 'bsh,hf->bsf' (every dimension named, no '...').");
}

void bind_reductions(py::module_& m) {
  using Reduce = DTensor (*)(const DTensor&, const std::vector<int64_t>&, bool);
  const auto bind = [&m](const char* name, Reduce fn) {
    m.def(
        name,
        [fn, name](const DTensor& input_tensor, py::handle axis, bool keepdims) {
          const std::vector<int64_t> axes = to_axes(axis, name);
          return run([&] { return fn(input_tensor, axes, keepdims); });
        },
        py::arg("input_tensor"), py::arg("axis") = py::none(), py::arg("keepdims") = false,
        "axis: None (every axis), an int or a list of ints (negative counts from the end).");
  };
  bind("reduce_sum", &tessel::reduce_sum);
  bind("reduce_mean", &tessel::reduce_mean);
  bind("reduce_max", &tessel::reduce_max);
}

void bind_nn(py::module_& m) {
  bind_unary(m, "softmax", &tessel::softmax, "logits");
  m.def(
      "causal_softmax",
      [](const DTensor& scores, double scale) {
        return run([&] { return causal_softmax(scores, scale); });
      },
      py::arg("scores"), py::arg("scale") = 1.0,
      "softmax(scale * scores) over the last axis with the causal mask implied.");
  m.def(
      "causal_attention",
      [](const DTensor& q, const DTensor& k, const DTensor& v, double scale, double dropout_rate,
         uint64_t seed) {
        return run([&] { return causal_attention(q, k, v, scale, dropout_rate, seed); });
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("scale") = 1.0,
      py::arg("dropout_rate") = 0.0, py::arg("seed") = 0,
      "Causal self-attention in one op: dropout(causal_softmax(q k^T, scale)) v without a "
      "[B, H, T, T] map kept for the backward pass.");
  bind_unary(m, "stop_gradient", &tessel::stop_gradient, "input");
  m.def(
      "layer_norm",
      [](const DTensor& x, const DTensor& weight, std::optional<DTensor> bias, double epsilon) {
        return run([&] { return layer_norm(x, weight, bias.value_or(DTensor()), epsilon); });
      },
      py::arg("x"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("epsilon") = 1e-5,
      "(x - mean) / sqrt(var + epsilon) * weight + bias over the last axis.");
  m.def(
      "rms_norm",
      [](const DTensor& x, const DTensor& weight, double epsilon) {
        return run([&] { return rms_norm(x, weight, epsilon); });
      },
      py::arg("x"), py::arg("weight"), py::arg("epsilon") = 1e-6,
      "x / sqrt(mean(x**2) + epsilon) * weight over the last axis (RMSNorm).");
  m.def(
      "rotary_embedding",
      [](const DTensor& x, double theta) {
        return run([&] { return rotary_embedding(x, theta); });
      },
      py::arg("x"), py::arg("theta") = 10000.0,
      "x [..., positions, heads, head_dim]: each head's pairs (j, j + head_dim/2) at position t "
      "rotated by t * theta**(-2j/head_dim) (RoPE, 'rotate_half').");
  m.def(
      "argmax",
      [](const DTensor& input, int64_t axis) { return run([&] { return argmax(input, axis); }); },
      py::arg("input"), py::arg("axis") = -1, "i64 index of the largest value along axis.");
  m.def(
      "sample_categorical",
      [](const DTensor& logits, uint64_t seed, double temperature, int64_t top_k) {
        return run([&] { return sample_categorical(logits, seed, temperature, top_k); });
      },
      py::arg("logits"), py::arg("seed"), py::arg("temperature") = 1.0, py::arg("top_k") = 0,
      "One class per row from softmax(logits / temperature) over the top_k largest (0: all).");
  m.def(
      "dropout",
      [](const DTensor& x, double rate, uint64_t seed) {
        return run([&] { return dropout(x, rate, seed); });
      },
      py::arg("x"), py::arg("rate"), py::arg("seed"),
      "x / (1 - rate) where kept, 0 where dropped; the mask is keyed by (seed, global index).");
  bind_unary(m, "log_softmax", &tessel::log_softmax, "logits");
  m.def(
      "sparse_softmax_cross_entropy_with_logits",
      [](const DTensor& labels, const DTensor& logits) {
        return run([&] { return sparse_softmax_cross_entropy_with_logits(labels, logits); });
      },
      py::arg("labels"), py::arg("logits"),
      "Per-example -log softmax(logits)[label]: labels [..] of i32/i64, logits [.., classes].");
}

void bind_shape_ops(py::module_& m) {
  m.def(
      "reshape",
      [](const DTensor& tensor, const Shape& shape) {
        return run([&] { return reshape(tensor, shape); });
      },
      py::arg("tensor"), py::arg("shape"));
  m.def(
      "transpose",
      [](const DTensor& a, std::optional<std::vector<int64_t>> perm) {
        return run([&] { return perm ? transpose(a, *perm) : transpose(a); });
      },
      py::arg("a"), py::arg("perm") = py::none(),
      "perm None: the axes reversed; an empty perm for a tensor of rank > 0 is an error, as in "
      "numpy.");
  m.def(
      "slice",
      [](const DTensor& input_, const std::vector<int64_t>& begin,
         const std::vector<int64_t>& size) {
        return run([&] { return slice(input_, begin, size); });
      },
      py::arg("input_"), py::arg("begin"), py::arg("size"), "size -1: to the end of the axis.");
  m.def(
      "concat",
      [](const std::vector<DTensor>& values, int64_t axis) {
        return run([&] { return concat(values, axis); });
      },
      py::arg("values"), py::arg("axis"));
  m.def(
      "embedding_lookup",
      [](const DTensor& params, const DTensor& ids) {
        return run([&] { return embedding_lookup(params, ids); });
      },
      py::arg("params"), py::arg("ids"),
      "Rows `ids` (i32/i64) of params ([vocab, dim]); a row-sharded table gives a Partial(sum).");
}

void bind_creation(py::module_& m) {
  m.def(
      "zeros",
      [](const Shape& shape, const Layout& layout, DType dtype, Runtime* runtime) {
        return run([&] { return zeros(shape, layout, dtype, runtime); });
      },
      py::arg("shape"), py::arg("layout"), py::arg("dtype") = DType::kF32,
      py::arg("runtime") = nullptr, "A DTensor of zeros with `layout` (runtime None: global).");
  m.def(
      "zeros",
      [](const Shape& shape, DType dtype) -> py::object {
        if (!get_default_mesh()) return py::cast(Tensor::zeros(shape, dtype));
        return run([&] { return zeros(shape, dtype); });
      },
      py::arg("shape"), py::arg("dtype") = DType::kF32,
      "Without a layout: replicated on the default mesh inside `with default_mesh(mesh):`, "
      "else the host form tessel.Tensor.zeros.");
  m.def(
      "ones",
      [](const Shape& shape, const Layout& layout, DType dtype, Runtime* runtime) {
        return run([&] { return ones(shape, layout, dtype, runtime); });
      },
      py::arg("shape"), py::arg("layout"), py::arg("dtype") = DType::kF32,
      py::arg("runtime") = nullptr);
  m.def(
      "ones",
      [](const Shape& shape, DType dtype) { return run([&] { return ones(shape, dtype); }); },
      py::arg("shape"), py::arg("dtype") = DType::kF32,
      "Replicated on the default mesh (inside `with default_mesh(mesh):`).");
  m.def(
      "fill",
      [](const Shape& dims, double value, const Layout& layout, DType dtype, Runtime* runtime) {
        return run([&] { return fill(dims, value, layout, dtype, runtime); });
      },
      py::arg("dims"), py::arg("value"), py::arg("layout"), py::arg("dtype") = DType::kF32,
      py::arg("runtime") = nullptr);
  m.def(
      "fill",
      [](const Shape& dims, double value, DType dtype) {
        return run([&] { return fill(dims, value, dtype); });
      },
      py::arg("dims"), py::arg("value"), py::arg("dtype") = DType::kF32,
      "Replicated on the default mesh (inside `with default_mesh(mesh):`).");
  m.def(
      "random_uniform",
      [](const Shape& shape, const Layout& layout, uint64_t seed, double minval, double maxval,
         DType dtype, Runtime* runtime) {
        return run(
            [&] { return random_uniform(shape, layout, seed, minval, maxval, dtype, runtime); });
      },
      py::arg("shape"), py::arg("layout"), py::arg("seed"), py::arg("minval") = 0.0,
      py::arg("maxval") = 1.0, py::arg("dtype") = DType::kF32, py::arg("runtime") = nullptr,
      "Uniform in [minval, maxval), keyed by global element index (the same values for every "
      "layout).");
  m.def(
      "random_uniform",
      [](const Shape& shape, DType dtype, uint64_t seed, double low, double high) -> py::object {
        if (!get_default_mesh())
          return py::cast(Tensor::random_uniform(shape, dtype, seed, low, high));
        return run([&] { return random_uniform(shape, seed, low, high, dtype); });
      },
      py::arg("shape"), py::arg("dtype") = DType::kF32, py::arg("seed") = 0, py::arg("low") = 0.0,
      py::arg("high") = 1.0,
      "Without a layout: replicated on the default mesh inside `with default_mesh(mesh):`, "
      "else the host form tessel.Tensor.random_uniform.");
  m.def(
      "random_normal",
      [](const Shape& shape, const Layout& layout, uint64_t seed, double mean, double stddev,
         DType dtype, Runtime* runtime) {
        return run(
            [&] { return random_normal(shape, layout, seed, mean, stddev, dtype, runtime); });
      },
      py::arg("shape"), py::arg("layout"), py::arg("seed"), py::arg("mean") = 0.0,
      py::arg("stddev") = 1.0, py::arg("dtype") = DType::kF32, py::arg("runtime") = nullptr,
      "Normal(mean, stddev), keyed by global element index.");
  m.def(
      "random_normal",
      [](const Shape& shape, DType dtype, uint64_t seed, double mean, double stddev) -> py::object {
        if (!get_default_mesh())
          return py::cast(Tensor::random_normal(shape, dtype, seed, mean, stddev));
        return run([&] { return random_normal(shape, seed, mean, stddev, dtype); });
      },
      py::arg("shape"), py::arg("dtype") = DType::kF32, py::arg("seed") = 0, py::arg("mean") = 0.0,
      py::arg("stddev") = 1.0,
      "Without a layout: replicated on the default mesh inside `with default_mesh(mesh):`, "
      "else the host form tessel.Tensor.random_normal.");
  bind_unary(m, "zeros_like", &tessel::zeros_like, "input");
  bind_unary(m, "ones_like", &tessel::ones_like, "input");
}

// ---- operators on DTensor -----------------------------------------------------------------

void bind_operators(py::module_& m) {
  // DTensor is bound by bind_dtensor.cpp (registered first in module.cpp).
  auto cls = py::reinterpret_borrow<py::class_<DTensor>>(m.attr("DTensor"));
  const auto op = py::is_operator();
  cls.def(
         "__add__",
         [](const DTensor& x, const DTensor& y) { return run([&] { return add(x, y); }); }, op)
      .def(
          "__add__", [](const DTensor& x, double y) { return run([&] { return add(x, y); }); }, op)
      .def(
          "__radd__", [](const DTensor& x, double y) { return run([&] { return add(x, y); }); }, op)
      .def(
          "__sub__",
          [](const DTensor& x, const DTensor& y) { return run([&] { return subtract(x, y); }); },
          op)
      .def(
          "__sub__",
          [](const DTensor& x, double y) {
            return run([&] { return subtract(x, scalar_like(y, x)); });
          },
          op)
      .def(
          "__rsub__",
          [](const DTensor& x, double y) {
            return run([&] { return subtract(scalar_like(y, x), x); });
          },
          op)
      .def(
          "__mul__",
          [](const DTensor& x, const DTensor& y) { return run([&] { return multiply(x, y); }); },
          op)
      .def(
          "__mul__", [](const DTensor& x, double y) { return run([&] { return multiply(x, y); }); },
          op)
      .def(
          "__rmul__",
          [](const DTensor& x, double y) { return run([&] { return multiply(x, y); }); }, op)
      .def(
          "__truediv__",
          [](const DTensor& x, const DTensor& y) { return run([&] { return divide(x, y); }); }, op)
      .def(
          "__truediv__",
          [](const DTensor& x, double y) {
            return run([&] { return divide(x, scalar_like(y, x)); });
          },
          op)
      .def(
          "__rtruediv__",
          [](const DTensor& x, double y) {
            return run([&] { return divide(scalar_like(y, x), x); });
          },
          op)
      .def(
          "__matmul__",
          [](const DTensor& a, const DTensor& b) { return run([&] { return matmul(a, b); }); }, op)
      .def("__neg__", [](const DTensor& x) { return run([&] { return negative(x); }); });
  // numpy defers to DTensor's reflected operators (np.float32(2) * x is x.__rmul__).
  cls.attr("__array_ufunc__") = py::none();
}

// ---- more elementwise ops and operators (issue 34) ----------------------------------------
// square, abs, sin, cos, silu, pow, the comparisons (less, ..., not_equal: bool results) and
// where (x or y may be a Python scalar), under numpy's names; and the DTensor operators ** < <=
// > >= == != abs() (a Python scalar on either side becomes scalar_like's rank-0 DTensor;
// pow(x, 2.0) and x ** 2.0 use the host-scalar pow), truth value (one element only, as numpy),
// and indexing with ints and slices of step 1 (x[1:3, :, -2:] is slice; an int index drops its
// dim by reshape).

// Checks that an integer `dtype` holds a Python scalar exactly before scalar_like makes it an
// operand of the comparisons or where: 2.5 against an i64 tensor is refused, not truncated.
// With the GIL held (the message formats the value with Python's str).
void require_exact_scalar(double value, DType dtype, const char* op) {
  if (is_floating(dtype)) return;
  const double widest = dtype == DType::kI32 ? 2147483647.0 : 9223372036854775807.0;
  if (value != std::trunc(value) || std::abs(value) > widest) {
    throw Error(ErrorCode::kInvalidArgument, op,
                "the scalar " + std::string(py::str(py::float_(value))) + " is not a value of " +
                    "the " + std::string(dtype_name(dtype)) +
                    " operand (cast the operand to a float dtype first)");
  }
}

// numpy's basic indexing of `x` as slice's begin and size, and the shape after int indices.
struct Indexing {
  std::vector<int64_t> begin, size;
  std::vector<int64_t> shape;  // without the int-indexed dims
  bool drops = false;          // some int index: reshape to `shape`
};

Indexing to_indexing(const DTensor& x, py::handle key) {
  constexpr const char* kOp = "DTensor indexing";
  py::tuple items =
      py::isinstance<py::tuple>(key) ? py::reinterpret_borrow<py::tuple>(key) : py::make_tuple(key);
  int ellipses = 0, consumed = 0;
  for (py::handle item : items) {
    if (item.is(py::ellipsis())) {
      ++ellipses;
    } else {
      ++consumed;
    }
  }
  if (ellipses > 1) throw Error(ErrorCode::kInvalidArgument, kOp, "more than one '...'");
  if (consumed > x.rank()) {
    throw Error(
        ErrorCode::kOutOfRange, kOp,
        "too many indices: " + std::to_string(consumed) + " for shape " + x.shape().to_string());
  }
  Indexing out;
  int dim = 0;
  const auto keep_whole = [&](int count) {
    for (int i = 0; i < count; ++i, ++dim) {
      out.begin.push_back(0);
      out.size.push_back(x.shape()[dim]);
      out.shape.push_back(x.shape()[dim]);
    }
  };
  for (py::handle item : items) {
    if (item.is(py::ellipsis())) {
      keep_whole(x.rank() - consumed);
      continue;
    }
    const int64_t extent = x.shape()[dim];
    if (py::isinstance<py::slice>(item)) {
      size_t start = 0, stop = 0, step = 0, length = 0;
      if (!py::reinterpret_borrow<py::slice>(item).compute(static_cast<size_t>(extent), &start,
                                                           &stop, &step, &length)) {
        throw py::error_already_set();
      }
      if (static_cast<py::ssize_t>(step) != 1) {
        throw Error(ErrorCode::kInvalidArgument, kOp,
                    "step " + std::to_string(static_cast<py::ssize_t>(step)) + " in dim " +
                        std::to_string(dim) + " (only steps of 1 are supported)");
      }
      out.begin.push_back(static_cast<int64_t>(start));
      out.size.push_back(static_cast<int64_t>(length));
      out.shape.push_back(static_cast<int64_t>(length));
    } else if (py::isinstance<py::int_>(item) || py::hasattr(item, "__index__")) {
      int64_t i = py::reinterpret_borrow<py::object>(item).attr("__index__")().cast<int64_t>();
      if (i < -extent || i >= extent) {
        throw Error(ErrorCode::kOutOfRange, kOp,
                    "index " + std::to_string(i) + " is out of range for dim " +
                        std::to_string(dim) + " of extent " + std::to_string(extent));
      }
      out.begin.push_back(i < 0 ? i + extent : i);
      out.size.push_back(1);
      out.drops = true;
    } else {
      throw py::type_error(std::string(kOp) + ": indices must be ints, slices or '...', got " +
                           std::string(py::str(py::type::of(item).attr("__name__"))));
    }
    ++dim;
  }
  keep_whole(x.rank() - dim);
  return out;
}

void bind_more_elementwise(py::module_& m) {
  bind_unary(m, "square", &tessel::square);
  bind_unary(m, "abs", &tessel::abs);
  bind_unary(m, "sin", &tessel::sin);
  bind_unary(m, "cos", &tessel::cos);
  bind_unary(m, "silu", &tessel::silu, "features");
  bind_binary(m, "pow", static_cast<Binary>(&tessel::pow));
  m.def(
      "pow", [](const DTensor& x, double y) { return run([&] { return tessel::pow(x, y); }); },
      py::arg("x"), py::arg("y"), "x ** a host scalar.");
  const std::pair<const char*, Binary> comparisons[] = {
      {"less", &tessel::less},       {"less_equal", &tessel::less_equal},
      {"greater", &tessel::greater}, {"greater_equal", &tessel::greater_equal},
      {"equal", &tessel::equal},     {"not_equal", &tessel::not_equal}};
  for (const auto& [name, fn] : comparisons) bind_binary(m, name, fn);
  m.def(
      "where",
      [](const DTensor& condition, const DTensor& x, const DTensor& y) {
        return run([&] { return where(condition, x, y); });
      },
      py::arg("condition"), py::arg("x"), py::arg("y"),
      "x where condition (bool) is true, else y; the three broadcast together.");
  m.def(
      "where",
      [](const DTensor& condition, const DTensor& x, double y) {
        require_exact_scalar(y, x.dtype(), "where");
        return run([&] { return where(condition, x, scalar_like(y, x)); });
      },
      py::arg("condition"), py::arg("x"), py::arg("y"));
  m.def(
      "where",
      [](const DTensor& condition, double x, const DTensor& y) {
        require_exact_scalar(x, y.dtype(), "where");
        return run([&] { return where(condition, scalar_like(x, y), y); });
      },
      py::arg("condition"), py::arg("x"), py::arg("y"));

  auto cls = py::reinterpret_borrow<py::class_<DTensor>>(m.attr("DTensor"));
  const auto op = py::is_operator();
  // A comparison operator with a DTensor or a Python scalar on the right (Python turns a scalar
  // on the left, 2 < x, into x > 2).
  const auto bind_pair = [&](const char* name, Binary fn, const char* op_name) {
    cls.def(
           name, [fn](const DTensor& x, const DTensor& y) { return run([&] { return fn(x, y); }); },
           op)
        .def(
            name,
            [fn, op_name](const DTensor& x, double y) {
              require_exact_scalar(y, x.dtype(), op_name);
              return run([&] { return fn(x, scalar_like(y, x)); });
            },
            op);
  };
  bind_pair("__lt__", &tessel::less, "less");
  bind_pair("__le__", &tessel::less_equal, "less_equal");
  bind_pair("__gt__", &tessel::greater, "greater");
  bind_pair("__ge__", &tessel::greater_equal, "greater_equal");
  bind_pair("__eq__", &tessel::equal, "equal");
  bind_pair("__ne__", &tessel::not_equal, "not_equal");
  // Elementwise == leaves DTensor hashable by identity, as a torch.Tensor (a dict key, a set).
  cls.attr("__hash__") = py::module_::import("builtins").attr("object").attr("__hash__");
  cls.def(
         "__pow__",
         [](const DTensor& x, const DTensor& y) { return run([&] { return tessel::pow(x, y); }); },
         op)
      .def(
          "__pow__",
          [](const DTensor& x, double y) { return run([&] { return tessel::pow(x, y); }); }, op)
      .def(
          "__rpow__",
          [](const DTensor& x, double y) {
            return run([&] { return tessel::pow(scalar_like(y, x), x); });
          },
          op)
      .def("__abs__", [](const DTensor& x) { return run([&] { return tessel::abs(x); }); })
      .def("__bool__",
           [](const DTensor& x) {
             if (x.shape().num_elements() != 1) {
               throw Error(ErrorCode::kInvalidArgument, "DTensor",
                           "the truth value of a DTensor of shape " + x.shape().to_string() +
                               " is ambiguous (one element only)");
             }
             py::gil_scoped_release release;
             return to_host(x).to_doubles()[0] != 0.0;
           })
      .def("__getitem__", [](const DTensor& x, py::handle key) {
        const Indexing index = to_indexing(x, key);
        return run([&] {
          const DTensor part = slice(x, index.begin, index.size);
          return index.drops ? reshape(part, Shape(index.shape)) : part;
        });
      });
}

// ---- indexing and structural ops (issue 34) -----------------------------------------------
// gather, take_along_axis, scatter_add, pad, cumsum, one_hot and top_k with TF's keywords
// (numpy's for take_along_axis); top_k returns the namedtuple TopK(values, indices), as TF's.

void bind_indexing_ops(py::module_& m) {
  m.def(
      "gather",
      [](const DTensor& params, const DTensor& indices, int64_t axis) {
        return run([&] { return gather(params, indices, axis); });
      },
      py::arg("params"), py::arg("indices"), py::arg("axis") = 0,
      "Slices of params at indices (i32/i64, negative from the end) along axis (tf.gather, "
      "numpy.take): params.shape[:axis] + indices.shape + params.shape[axis+1:].");
  m.def(
      "take_along_axis",
      [](const DTensor& arr, const DTensor& indices, int64_t axis) {
        return run([&] { return take_along_axis(arr, indices, axis); });
      },
      py::arg("arr"), py::arg("indices"), py::arg("axis"),
      "numpy.take_along_axis: indices has arr's shape except along axis (no broadcasting).");
  m.def(
      "scatter_add",
      [](const DTensor& base, const DTensor& indices, const DTensor& updates, int64_t axis) {
        return run([&] { return scatter_add(base, indices, updates, axis); });
      },
      py::arg("base"), py::arg("indices"), py::arg("updates"), py::arg("axis") = 0,
      "base with updates (gather(base, indices, axis)'s shape) added at indices along axis; "
      "repeated indices add up (numpy.add.at).");
  m.def(
      "pad",
      [](const DTensor& tensor, const std::vector<std::pair<int64_t, int64_t>>& paddings,
         double constant_values) {
        return run([&] { return pad(tensor, paddings, constant_values); });
      },
      py::arg("tensor"), py::arg("paddings"), py::arg("constant_values") = 0.0,
      "tensor with constant_values around it: paddings, one (before, after) pair per dim "
      "(tf.pad, numpy.pad's pad_width).");
  m.def(
      "cumsum",
      [](const DTensor& x, int64_t axis, bool exclusive, bool reverse) {
        return run([&] { return cumsum(x, axis, exclusive, reverse); });
      },
      py::arg("x"), py::arg("axis") = 0, py::arg("exclusive") = false, py::arg("reverse") = false,
      "Running sum along axis (tf.math.cumsum).");
  m.def(
      "one_hot",
      [](const DTensor& indices, int64_t depth, double on_value, double off_value, int64_t axis,
         DType dtype) {
        return run([&] { return one_hot(indices, depth, on_value, off_value, axis, dtype); });
      },
      py::arg("indices"), py::arg("depth"), py::arg("on_value") = 1.0, py::arg("off_value") = 0.0,
      py::arg("axis") = -1, py::arg("dtype") = DType::kF32,
      "tf.one_hot: a new axis of depth classes; an index outside [0, depth) gives off_value.");
  py::object top_k_type = py::module_::import("collections")
                              .attr("namedtuple")("TopK", py::make_tuple("values", "indices"),
                                                  py::arg("module") = "tessel");
  m.attr("TopK") = top_k_type;
  m.def(
      "top_k",
      [top_k_type](const DTensor& input, int64_t k, bool /*sorted*/) {
        TopK result;
        {
          py::gil_scoped_release release;
          result = top_k(input, k);
        }
        return top_k_type(wrap_dtensor(std::move(result.values)),
                          wrap_dtensor(std::move(result.indices)));
      },
      py::arg("input"), py::arg("k") = 1, py::arg("sorted") = true,
      "tf.math.top_k: TopK(values, indices) of the k largest along the last axis, largest "
      "first (always sorted), i64 indices.");
}

// ---- convolution and pooling (TF's tf.nn.conv2d, max_pool2d, avg_pool2d) -------------------

// TF's strides / ksize / dilations: an int (both spatial dims) or a list of 1, 2 or 4 ints (C++
// checks the count and values); None: empty (dilations' default).
std::vector<int64_t> to_window_ints(py::handle value, const char* op, const char* what) {
  if (value.is_none()) return {};
  if (py::isinstance<py::int_>(value) || py::hasattr(value, "__index__")) {
    return {value.cast<int64_t>()};
  }
  if (!py::detail::is_plain_sequence(value)) {
    throw py::type_error(std::string(op) + ": " + what + " must be an int or a list of ints");
  }
  return value.cast<std::vector<int64_t>>();
}

// TF's padding: "SAME", "VALID", or explicit pads as (before, after) pairs per NHWC dim,
// [[0, 0], [top, bottom], [left, right], [0, 0]] -> ("EXPLICIT", the 8 ints flattened).
struct WindowPadding {
  std::string padding;
  std::vector<int64_t> explicit_paddings;
};

WindowPadding to_padding(py::handle value, const char* op) {
  if (py::isinstance<py::str>(value)) return {value.cast<std::string>(), {}};
  if (!py::detail::is_plain_sequence(value)) {
    throw py::type_error(std::string(op) +
                         ": padding must be \"SAME\", \"VALID\" or a list of (before, after) "
                         "pairs per NHWC dimension");
  }
  WindowPadding out{"EXPLICIT", {}};
  for (py::handle pair : py::reinterpret_borrow<py::sequence>(value)) {
    if (!py::detail::is_plain_sequence(pair) || py::len(pair) != 2) {
      throw Error(
          ErrorCode::kInvalidArgument, op,
          "explicit padding must be (before, after) pairs, got " + std::string(py::repr(value)));
    }
    for (py::handle pad : py::reinterpret_borrow<py::sequence>(pair)) {
      out.explicit_paddings.push_back(pad.cast<int64_t>());
    }
  }
  return out;
}

void require_nhwc(const std::string& data_format, const char* op) {
  if (data_format != "NHWC") {
    throw Error(ErrorCode::kUnimplemented, op,
                "data_format \"" + data_format + "\" is not supported (NHWC only)");
  }
}

void bind_conv(py::module_& m) {
  m.def(
      "conv2d",
      [](const DTensor& input, const DTensor& filters, py::handle strides, py::handle padding,
         const std::string& data_format, py::handle dilations) {
        require_nhwc(data_format, "conv2d");
        const std::vector<int64_t> s = to_window_ints(strides, "conv2d", "strides");
        const std::vector<int64_t> d = to_window_ints(dilations, "conv2d", "dilations");
        const WindowPadding p = to_padding(padding, "conv2d");
        return run([&] { return conv2d(input, filters, s, p.padding, d, p.explicit_paddings); });
      },
      py::arg("input"), py::arg("filters"), py::arg("strides"), py::arg("padding"),
      py::arg("data_format") = "NHWC", py::arg("dilations") = py::none(),
      "2-D convolution of NHWC images with HWIO filters (tf.nn.conv2d): strides / dilations an "
      "int or 1, 2 or 4 ints; padding \"SAME\", \"VALID\" or [[0, 0], [top, bottom], [left, "
      "right], [0, 0]].");
  using Pool = DTensor (*)(const DTensor&, const std::vector<int64_t>&, const std::vector<int64_t>&,
                           const std::string&, const std::vector<int64_t>&);
  const auto bind_pool = [&m](const char* name, Pool fn, const char* doc) {
    m.def(
        name,
        [fn, name](const DTensor& input, py::handle ksize, py::handle strides, py::handle padding,
                   const std::string& data_format) {
          require_nhwc(data_format, name);
          const std::vector<int64_t> k = to_window_ints(ksize, name, "ksize");
          const std::vector<int64_t> s = to_window_ints(strides, name, "strides");
          const WindowPadding p = to_padding(padding, name);
          return run([&] { return fn(input, k, s, p.padding, p.explicit_paddings); });
        },
        py::arg("input"), py::arg("ksize"), py::arg("strides"), py::arg("padding"),
        py::arg("data_format") = "NHWC", doc);
  };
  bind_pool("max_pool2d", &tessel::max_pool2d,
            "The largest value of each ksize window per channel of NHWC images "
            "(tf.nn.max_pool2d); ksize / strides an int or 1, 2 or 4 ints.");
  bind_pool("avg_pool2d", &tessel::avg_pool2d,
            "The mean of each ksize window per channel of NHWC images over its cells inside the "
            "input (tf.nn.avg_pool2d); ksize / strides an int or 1, 2 or 4 ints.");
}

// ---- op_registry.h ------------------------------------------------------------------------

// OpAttrs from call_op's / plan_op's keyword arguments (each names an OpAttrs field).
OpAttrs to_attrs(const py::kwargs& kwargs) {
  py::object attrs = py::type::of<OpAttrs>()();
  for (auto [key, value] : kwargs) {
    const std::string name = py::str(key);
    if (name.rfind("__", 0) == 0 || !py::hasattr(attrs, key)) {
      throw py::type_error("unknown op attribute '" + name + "' (an OpAttrs field)");
    }
    py::setattr(attrs, key, value);
  }
  return attrs.cast<OpAttrs>();
}

void bind_registry(py::module_& m) {
  py::class_<OpAttrs> attrs(m, "OpAttrs", R"doc(
What an op call carries besides its inputs: one field per attribute, with op_registry.h's names
(axes, perm, axis, ..., seed, layout, runtime), each read by the ops op_registry.h names for it.
The optional ones are None until set. call_op / plan_op take them as keywords.)doc");
  attrs.def(py::init<>());
  // Every field, from OpAttrs' own list; the runtime keeps the Python object set there alive.
  OpAttrs::for_each_field([&](const char* name, auto member) {
    if constexpr (std::is_same_v<decltype(member), Runtime * OpAttrs::*>) {
      attrs.def_property(
          name, [member](const OpAttrs& a) { return a.*member; },
          // keep_alive works only as an attribute of the setter's own cpp_function.
          py::cpp_function([member](OpAttrs& a, Runtime* runtime) { a.*member = runtime; },
                           py::keep_alive<1, 2>()),
          py::return_value_policy::reference);
    } else {
      attrs.def_readwrite(name, member);
    }
  });
  attrs.def(py::self == py::self);  // field by field (0.0 == -0.0; NaN equals nothing)

  py::class_<TensorSpec>(m, "TensorSpec", R"doc(
An input or output of an op call as the sharding rules see it: shape, dtype and layout, no
data. TensorSpec(dtensor) takes a DTensor's; plan_op converts DTensors itself.)doc")
      .def(py::init([](Shape shape, DType dtype, Layout layout) {
             return TensorSpec{std::move(shape), dtype, std::move(layout)};
           }),
           py::arg("shape"), py::arg("dtype"), py::arg("layout"))
      .def(py::init([](const DTensor& t) {
             return TensorSpec{t.shape(), t.dtype(), t.layout()};
           }),
           py::arg("tensor"))
      .def_readwrite("shape", &TensorSpec::shape)
      .def_readwrite("dtype", &TensorSpec::dtype)
      .def_readwrite("layout", &TensorSpec::layout)
      .def("__repr__", [](const TensorSpec& s) {
        return "TensorSpec(shape=" + s.shape.to_string() +
               ", dtype=" + std::string(dtype_name(s.dtype)) + ", layout=" + s.layout.to_string() +
               ")";
      });
  implicitly_convertible_per_thread<DTensor, TensorSpec>();

  py::class_<ShardingDecision>(m, "ShardingDecision", R"doc(
What plan_op decides: `inputs`, the layouts the inputs must have (an input whose layout
differs is relaid out first: that is where collectives happen), and `output`, the output's
layout (may be Partial: reduced later, by the consumer that needs it).)doc")
      .def_readonly("inputs", &ShardingDecision::inputs)
      .def_readonly("output", &ShardingDecision::output)
      .def("__repr__", [](const ShardingDecision& d) {
        std::string text = "ShardingDecision(inputs=[";
        for (size_t i = 0; i < d.inputs.size(); ++i) {
          text += (i > 0 ? ", " : "") + d.inputs[i].to_string();
        }
        return text + "], output=" + d.output.to_string() + ")";
      });

  py::class_<OpRegistry>(m, "OpRegistry", "The registry of SPMD ops (read-only from Python).")
      .def_static("global_", &OpRegistry::global, py::return_value_policy::reference)
      .def("names", &OpRegistry::names)
      .def("contains", &OpRegistry::contains, py::arg("name"))
      .def("__contains__", &OpRegistry::contains, py::arg("name"));

  m.def(
      "op_names", [] { return OpRegistry::global().names(); }, "Every registered op's name.");
  m.def("has_gpu_kernel", &has_gpu_kernel, py::arg("op"),
        "Whether the op has a GPU kernel (else its GPU blocks run host-staged).");
  m.def("host_staged_kernel_calls", &host_staged_kernel_calls,
        "{op: blocks run host-staged on GPU devices} (ops without a GPU kernel), this process.");
  m.def(
      "call_op",
      [](const std::string& name, const std::vector<DTensor>& inputs, const py::kwargs& kwargs) {
        const OpAttrs attrs = to_attrs(kwargs);
        return run([&] { return call_op(name, inputs, attrs); });
      },
      py::arg("name"), py::arg("inputs"),
      "Runs op `name` on `inputs`; keywords set OpAttrs fields (e.g. axes=[1], keepdims=True).");
  m.def(
      "plan_op",
      [](const std::string& name, const std::vector<TensorSpec>& inputs, const py::kwargs& kwargs) {
        const OpAttrs attrs = to_attrs(kwargs);
        return plan_op(name, inputs, attrs);
      },
      py::arg("name"), py::arg("inputs"),
      "The layouts call_op would relayout the inputs to and the output layout, running "
      "nothing. inputs: TensorSpecs or DTensors; keywords set OpAttrs fields.");
  m.def("set_replicate_fallback", &set_replicate_fallback, py::arg("enabled"),
        "Opt-in: ops without a sharding rule for their input layouts replicate their inputs.");
  m.def("replicate_fallback", &replicate_fallback);
}

}  // namespace

void bind_ops(py::module_& m) {
  bind_elementwise(m);
  bind_linalg(m);
  bind_reductions(m);
  bind_nn(m);
  bind_shape_ops(m);
  bind_creation(m);
  bind_operators(m);
  bind_more_elementwise(m);
  bind_indexing_ops(m);
  bind_conv(m);
  bind_registry(m);
  // Last, once every overload is defined: the direct entry points of the binary ops.
  const std::pair<const char*, Binary> binary_ops[] = {
      {"add", &tessel::add},       {"subtract", &tessel::subtract}, {"multiply", &tessel::multiply},
      {"divide", &tessel::divide}, {"maximum", &tessel::maximum},   {"minimum", &tessel::minimum}};
  for (const auto& [name, op] : binary_ops) use_fast_binary_call(m, name, op);
}

}  // namespace tessel::python
