// The elementwise op family, binary half: add, subtract, multiply, divide, maximum, minimum with
// numpy broadcasting, and the internal binary ops their and the unary ops' gradients use
// (relu_grad, gelu_grad, gelu_erf_grad, tanh_grad: grad * f'(x); mask_greater, mask_greater_equal: 1 where
// a > b / a >= b, else 0). The unary ops, the host-scalar forms and cast are in ops_unary.cpp.
//
// Sharding rule (binary_rule), for output dimension d and each input k:
//  - d is a broadcast dim of k when k lacks it or has extent 1 where the output does not; such a
//    dim must be unsharded in k (demanded).
//  - The output spec of d is the larger input's spec where that input does not broadcast d;
//    where the larger input leaves d unsharded, the smaller input's spec (if its mesh dims are
//    still free). Both inputs are demanded in the output's specs on their non-broadcast dims, so
//    equal global extents give equal chunked blocks (uneven shards included).
//  - Partial, by op: add/subtract keep the inputs' linear Partial dims (sum or mean, one op) and
//    demand BOTH inputs Partial over them (a non-Partial one becomes Partial by a local step that
//    keeps its value on one device per group: it is added once). multiply keeps the larger
//    input's linear Partial (the other input is reduced: product of a sum and a factor); divide
//    and the *_grad ops keep only the first input's; maximum, minimum and the masks keep none.
//    A Partial mesh dim that the output shards over is reduced (the planner may reduce-scatter).
// Kernels: one tight loop per (dtype, op) for equal blocks and scalar blocks, else a strided
// loop over coalesced dims; empty blocks return at once.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "dtensor/ops/op_families.h"
#include "dtensor/framework/op_util.h"
#include "tessel/dtensor/ops.h"

namespace tessel {
namespace detail {

void register_unary_ops(OpRegistry& registry);  // ops_unary.cpp

namespace {

using VjpFn = std::function<std::vector<DTensor>(const VjpArgs&)>;

bool is_linear(ReduceOp op) { return op == ReduceOp::kSum || op == ReduceOp::kMean; }

TensorSpec infer_binary(std::string_view op, const std::vector<TensorSpec>& in) {
  if (in[0].dtype != in[1].dtype) {
    throw_invalid(op, "inputs have different dtypes {} and {} (shapes {} and {})",
                  dtype_name(in[0].dtype), dtype_name(in[1].dtype), in[0].shape.to_string(),
                  in[1].shape.to_string());
  }
  require_float(in[0].dtype, op, "dtype");
  TensorSpec out;
  out.dtype = in[0].dtype;
  out.shape = in[0].shape == in[1].shape ? in[0].shape
                                         : broadcast_shapes(in[0].shape, in[1].shape, op);
  return out;
}

// Which inputs may stay Partial (see the file comment).
enum class PartialRule { kNone, kBoth, kLarger, kFirst };

bool uses_any(const std::vector<std::string>& used, const std::vector<std::string>& dims) {
  for (const std::string& d : dims) {
    if (std::find(used.begin(), used.end(), d) != used.end()) return true;
  }
  return false;
}

// The first linear Partial op of a layout, if any.
const PartialDim* first_linear(const Layout& layout) {
  for (const PartialDim& p : layout.partial()) {
    if (is_linear(p.op)) return &p;
  }
  return nullptr;
}

ShardingDecision binary_rule(const std::vector<TensorSpec>& in, const TensorSpec& out,
                             PartialRule rule) {
  const Layout& la = in[0].layout;
  const Layout& lb = in[1].layout;
  // Fast path: equal shapes and layouts, nothing to reduce.
  if (in[0].shape == in[1].shape && la == lb) {
    if (!la.is_partial()) return {{la, lb}, la};
    if (rule == PartialRule::kBoth) {
      bool uniform = true;
      for (const PartialDim& p : la.partial()) uniform = uniform && p.op == la.partial()[0].op;
      if (uniform && is_linear(la.partial()[0].op)) return {{la, lb}, la};
    }
  }
  const int rank = out.shape.rank();
  const int big = in[1].shape.num_elements() > in[0].shape.num_elements() ? 1 : 0;
  const int small = 1 - big;
  const auto index = [&](int k, int d) { return d - (rank - in[k].shape.rank()); };
  const auto broadcasts = [&](int k, int d) {
    const int i = index(k, d);
    return i < 0 || (in[k].shape[i] == 1 && out.shape[d] != 1);
  };
  const auto spec = [&](int k, int d) -> const ShardingSpec& {
    return in[k].layout.sharding_specs()[static_cast<size_t>(index(k, d))];
  };

  std::vector<ShardingSpec> specs(static_cast<size_t>(rank));
  std::vector<std::string> used;
  for (int d = 0; d < rank; ++d) {
    if (broadcasts(big, d) || !spec(big, d).is_sharded()) continue;
    specs[static_cast<size_t>(d)] = spec(big, d);
    for (const std::string& m : spec(big, d).mesh_dims()) used.push_back(m);
  }

  // Partial dims the output keeps, and which inputs must carry them.
  std::vector<PartialDim> kept;
  bool carries[2] = {false, false};
  const auto keep_from = [&](int k, ReduceOp op) {
    for (const PartialDim& p : in[k].layout.partial()) {
      if (p.op != op || std::find(used.begin(), used.end(), p.mesh_dim) != used.end()) continue;
      bool seen = false;
      for (const PartialDim& q : kept) seen = seen || q.mesh_dim == p.mesh_dim;
      if (!seen) kept.push_back(p);
    }
  };
  if (rule == PartialRule::kBoth) {
    const PartialDim* first = first_linear(in[big].layout);
    if (first == nullptr) first = first_linear(in[small].layout);
    if (first != nullptr) {
      const ReduceOp op = first->op;
      keep_from(big, op);
      keep_from(small, op);
      // A dim the other input is Partial over with another op is reduced instead.
      std::erase_if(kept, [&](const PartialDim& p) {
        for (int k = 0; k < 2; ++k) {
          for (const PartialDim& q : in[k].layout.partial()) {
            if (q.mesh_dim == p.mesh_dim && q.op != p.op) return true;
          }
        }
        return false;
      });
      carries[0] = carries[1] = true;
    }
  } else if (rule == PartialRule::kLarger || rule == PartialRule::kFirst) {
    int holder = 0;
    if (rule == PartialRule::kLarger) holder = first_linear(in[big].layout) != nullptr ? big : small;
    if (const PartialDim* first = first_linear(in[holder].layout)) {
      keep_from(holder, first->op);
      carries[holder] = true;
    }
  }
  for (const PartialDim& p : kept) used.push_back(p.mesh_dim);

  for (int d = 0; d < rank; ++d) {
    if (specs[static_cast<size_t>(d)].is_sharded() || broadcasts(small, d)) continue;
    const ShardingSpec& s = spec(small, d);
    if (!s.is_sharded() || uses_any(used, s.mesh_dims())) continue;
    specs[static_cast<size_t>(d)] = s;
    for (const std::string& m : s.mesh_dims()) used.push_back(m);
  }

  const Mesh& mesh = la.mesh();
  ShardingDecision decision;
  for (int k = 0; k < 2; ++k) {
    std::vector<ShardingSpec> mine(static_cast<size_t>(in[k].shape.rank()));
    for (int i = 0; i < in[k].shape.rank(); ++i) {
      const int d = i + (rank - in[k].shape.rank());
      if (!broadcasts(k, d)) mine[static_cast<size_t>(i)] = specs[static_cast<size_t>(d)];
    }
    decision.inputs.push_back(Layout::create(LayoutType::kStatic, std::move(mine), mesh,
                                             carries[k] ? kept : std::vector<PartialDim>{}));
  }
  decision.output = Layout::create(LayoutType::kStatic, std::move(specs), mesh, std::move(kept));
  return decision;
}

// ---- kernels ---------------------------------------------------------------------------------

// out = f(a, b) elementwise, a and b broadcast to out's block (contiguous blocks).
template <typename T, typename F>
void binary_loop(const Tensor& a, const Tensor& b, Tensor& out, F f) {
  const int64_t n = out.num_elements();
  if (n == 0) return;
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* po = out.data<T>();
  const int64_t na = a.num_elements();
  const int64_t nb = b.num_elements();
  if (na == n && nb == n) {
    for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i]);
    return;
  }
  if (na == 1 && nb == n) {
    const T x = pa[0];
    for (int64_t i = 0; i < n; ++i) po[i] = f(x, pb[i]);
    return;
  }
  if (nb == 1 && na == n) {
    const T y = pb[0];
    for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], y);
    return;
  }
  // General broadcast: the outer dims as an odometer, the innermost run as a loop.
  const BroadcastDims loop = broadcast_dims(a, b, out.shape());
  const std::vector<int64_t>& ext = loop.extent;
  const std::vector<int64_t>& sa = loop.a_stride;
  const std::vector<int64_t>& sb = loop.b_stride;
  const size_t dims = ext.size();  // >= 1: n > 1 here
  const int64_t inner = ext[dims - 1];
  const int64_t ia_step = sa[dims - 1];
  const int64_t ib_step = sb[dims - 1];
  std::vector<int64_t> counter(dims, 0);
  int64_t oa = 0, ob = 0;
  for (int64_t o = 0; o < n; o += inner) {
    T* dst = po + o;
    const T* xa = pa + oa;
    const T* xb = pb + ob;
    if (ia_step == 1 && ib_step == 1) {
      for (int64_t i = 0; i < inner; ++i) dst[i] = f(xa[i], xb[i]);
    } else if (ia_step == 0 && ib_step == 1) {
      for (int64_t i = 0; i < inner; ++i) dst[i] = f(xa[0], xb[i]);
    } else if (ia_step == 1 && ib_step == 0) {
      for (int64_t i = 0; i < inner; ++i) dst[i] = f(xa[i], xb[0]);
    } else {
      for (int64_t i = 0; i < inner; ++i) dst[i] = f(xa[i * ia_step], xb[i * ib_step]);
    }
    // Advance the outer dims (odometer).
    for (size_t d = dims - 1; d-- > 0;) {
      oa += sa[d];
      ob += sb[d];
      if (++counter[d] < ext[d]) break;
      oa -= sa[d] * ext[d];
      ob -= sb[d] * ext[d];
      counter[d] = 0;
    }
  }
}

constexpr double kGeluC = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluK = 0.044715;

struct Add {
  template <typename T>
  T operator()(T a, T b) const { return a + b; }
};
struct Subtract {
  template <typename T>
  T operator()(T a, T b) const { return a - b; }
};
struct Multiply {
  template <typename T>
  T operator()(T a, T b) const { return a * b; }
};
struct Divide {
  template <typename T>
  T operator()(T a, T b) const { return a / b; }
};
struct Maximum {  // NaN propagates; ties give a
  template <typename T>
  T operator()(T a, T b) const { return a >= b || a != a ? a : b; }
};
struct Minimum {
  template <typename T>
  T operator()(T a, T b) const { return a <= b || a != a ? a : b; }
};
struct MaskGreater {
  template <typename T>
  T operator()(T a, T b) const { return a > b ? T(1) : T(0); }
};
struct MaskGreaterEqual {
  template <typename T>
  T operator()(T a, T b) const { return a >= b ? T(1) : T(0); }
};
struct ReluGrad {  // (grad, x)
  template <typename T>
  T operator()(T g, T x) const { return x > T(0) ? g : T(0); }
};
struct TanhGrad {  // (grad, y = tanh(x))
  template <typename T>
  T operator()(T g, T y) const { return g * (T(1) - y * y); }
};
struct GeluGrad {  // (grad, x)
  template <typename T>
  T operator()(T g, T x) const {
    const T x2 = x * x;
    const T t = std::tanh(T(kGeluC) * (x + T(kGeluK) * x2 * x));
    const T d = T(0.5) * (T(1) + t) +
                T(0.5) * x * (T(1) - t * t) * T(kGeluC) * (T(1) + T(3 * kGeluK) * x2);
    return g * d;
  }
};

struct GeluErfGrad {  // (grad, x): d x*Phi(x) = Phi(x) + x * phi(x)
  template <typename T>
  T operator()(T g, T x) const {
    const T cdf = T(0.5) * (T(1) + std::erf(x * T(M_SQRT1_2)));
    const T pdf = std::exp(T(-0.5) * x * x) * T(0.3989422804014327);  // 1 / sqrt(2 pi)
    return g * (cdf + x * pdf);
  }
};

// ---- gradients -------------------------------------------------------------------------------

// `g` (the output's shape) summed over the dims `shape` was broadcast along, to `shape`.
DTensor sum_to(const DTensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const int lead = g.rank() - shape.rank();
  std::vector<int64_t> ones;
  for (int i = 0; i < shape.rank(); ++i) {
    if (shape[i] == 1 && g.shape()[lead + i] != 1) ones.push_back(lead + i);
  }
  DTensor out = g;
  if (!ones.empty()) out = reduce_sum(out, ones, /*keepdims=*/true);
  if (lead > 0) {
    std::vector<int64_t> leading(static_cast<size_t>(lead));
    std::iota(leading.begin(), leading.end(), 0);
    out = reduce_sum(out, leading, /*keepdims=*/false);
  }
  return out;
}

std::vector<DTensor> add_vjp(const VjpArgs& v) {
  return {sum_to(v.grad, v.inputs[0].shape()), sum_to(v.grad, v.inputs[1].shape())};
}
std::vector<DTensor> subtract_vjp(const VjpArgs& v) {
  return {sum_to(v.grad, v.inputs[0].shape()), negative(sum_to(v.grad, v.inputs[1].shape()))};
}
std::vector<DTensor> multiply_vjp(const VjpArgs& v) {
  return {sum_to(multiply(v.grad, v.inputs[1]), v.inputs[0].shape()),
          sum_to(multiply(v.grad, v.inputs[0]), v.inputs[1].shape())};
}
std::vector<DTensor> divide_vjp(const VjpArgs& v) {
  // d(a/b)/db = -(a/b)/b.
  return {sum_to(divide(v.grad, v.inputs[1]), v.inputs[0].shape()),
          negative(sum_to(divide(multiply(v.grad, v.output), v.inputs[1]), v.inputs[1].shape()))};
}
// The gradient goes to the input that was picked; ties to the first.
std::vector<DTensor> pick_vjp(const VjpArgs& v, bool max) {
  const DTensor& a = v.inputs[0];
  const DTensor& b = v.inputs[1];
  const DTensor to_a = max ? call_op("mask_greater_equal", {a, b}) : call_op("mask_greater_equal", {b, a});
  const DTensor to_b = max ? call_op("mask_greater", {b, a}) : call_op("mask_greater", {a, b});
  return {sum_to(multiply(v.grad, to_a), a.shape()), sum_to(multiply(v.grad, to_b), b.shape())};
}

template <typename F>
void add_binary(OpRegistry& registry, const char* name, PartialRule rule, VjpFn vjp) {
  OpDef def;
  def.name = name;
  def.num_inputs = 2;
  def.infer = [name](const std::vector<TensorSpec>& in, const OpAttrs&) {
    return infer_binary(name, in);
  };
  def.shard = [rule](const std::vector<TensorSpec>& in, const TensorSpec& out, const OpAttrs&) {
    return binary_rule(in, out, rule);
  };
  def.kernel = [name](const std::vector<Tensor>& in, Tensor& out, const OpAttrs&,
                      const LocalContext&) {
    dispatch_float(out.dtype(), name, [&]<typename T>() { binary_loop<T>(in[0], in[1], out, F{}); });
  };
  def.vjp = std::move(vjp);
  registry.add(std::move(def));
}

}  // namespace

void register_elementwise_ops(OpRegistry& registry) {
  add_binary<Add>(registry, "add", PartialRule::kBoth, add_vjp);
  add_binary<Subtract>(registry, "subtract", PartialRule::kBoth, subtract_vjp);
  add_binary<Multiply>(registry, "multiply", PartialRule::kLarger, multiply_vjp);
  add_binary<Divide>(registry, "divide", PartialRule::kFirst, divide_vjp);
  add_binary<Maximum>(registry, "maximum", PartialRule::kNone,
                      [](const VjpArgs& v) { return pick_vjp(v, true); });
  add_binary<Minimum>(registry, "minimum", PartialRule::kNone,
                      [](const VjpArgs& v) { return pick_vjp(v, false); });
  // Piecewise constant: zero gradients.
  const VjpFn none = [](const VjpArgs&) { return std::vector<DTensor>{DTensor(), DTensor()}; };
  add_binary<MaskGreater>(registry, "mask_greater", PartialRule::kNone, none);
  add_binary<MaskGreaterEqual>(registry, "mask_greater_equal", PartialRule::kNone, none);
  // Linear in the gradient (input 0), which may stay Partial.
  add_binary<ReluGrad>(registry, "relu_grad", PartialRule::kFirst, [](const VjpArgs& v) {
    return std::vector<DTensor>{call_op("relu_grad", {v.grad, v.inputs[1]}), DTensor()};
  });
  add_binary<TanhGrad>(registry, "tanh_grad", PartialRule::kFirst, [](const VjpArgs& v) {
    // d/dg = 1 - y^2; d/dy = -2 g y.
    return std::vector<DTensor>{
        call_op("tanh_grad", {v.grad, v.inputs[1]}),
        multiply(multiply(v.grad, v.inputs[0]), multiply(v.inputs[1], -2.0))};
  });
  add_binary<GeluGrad>(registry, "gelu_grad", PartialRule::kFirst, nullptr);
  add_binary<GeluErfGrad>(registry, "gelu_erf_grad", PartialRule::kFirst, nullptr);
  register_unary_ops(registry);
}

}  // namespace detail

DTensor add(const DTensor& a, const DTensor& b) { return call_op("add", {a, b}); }
DTensor subtract(const DTensor& a, const DTensor& b) { return call_op("subtract", {a, b}); }
DTensor multiply(const DTensor& a, const DTensor& b) { return call_op("multiply", {a, b}); }
DTensor divide(const DTensor& a, const DTensor& b) { return call_op("divide", {a, b}); }
DTensor maximum(const DTensor& a, const DTensor& b) { return call_op("maximum", {a, b}); }
DTensor minimum(const DTensor& a, const DTensor& b) { return call_op("minimum", {a, b}); }

}  // namespace tessel
