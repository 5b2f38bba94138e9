// The elementwise op family, comparisons and selection (issue 34): less, less_equal, greater,
// greater_equal, equal, not_equal (two inputs of one dtype, f32, f64, i32 or i64, numpy
// broadcasting, a bool output), and where(cond, x, y) (numpy.where: cond bool, x and y of one
// dtype, the three broadcast together).
//
// Sharding rules:
//  - the comparisons: binary_def's (ops_elementwise.cpp) with no Partial kept: a comparison is
//    not linear, so a Partial input is reduced first (as maximum's inputs are).
//  - where: per output dim, the spec of the largest input (x and y before cond on ties) that does
//    not broadcast the dim and shards it over mesh dims no other output dim took; every input is
//    demanded in those specs on its non-broadcast dims and unsharded on its broadcast dims, so
//    the local blocks broadcast as the global shapes do. Every Partial input is reduced (where is
//    linear in (x, y) only when both are Partial alike and cond is not: not worth a rule yet).
// Gradients: none through the comparisons (piecewise constant) nor into cond; x gets grad where
// cond holds, y elsewhere, each summed over the dims it was broadcast along.
// Kernels: the comparisons run elementwise.h's binary_loop with a bool result; where, a flat loop
// when the three blocks have the output's size, else an odometer over the output's dims, on the
// element's bytes (any dtype). Neither has a GPU kernel (the GPU tables map T to T): they run
// host-staged on GPU devices.
#include <algorithm>
#include <array>
#include <string_view>
#include <utility>

#include "dtensor/framework/op_util.h"
#include "dtensor/ops/elementwise.h"
#include "tessel/core/parallel.h"
#include "tessel/dtensor/ops.h"

namespace tessel {
namespace detail {
namespace {

namespace ew = elementwise;

// ---- comparisons -------------------------------------------------------------------------------

TensorSpec infer_comparison(std::string_view op, const std::vector<TensorSpec>& in) {
  if (in[0].dtype != in[1].dtype) {
    throw_invalid(op, "inputs have different dtypes {} and {} (shapes {} and {})",
                  dtype_name(in[0].dtype), dtype_name(in[1].dtype), in[0].shape.to_string(),
                  in[1].shape.to_string());
  }
  const DType dtype = in[0].dtype;
  if (dtype != DType::kF32 && dtype != DType::kF64 && dtype != DType::kI32 &&
      dtype != DType::kI64) {
    throw_error(ErrorCode::kUnimplemented, op, "no kernel for dtype {} (f32, f64, i32, i64)",
                dtype_name(dtype));
  }
  TensorSpec out;
  out.dtype = DType::kBool;
  out.shape = broadcast_shapes(in[0].shape, in[1].shape, op);
  return out;
}

template <typename F>
void add_comparison(OpRegistry& registry, const char* name) {
  OpDef def = binary_def(name, BinaryPartial::kNone);
  def.infer = [name](const std::vector<TensorSpec>& in, const OpAttrs&) {
    return infer_comparison(name, in);
  };
  def.kernel = [name](const std::vector<Tensor>& in, Tensor& out, const OpAttrs&,
                      const LocalContext&) {
    const auto loop = [&]<typename T>() { binary_loop<T, bool>(in[0], in[1], out, F{}); };
    if (is_floating(in[0].dtype())) {
      dispatch_float(in[0].dtype(), name, loop);
    } else {
      dispatch_index(in[0].dtype(), name, loop);
    }
  };
  def.vjp = [](const VjpArgs&) { return std::vector<DTensor>{DTensor(), DTensor()}; };
  def.saves = VjpSaves::nothing();
  registry.add(std::move(def));
}

// ---- where -------------------------------------------------------------------------------------

constexpr const char* kWhere = "where";

TensorSpec infer_where(const std::vector<TensorSpec>& in) {
  if (in[0].dtype != DType::kBool) {
    throw_invalid(kWhere, "cond must be bool, got {} (compare, or cast to bool)",
                  dtype_name(in[0].dtype));
  }
  if (in[1].dtype != in[2].dtype) {
    throw_invalid(kWhere, "x and y have different dtypes {} and {} (shapes {} and {})",
                  dtype_name(in[1].dtype), dtype_name(in[2].dtype), in[1].shape.to_string(),
                  in[2].shape.to_string());
  }
  TensorSpec out;
  out.dtype = in[1].dtype;
  out.shape =
      broadcast_shapes(broadcast_shapes(in[0].shape, in[1].shape, kWhere), in[2].shape, kWhere);
  return out;
}

ShardingDecision where_rule(const std::vector<TensorSpec>& in, const TensorSpec& out) {
  const int rank = out.shape.rank();
  const auto index = [&](int k, int d) { return d - (rank - in[k].shape.rank()); };
  const auto broadcasts = [&](int k, int d) {
    const int i = index(k, d);
    return i < 0 || (in[k].shape[i] == 1 && out.shape[d] != 1);
  };
  // Largest first; x, y, cond on ties.
  std::array<int, 3> order{1, 2, 0};
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return in[a].shape.num_elements() > in[b].shape.num_elements();
  });

  std::vector<ShardingSpec> specs(static_cast<size_t>(rank));
  std::vector<std::string> used;
  const auto free = [&](const ShardingSpec& s) {
    for (const std::string& m : s.mesh_dims()) {
      if (std::find(used.begin(), used.end(), m) != used.end()) return false;
    }
    return true;
  };
  for (int d = 0; d < rank; ++d) {
    for (int k : order) {
      if (broadcasts(k, d)) continue;
      const ShardingSpec& s = in[k].layout.sharding_specs()[static_cast<size_t>(index(k, d))];
      if (!s.is_sharded() || !free(s)) continue;
      specs[static_cast<size_t>(d)] = s;
      for (const std::string& m : s.mesh_dims()) used.push_back(m);
      break;
    }
  }

  const Mesh& mesh = in[0].layout.mesh();
  ShardingDecision decision;
  for (int k = 0; k < 3; ++k) {
    decision.inputs.push_back(operand_layout(specs, in[k].shape, out.shape, mesh));
  }
  decision.output = Layout::create(LayoutType::kStatic, std::move(specs), mesh, {});
  return decision;
}

// Element strides of a contiguous block of shape `s` read as an operand broadcast to `out`: one
// per dim of `out`, 0 along the dims it is broadcast along.
std::vector<int64_t> broadcast_strides(const Shape& s, const Shape& out) {
  const int lead = out.rank() - s.rank();
  std::vector<int64_t> strides(static_cast<size_t>(out.rank()), 0);
  int64_t step = 1;
  for (int i = s.rank() - 1; i >= 0; --i) {
    if (s[i] != 1) strides[static_cast<size_t>(lead + i)] = step;
    step *= s[i];
  }
  return strides;
}

// out = cond ? x : y on contiguous blocks broadcast to out's, T an element's bytes.
template <typename T>
void where_loop(const Tensor& cond, const Tensor& x, const Tensor& y, Tensor& out) {
  const int64_t n = out.num_elements();
  if (n == 0) return;
  const bool* pc = cond.data<bool>();
  const T* px = static_cast<const T*>(x.data());
  const T* py = static_cast<const T*>(y.data());
  T* po = static_cast<T*>(out.data());
  if (cond.num_elements() == n && x.num_elements() == n && y.num_elements() == n) {
    tessel::parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) po[i] = pc[i] ? px[i] : py[i];
    });
    return;
  }
  const Shape& shape = out.shape();
  const std::array<std::vector<int64_t>, 3> strides{broadcast_strides(cond.shape(), shape),
                                                    broadcast_strides(x.shape(), shape),
                                                    broadcast_strides(y.shape(), shape)};
  const int rank = shape.rank();  // >= 1: some block is smaller than n > 0 elements
  const int64_t inner = shape[rank - 1];
  const int64_t sc = strides[0].back(), sx = strides[1].back(), sy = strides[2].back();
  std::vector<int64_t> counter(static_cast<size_t>(rank), 0);
  int64_t oc = 0, ox = 0, oy = 0;
  for (int64_t o = 0; o < n; o += inner) {
    for (int64_t i = 0; i < inner; ++i) {
      po[o + i] = pc[oc + i * sc] ? px[ox + i * sx] : py[oy + i * sy];
    }
    for (int d = rank - 1; d-- > 0;) {  // the outer dims, as an odometer
      const auto u = static_cast<size_t>(d);
      oc += strides[0][u];
      ox += strides[1][u];
      oy += strides[2][u];
      if (++counter[u] < shape[d]) break;
      oc -= strides[0][u] * shape[d];
      ox -= strides[1][u] * shape[d];
      oy -= strides[2][u] * shape[d];
      counter[u] = 0;
    }
  }
}

void where_kernel(const std::vector<Tensor>& in, Tensor& out, const OpAttrs&, const LocalContext&) {
  dispatch_bytes(out.dtype(), kWhere,
                 [&]<typename E>() { where_loop<E>(in[0], in[1], in[2], out); });
}

std::vector<DTensor> where_vjp(const VjpArgs& v) {
  const DTensor& cond = v.inputs[0];
  const DTensor zero = scalar_like(0.0, v.grad);
  return {DTensor(), sum_to(where(cond, v.grad, zero), v.inputs[1].shape()),
          sum_to(where(cond, zero, v.grad), v.inputs[2].shape())};
}

void register_where(OpRegistry& registry) {
  OpDef def;
  def.name = kWhere;
  def.num_inputs = 3;
  def.infer = [](const std::vector<TensorSpec>& in, const OpAttrs&) { return infer_where(in); };
  def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec& out, const OpAttrs&) {
    return where_rule(in, out);
  };
  def.kernel = where_kernel;
  def.vjp = where_vjp;
  def.saves = VjpSaves::of_inputs({0});  // the condition; the branches' shapes only
  registry.add(std::move(def));
}

}  // namespace

void register_compare_ops(OpRegistry& registry) {
  add_comparison<ew::Less>(registry, "less");
  add_comparison<ew::LessEqual>(registry, "less_equal");
  add_comparison<ew::Greater>(registry, "greater");
  add_comparison<ew::GreaterEqual>(registry, "greater_equal");
  add_comparison<ew::Equal>(registry, "equal");
  add_comparison<ew::NotEqual>(registry, "not_equal");
  register_where(registry);
}

}  // namespace detail

DTensor less(const DTensor& a, const DTensor& b) { return call_op("less", {a, b}); }
DTensor less_equal(const DTensor& a, const DTensor& b) { return call_op("less_equal", {a, b}); }
DTensor greater(const DTensor& a, const DTensor& b) { return call_op("greater", {a, b}); }
DTensor greater_equal(const DTensor& a, const DTensor& b) {
  return call_op("greater_equal", {a, b});
}
DTensor equal(const DTensor& a, const DTensor& b) { return call_op("equal", {a, b}); }
DTensor not_equal(const DTensor& a, const DTensor& b) { return call_op("not_equal", {a, b}); }

DTensor where(const DTensor& cond, const DTensor& x, const DTensor& y) {
  return call_op("where", {cond, x, y});
}

}  // namespace tessel
