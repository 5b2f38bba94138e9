// The elementwise op family, binary half: add, subtract, multiply, divide, maximum, minimum, pow
// with numpy broadcasting, and the internal binary ops their gradients use (mask_greater,
// mask_greater_equal: 1 where a > b / a >= b, else 0). The unary ops, their derivative ops
// (relu_grad, ...: binary ops registered with binary_def), the host-scalar forms and cast are in
// ops_unary.cpp, the comparisons and where in ops_compare.cpp; the math of both halves is
// elementwise_math.h's, their loops elementwise.h's.
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
//    and the *_grad ops keep only the first input's; maximum, minimum, pow and the masks keep
//    none.
//    A Partial mesh dim that the output shards over is reduced (the planner may reduce-scatter).
// Kernels (elementwise.h): one tight loop per (dtype, op) for equal blocks and scalar blocks, else
// a strided loop over coalesced dims; empty blocks return at once. GPU kernels beside them.
#include <algorithm>
#include <numeric>

#include "dtensor/framework/op_util.h"
#include "dtensor/ops/elementwise.h"
#include "dtensor/ops/op_families.h"
#include "tessel/dtensor/ops.h"

namespace tessel {
namespace detail {

void register_unary_ops(OpRegistry& registry);    // ops_unary.cpp
void register_compare_ops(OpRegistry& registry);  // ops_compare.cpp

namespace {

namespace ew = elementwise;

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
                             BinaryPartial rule) {
  const Layout& la = in[0].layout;
  const Layout& lb = in[1].layout;
  // Fast path: equal shapes and layouts, nothing to reduce.
  if (in[0].shape == in[1].shape && la == lb) {
    if (!la.is_partial()) return {{la, lb}, la};
    if (rule == BinaryPartial::kBoth) {
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
  if (rule == BinaryPartial::kBoth) {
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
  } else if (rule == BinaryPartial::kLarger || rule == BinaryPartial::kFirst) {
    int holder = 0;
    if (rule == BinaryPartial::kLarger) {
      holder = first_linear(in[big].layout) != nullptr ? big : small;
    }
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
    decision.inputs.push_back(operand_layout(specs, in[k].shape, out.shape, mesh,
                                             carries[k] ? kept : std::vector<PartialDim>{}));
  }
  decision.output = Layout::create(LayoutType::kStatic, std::move(specs), mesh, std::move(kept));
  return decision;
}

// ---- gradients -------------------------------------------------------------------------------

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
  const DTensor to_a =
      max ? call_op("mask_greater_equal", {a, b}) : call_op("mask_greater_equal", {b, a});
  const DTensor to_b = max ? call_op("mask_greater", {b, a}) : call_op("mask_greater", {a, b});
  return {sum_to(multiply(v.grad, to_a), a.shape()), sum_to(multiply(v.grad, to_b), b.shape())};
}

// d x^y / dx = y x^(y-1); d x^y / dy = x^y log x, with log 1 where x == 0 (JAX's choice: the
// exponent's gradient at a zero base is 0 rather than NaN).
std::vector<DTensor> pow_vjp(const VjpArgs& v) {
  const DTensor& x = v.inputs[0];
  const DTensor& y = v.inputs[1];
  const DTensor zero = scalar_like(0.0, x);
  const DTensor log_x = log(where(equal(x, zero), scalar_like(1.0, x), x));
  return {sum_to(multiply(v.grad, multiply(y, pow(x, add(y, -1.0)))), x.shape()),
          sum_to(multiply(v.grad, multiply(v.output, log_x)), y.shape())};
}

}  // namespace

Layout operand_layout(const std::vector<ShardingSpec>& out_specs, const Shape& operand,
                      const Shape& out, const Mesh& mesh, std::vector<PartialDim> partial) {
  const int lead = out.rank() - operand.rank();
  std::vector<ShardingSpec> specs(static_cast<size_t>(operand.rank()));
  for (int i = 0; i < operand.rank(); ++i) {
    if (operand[i] != 1 || out[lead + i] == 1) {
      specs[static_cast<size_t>(i)] = out_specs[static_cast<size_t>(lead + i)];
    }
  }
  return Layout::create(LayoutType::kStatic, std::move(specs), mesh, std::move(partial));
}

DTensor scalar_like(double value, const DTensor& like) {
  return fill(Shape(std::vector<int64_t>{}), value, Layout::replicated(like.layout().mesh(), 0),
              like.dtype(), &like.runtime());
}

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

OpDef binary_def(const char* name, BinaryPartial rule) {
  OpDef def;
  def.name = name;
  def.num_inputs = 2;
  def.infer = [name](const std::vector<TensorSpec>& in, const OpAttrs&) {
    return infer_binary(name, in);
  };
  def.shard = [rule](const std::vector<TensorSpec>& in, const TensorSpec& out, const OpAttrs&) {
    return binary_rule(in, out, rule);
  };
  return def;
}

void register_elementwise_ops(OpRegistry& registry) {
  const VjpSaves both = VjpSaves::of_inputs({0, 1});
  add_binary<ew::Add>(registry, "add", BinaryPartial::kBoth, VjpSaves::nothing(), add_vjp);
  add_binary<ew::Subtract>(registry, "subtract", BinaryPartial::kBoth, VjpSaves::nothing(),
                           subtract_vjp);
  add_binary<ew::Multiply>(registry, "multiply", BinaryPartial::kLarger, both, multiply_vjp);
  add_binary<ew::Divide>(registry, "divide", BinaryPartial::kFirst,
                         VjpSaves::of_inputs({1}, /*with_output=*/true), divide_vjp);
  add_binary<ew::Maximum>(registry, "maximum", BinaryPartial::kNone, both,
                          [](const VjpArgs& v) { return pick_vjp(v, true); });
  add_binary<ew::Minimum>(registry, "minimum", BinaryPartial::kNone, both,
                          [](const VjpArgs& v) { return pick_vjp(v, false); });
  add_binary<ew::Pow>(registry, "pow", BinaryPartial::kNone,
                      VjpSaves::of_inputs({0, 1}, /*with_output=*/true), pow_vjp);
  // Piecewise constant: zero gradients.
  const VjpFn none = [](const VjpArgs&) { return std::vector<DTensor>{DTensor(), DTensor()}; };
  add_binary<ew::MaskGreater>(registry, "mask_greater", BinaryPartial::kNone, VjpSaves::nothing(),
                              none);
  add_binary<ew::MaskGreaterEqual>(registry, "mask_greater_equal", BinaryPartial::kNone,
                                   VjpSaves::nothing(), none);
  register_unary_ops(registry);
  register_compare_ops(registry);
}

}  // namespace detail

DTensor add(const DTensor& a, const DTensor& b) { return call_op("add", {a, b}); }
DTensor subtract(const DTensor& a, const DTensor& b) { return call_op("subtract", {a, b}); }
DTensor multiply(const DTensor& a, const DTensor& b) { return call_op("multiply", {a, b}); }
DTensor divide(const DTensor& a, const DTensor& b) { return call_op("divide", {a, b}); }
DTensor maximum(const DTensor& a, const DTensor& b) { return call_op("maximum", {a, b}); }
DTensor minimum(const DTensor& a, const DTensor& b) { return call_op("minimum", {a, b}); }
DTensor pow(const DTensor& x, const DTensor& y) { return call_op("pow", {x, y}); }

}  // namespace tessel
