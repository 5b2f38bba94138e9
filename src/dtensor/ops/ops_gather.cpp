// The gather op family (issue 34; registered by register_gather_ops), each along OpAttrs::axis:
//   gather(params, indices): params.shape[:axis] + indices.shape + params.shape[axis+1:], the
//     slices of params at the indices (tf.gather, numpy.take); axis unset: 0.
//   take_along_axis(arr, indices): out[.., j, ..] = arr[.., indices[.., j, ..], ..] (numpy's;
//     indices has arr's rank and shape but along the axis); axis required.
//   scatter_add(base, indices, updates): base with updates (gather(base, indices)'s shape) added
//     at the indices, repeated ones adding up (gather's gradient); axis unset: 0.
//   "scatter_add_along_axis"(base, indices, updates): the same for take_along_axis's indexing (its
//     gradient; internal); axis required.
// An index of an axis of n elements is in [-n, n) (negative: from the end).
//
// Sharding rules. The axis an op works along (of params, arr, base) must be unsharded: a layout
// with it sharded has no rule (kUnimplemented), and the sharding fallback gathers it. No output
// dim shards over a mesh dim another output dim or a pending reduction uses.
//   gather: params keeps its layout, Partial included (a gather only selects elements, so any
//     pending reduction commutes with it); the indices keep their specs over mesh dims params does
//     not use, no Partial; the output has params' specs around the indices'.
//   take_along_axis: each dim but the axis takes arr's spec, else the indices'; the axis takes the
//     indices'; arr is demanded in those specs with the axis whole (its Partial kept), the indices
//     in them (no Partial); the output has them and arr's Partial.
//   scatter_add, scatter_add_along_axis: the output has base's specs; a Partial base is reduced;
//     the updates' dims that are base's are demanded in base's specs; the dims that index (the
//     indices' dims of scatter_add, the axis of scatter_add_along_axis) keep the indices' spec,
//     else the updates', and the output is Partial(sum) over those mesh dims (each device adds
//     its own updates); the updates' pending sums over free mesh dims stay pending into the
//     output. One device of each of the output's sum groups starts from base, the others from
//     zeros.
// Gradients: gather's into params is scatter_add of g into zeros, take_along_axis's into arr
// scatter_add_along_axis of g into zeros; a scatter's into base is g, into updates the gather (or
// take_along_axis) of g; none into the indices.
// Kernels check every index first (kInvalidArgument naming the op, the index and the bound), then
// split the block over the intra-op threads: the gathers by output rows, the scatters by column
// ranges (parallel_over_columns), each adding its updates in order (the result does not depend on
// the thread count).
// No GPU kernels: they run host-staged on GPU devices.
#include <algorithm>
#include <string>
#include <vector>

#include "dtensor/framework/op_util.h"
#include "dtensor/ops/op_families.h"
#include "tessel/core/parallel.h"
#include "tessel/dtensor/ops.h"

namespace tessel {
namespace detail {
namespace {

constexpr std::string_view kGather = "gather";
constexpr std::string_view kTakeAlongAxis = "take_along_axis";
constexpr std::string_view kScatterAdd = "scatter_add";
constexpr std::string_view kScatterAlongAxis = "scatter_add_along_axis";

// Elements one intra-op thread moves at the least.
constexpr int64_t kGrainElements = int64_t{1} << 14;

// Whether an index picks a slice (gather, scatter_add: one index per [.., j, ..] row) or one
// element (take_along_axis, scatter_add_along_axis: indices shaped like the output).
enum class Indexing { kSlices, kElements };

int64_t op_axis(const OpAttrs& attrs, int rank, std::string_view op, Indexing how) {
  if (!attrs.axis && how == Indexing::kElements) throw_invalid(op, "needs the axis in attrs.axis");
  return normalize_axis(attrs.axis.value_or(0), rank, op);
}

// ---- shapes --------------------------------------------------------------------------------

// gather's output: params.shape[:axis] + indices + params.shape[axis+1:].
Shape gathered_shape(const Shape& params, const Shape& indices, int64_t axis) {
  const std::vector<int64_t>& p = params.dims();
  std::vector<int64_t> dims(p.begin(), p.begin() + axis);
  dims.insert(dims.end(), indices.dims().begin(), indices.dims().end());
  dims.insert(dims.end(), p.begin() + axis + 1, p.end());
  return Shape(dims);
}

// take_along_axis's indices: data's rank and shape on every dim but the axis.
void check_along_shapes(const Shape& data, const Shape& indices, int64_t axis,
                        std::string_view op) {
  bool ok = indices.rank() == data.rank();
  for (int d = 0; ok && d < data.rank(); ++d) ok = d == axis || indices[d] == data[d];
  if (!ok) {
    throw_invalid(op,
                  "indices of shape {} must have the rank and the shape of {} on every axis but "
                  "{} (no broadcasting)",
                  indices.to_string(), data.to_string(), axis);
  }
}

// The output of gather / take_along_axis (inputs: data, indices).
TensorSpec infer_gather(const std::vector<TensorSpec>& in, const OpAttrs& attrs,
                        std::string_view op, Indexing how) {
  const int64_t axis = op_axis(attrs, in[0].shape.rank(), op, how);
  require_index(in[1].dtype, op);
  if (how == Indexing::kSlices)
    return {gathered_shape(in[0].shape, in[1].shape, axis), in[0].dtype, {}};
  check_along_shapes(in[0].shape, in[1].shape, axis, op);
  return {in[1].shape, in[0].dtype, {}};
}

// The output of the scatters (inputs: base, indices, updates): base's.
TensorSpec infer_scatter(const std::vector<TensorSpec>& in, const OpAttrs& attrs,
                         std::string_view op, Indexing how) {
  const Shape& base = in[0].shape;
  const int64_t axis = op_axis(attrs, base.rank(), op, how);
  require_index(in[1].dtype, op);
  dispatch_number(in[0].dtype, op, []<typename T>() {});
  if (in[2].dtype != in[0].dtype) {
    throw_invalid(op, "updates are {}, base is {}", dtype_name(in[2].dtype),
                  dtype_name(in[0].dtype));
  }
  if (how == Indexing::kElements) check_along_shapes(base, in[1].shape, axis, op);
  const Shape want =
      how == Indexing::kSlices ? gathered_shape(base, in[1].shape, axis) : in[1].shape;
  if (in[2].shape != want) {
    throw_invalid(op, "updates have shape {}; base {} and indices {} along axis {} need {}",
                  in[2].shape.to_string(), base.to_string(), in[1].shape.to_string(), axis,
                  want.to_string());
  }
  return {base, in[0].dtype, {}};
}

// ---- sharding rules ------------------------------------------------------------------------

// The mesh dims some output dim shards over or a pending reduction uses: no other output dim may
// shard over them.
class TakenMeshDims {
 public:
  void take(const std::vector<std::string>& dims) {
    taken_.insert(taken_.end(), dims.begin(), dims.end());
  }
  void take_all(const Layout& layout) {
    for (const auto& dims : spec_list(layout)) take(dims);
    for (const PartialDim& p : layout.partial()) take({p.mesh_dim});
  }
  bool free(const std::vector<std::string>& dims) const {
    for (const std::string& m : dims) {
      if (std::find(taken_.begin(), taken_.end(), m) != taken_.end()) return false;
    }
    return true;
  }
  // `spec` when every mesh dim of it is free (then taken), else unsharded.
  std::vector<std::string> claim(const std::vector<std::string>& spec) {
    if (spec.empty() || !free(spec)) return {};
    take(spec);
    return spec;
  }

 private:
  std::vector<std::string> taken_;
};

ShardingDecision gather_rule(const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
  const Layout& params = in[0].layout;
  const Mesh& mesh = params.mesh();
  const int64_t axis = op_axis(attrs, params.rank(), kGather, Indexing::kSlices);
  const SpecList p = spec_list(params);
  if (!p[static_cast<size_t>(axis)].empty()) working_axis_sharded(axis, "params");
  TakenMeshDims taken;
  taken.take_all(params);
  SpecList indices;
  for (const auto& spec : spec_list(in[1].layout)) indices.push_back(taken.claim(spec));
  SpecList out(p.begin(), p.begin() + axis);
  out.insert(out.end(), indices.begin(), indices.end());
  out.insert(out.end(), p.begin() + axis + 1, p.end());
  return {{params, make_layout(mesh, indices)}, make_layout(mesh, out, params.partial())};
}

ShardingDecision take_along_axis_rule(const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
  const Layout& arr = in[0].layout;
  const Mesh& mesh = arr.mesh();
  const int64_t axis = op_axis(attrs, arr.rank(), kTakeAlongAxis, Indexing::kElements);
  SpecList out = spec_list(arr);
  if (!out[static_cast<size_t>(axis)].empty()) working_axis_sharded(axis, "arr");
  TakenMeshDims taken;
  taken.take_all(arr);
  const SpecList indices = spec_list(in[1].layout);
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d].empty()) out[d] = taken.claim(indices[d]);
  }
  SpecList arr_specs = out;
  arr_specs[static_cast<size_t>(axis)].clear();
  return {{make_layout(mesh, arr_specs, arr.partial()), make_layout(mesh, out)},
          make_layout(mesh, out, arr.partial())};
}

ShardingDecision scatter_rule(const std::vector<TensorSpec>& in, const OpAttrs& attrs,
                              std::string_view op, Indexing how) {
  const Layout base = in[0].layout.without_partial();
  const Mesh& mesh = base.mesh();
  const int64_t axis = op_axis(attrs, base.rank(), op, how);
  const size_t a = static_cast<size_t>(axis);
  const SpecList b = spec_list(base);
  if (!b[a].empty()) working_axis_sharded(axis, "base");
  TakenMeshDims taken;
  taken.take_all(base);
  const SpecList indices = spec_list(in[1].layout);
  const SpecList updates = spec_list(in[2].layout);
  // The dims that index: the indices' spec where free, else the updates'.
  const auto claim = [&](size_t index_dim, size_t update_dim) {
    std::vector<std::string> spec = taken.claim(indices[index_dim]);
    return spec.empty() ? taken.claim(updates[update_dim]) : spec;
  };
  SpecList index_specs;
  SpecList update_specs;
  if (how == Indexing::kSlices) {
    for (size_t j = 0; j < indices.size(); ++j) index_specs.push_back(claim(j, a + j));
    update_specs.assign(b.begin(), b.begin() + axis);
    update_specs.insert(update_specs.end(), index_specs.begin(), index_specs.end());
    update_specs.insert(update_specs.end(), b.begin() + axis + 1, b.end());
  } else {
    index_specs = b;
    index_specs[a] = claim(a, a);
    update_specs = index_specs;
  }
  std::vector<PartialDim> out_partial;
  for (size_t d = 0; d < index_specs.size(); ++d) {
    if (how == Indexing::kElements && d != a) continue;
    for (const std::string& m : index_specs[d]) out_partial.push_back({m, ReduceOp::kSum});
  }
  std::vector<PartialDim> pending;
  for (const PartialDim& p : in[2].layout.partial()) {
    if (p.op != ReduceOp::kSum || !taken.free({p.mesh_dim})) continue;
    taken.take({p.mesh_dim});
    pending.push_back(p);
    out_partial.push_back(p);
  }
  return {{base, make_layout(mesh, index_specs), make_layout(mesh, update_specs, pending)},
          make_layout(mesh, b, std::move(out_partial))};
}

// ---- kernels -------------------------------------------------------------------------------

template <typename I>
void check_indices(const I* indices, int64_t count, int64_t n, int64_t axis, std::string_view op) {
  for (int64_t k = 0; k < count; ++k) {
    const int64_t i = static_cast<int64_t>(indices[k]);
    if (i < -n || i >= n) {
      throw_invalid(op, "index {} is not in [{}, {}) (axis {} has {} elements)", i, -n, n, axis, n);
    }
  }
}

template <typename I>
int64_t wrap(I index, int64_t n) {
  const int64_t i = static_cast<int64_t>(index);
  return i < 0 ? i + n : i;
}

// out [outer, m, inner] from src [outer, n, inner]: out[o, j, i] = src[o, index, i], the index
// indices[j] (slices) or indices[o, j, i] (elements).
template <typename E, typename I>
void gather_block(const E* src, const I* indices, E* out, const AxisExtents& s, int64_t m,
                  Indexing how) {
  const int64_t inner = s.inner;
  const auto rows = [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      const E* from = src + (r / m) * s.n * inner;
      E* to = out + r * inner;
      if (how == Indexing::kSlices) {
        std::copy_n(from + wrap(indices[r % m], s.n) * inner, inner, to);
      } else {
        const I* index = indices + r * inner;
        for (int64_t i = 0; i < inner; ++i) to[i] = from[wrap(index[i], s.n) * inner + i];
      }
    }
  };
  parallel_for(s.outer * m, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(inner, 1)),
               rows);
}

void gather_kernel(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                   std::string_view op, Indexing how) {
  const Tensor& src = in[0];
  const Tensor& indices = in[1];
  const int64_t axis = op_axis(attrs, src.rank(), op, how);
  const AxisExtents s = axis_extents(src.shape(), axis);
  const int64_t m =
      how == Indexing::kSlices ? indices.num_elements() : axis_extents(indices.shape(), axis).n;
  dispatch_index(indices.dtype(), op, [&]<typename I>() {
    check_indices(indices.data<I>(), indices.num_elements(), s.n, axis, op);
    if (out.num_elements() == 0) return;
    dispatch_bytes(src.dtype(), op, [&]<typename E>() {
      gather_block(static_cast<const E*>(src.data()), indices.data<I>(),
                   static_cast<E*>(out.data()), s, m, how);
    });
  });
}

// out [outer, n, inner] = (with_base ? base : 0) + updates [outer, m, inner] added at the indices
// along n.
template <typename T, typename I>
void scatter_block(const T* base, bool with_base, const I* indices, const T* updates, T* out,
                   const AxisExtents& s, int64_t m, Indexing how) {
  const int64_t inner = s.inner;
  parallel_over_columns(s.outer, inner, s.n + m, [&](int64_t o, int64_t c0, int64_t c1) {
    T* to = out + o * s.n * inner;
    for (int64_t k = 0; k < s.n; ++k) {
      for (int64_t c = c0; c < c1; ++c) {
        to[k * inner + c] = with_base ? base[o * s.n * inner + k * inner + c] : T(0);
      }
    }
    for (int64_t j = 0; j < m; ++j) {
      const int64_t row = o * m + j;
      const T* from = updates + row * inner;
      if (how == Indexing::kSlices) {
        T* dst = to + wrap(indices[j], s.n) * inner;
        for (int64_t c = c0; c < c1; ++c) dst[c] += from[c];
      } else {
        const I* index = indices + row * inner;
        for (int64_t c = c0; c < c1; ++c) to[wrap(index[c], s.n) * inner + c] += from[c];
      }
    }
  });
}

void scatter_kernel(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                    const LocalContext& context, std::string_view op, Indexing how) {
  const Tensor& indices = in[1];
  const int64_t axis = op_axis(attrs, out.rank(), op, how);
  const AxisExtents s = axis_extents(out.shape(), axis);
  const int64_t m =
      how == Indexing::kSlices ? indices.num_elements() : axis_extents(indices.shape(), axis).n;
  const bool with_base = first_in_sum_groups(*context.output_layout, context.mesh_offset);
  dispatch_index(indices.dtype(), op, [&]<typename I>() {
    check_indices(indices.data<I>(), indices.num_elements(), s.n, axis, op);
    dispatch_number(out.dtype(), op, [&]<typename T>() {
      scatter_block(in[0].data<T>(), with_base, indices.data<I>(), in[2].data<T>(), out.data<T>(),
                    s, m, how);
    });
  });
}

// ---- registration --------------------------------------------------------------------------

OpAttrs axis_attrs(int64_t axis) {
  OpAttrs attrs;
  attrs.axis = axis;
  return attrs;
}

// Zeros shaped and laid out like x (a Partial x's reduced layout): what the scatters of the
// gathers' gradients add into.
DTensor zeros_for(const DTensor& x) {
  return zeros(x.shape(), x.layout().without_partial(), x.dtype(), &x.runtime());
}

void add_gather(OpRegistry& registry, std::string_view op, Indexing how, std::string_view scatter) {
  OpDef def;
  def.name = std::string(op);
  def.num_inputs = 2;
  def.infer = [op, how](const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
    return infer_gather(in, attrs, op, how);
  };
  def.shard = [how](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs& attrs) {
    return how == Indexing::kSlices ? gather_rule(in, attrs) : take_along_axis_rule(in, attrs);
  };
  def.kernel = [op, how](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                         const LocalContext&) { gather_kernel(in, out, attrs, op, how); };
  def.vjp = [scatter](const VjpArgs& a) {
    const DTensor& data = a.inputs[0];
    return std::vector<DTensor>{call_op(scatter, {zeros_for(data), a.inputs[1], a.grad},
                                        axis_attrs(a.attrs->axis.value_or(0))),
                                DTensor()};
  };
  registry.add(std::move(def));
}

void add_scatter(OpRegistry& registry, std::string_view op, Indexing how, std::string_view gather) {
  OpDef def;
  def.name = std::string(op);
  def.num_inputs = 3;
  def.infer = [op, how](const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
    return infer_scatter(in, attrs, op, how);
  };
  def.shard = [op, how](const std::vector<TensorSpec>& in, const TensorSpec&,
                        const OpAttrs& attrs) { return scatter_rule(in, attrs, op, how); };
  def.kernel = [op, how](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                         const LocalContext& context) {
    scatter_kernel(in, out, attrs, context, op, how);
  };
  def.vjp = [gather](const VjpArgs& a) {
    return std::vector<DTensor>{
        a.grad, DTensor(),
        call_op(gather, {a.grad, a.inputs[1]}, axis_attrs(a.attrs->axis.value_or(0)))};
  };
  registry.add(std::move(def));
}

}  // namespace

void register_gather_ops(OpRegistry& registry) {
  add_gather(registry, kGather, Indexing::kSlices, kScatterAdd);
  add_gather(registry, kTakeAlongAxis, Indexing::kElements, kScatterAlongAxis);
  add_scatter(registry, kScatterAdd, Indexing::kSlices, kGather);
  add_scatter(registry, kScatterAlongAxis, Indexing::kElements, kTakeAlongAxis);
}

}  // namespace detail

DTensor gather(const DTensor& params, const DTensor& indices, int64_t axis) {
  return call_op(detail::kGather, {params, indices}, detail::axis_attrs(axis));
}

DTensor take_along_axis(const DTensor& arr, const DTensor& indices, int64_t axis) {
  return call_op(detail::kTakeAlongAxis, {arr, indices}, detail::axis_attrs(axis));
}

DTensor scatter_add(const DTensor& base, const DTensor& indices, const DTensor& updates,
                    int64_t axis) {
  return call_op(detail::kScatterAdd, {base, indices, updates}, detail::axis_attrs(axis));
}

}  // namespace tessel
