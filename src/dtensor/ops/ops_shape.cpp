// The shape op family (registered by register_shape_ops): reshape, transpose, slice, concat, and
// the internal "slice_grad" (zero padding) that slice's VJP calls.
//
// These ops only move elements, so they keep every Partial input Partial, whatever its reduce
// op (a reduction over devices is elementwise, and zero padding is the identity of a pending
// sum; of max/min/prod it is a zero term, and the padded region of the value is zero too).
// Kernels copy bytes, so every dtype works.
//
// Sharding rules (one line each):
//   reshape: the dims are cut into groups whose products agree (size-1 dims on their own); a
//     group keeps the sharding of its leading input dim on its leading output dim when every
//     other dim of the group is unsharded and the shards' flat ranges are the same on both sides
//     (always for a dim carried over whole; for merges / splits when the chunk sizes agree,
//     checked for uneven shards too); every other dim of such a group is demanded unsharded.
//   transpose: the specs are permuted along.
//   slice: a dim sliced to a partial range is demanded unsharded; a full-range dim keeps its
//     sharding.
//   concat: the concat axis is demanded unsharded; every input is demanded in the first input's
//     layout (its specs elsewhere and its Partial dims; a replicated input becomes one term of
//     the pending sum, a differently Partial one is reduced first); when another input has a
//     different reduce op pending over one of the first's Partial mesh dims, all are reduced.
//   slice_grad: the gradient's layout; dims padded by the slice are demanded unsharded.
//
// concat takes any number of inputs; OpDef has a fixed arity, so "concat2" .. "concat8" are
// registered (one kernel, copying each input's block in turn) and concat() of more than 8 values
// folds: concat8 of the first 8, then concat8 of that result and the next 7, and so on.
// concat() of one value returns it (after checking the axis).
//
// OpAttrs: reshape's target in `shape` (ops.h takes a Shape, which cannot hold -1; the op itself
// accepts one -1, inferred from the element count); transpose's `perm`; slice's `begin` and
// `size`; slice_grad's `begin` and `shape` (the sliced input's); concat's `axis`.
#include <algorithm>
#include <cstring>

#include "core/errors.h"
#include "dtensor/framework/op_util.h"
#include "dtensor/ops/op_families.h"
#include "tessel/core/parallel.h"
#include "tessel/dtensor/ops.h"

namespace tessel {
namespace detail {
namespace {

int64_t mesh_dims_size(const Mesh& mesh, const std::vector<std::string>& dims) {
  int64_t n = 1;
  for (const std::string& d : dims) n *= mesh.dim_size(d);
  return n;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Copies the box `extents` from src (a contiguous block of shape src_shape, starting at
// src_offsets) to dst (contiguous, dst_shape, at dst_offsets); element size `bytes`. Trailing
// dims copied whole on both sides are merged so the inner memcpy runs are as long as possible.
void copy_box(const uint8_t* src, std::vector<int64_t> src_shape, std::vector<int64_t> src_offsets,
              uint8_t* dst, std::vector<int64_t> dst_shape, std::vector<int64_t> dst_offsets,
              std::vector<int64_t> extents, size_t bytes) {
  for (int64_t e : extents) {
    if (e == 0) return;
  }
  if (extents.empty()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  // Merge dim r-1 into r-2 while dim r-1 is copied whole on both sides.
  while (extents.size() > 1) {
    const size_t last = extents.size() - 1;
    if (extents[last] != src_shape[last] || extents[last] != dst_shape[last]) break;
    const int64_t n = extents[last];
    extents.pop_back();
    src_shape.pop_back();
    dst_shape.pop_back();
    src_offsets.pop_back();
    dst_offsets.pop_back();
    extents.back() *= n;
    src_shape.back() *= n;
    dst_shape.back() *= n;
    src_offsets.back() *= n;
    dst_offsets.back() *= n;
  }
  const size_t rank = extents.size();
  std::vector<int64_t> src_strides(rank, 1), dst_strides(rank, 1);
  for (size_t d = rank - 1; d-- > 0;) {
    src_strides[d] = src_strides[d + 1] * src_shape[d + 1];
    dst_strides[d] = dst_strides[d + 1] * dst_shape[d + 1];
  }
  int64_t src_base = 0, dst_base = 0;
  for (size_t d = 0; d < rank; ++d) {
    src_base += src_offsets[d] * src_strides[d];
    dst_base += dst_offsets[d] * dst_strides[d];
  }
  const size_t run = static_cast<size_t>(extents[rank - 1]) * bytes;
  std::vector<int64_t> index(rank, 0);  // odometer over dims 0 .. rank-2
  int64_t s = src_base, t = dst_base;
  while (true) {
    std::memcpy(dst + static_cast<size_t>(t) * bytes, src + static_cast<size_t>(s) * bytes, run);
    size_t d = rank - 1;
    while (d > 0) {
      --d;
      if (++index[d] < extents[d]) {
        s += src_strides[d];
        t += dst_strides[d];
        break;
      }
      s -= (extents[d] - 1) * src_strides[d];
      t -= (extents[d] - 1) * dst_strides[d];
      index[d] = 0;
      if (d == 0) return;
    }
    if (rank == 1) return;
  }
}

const uint8_t* bytes_of(const Tensor& t) { return static_cast<const uint8_t*>(t.data()); }
uint8_t* bytes_of(Tensor& t) { return static_cast<uint8_t*>(t.data()); }

// ---- reshape ------------------------------------------------------------------------------
constexpr std::string_view kReshape = "reshape";

TensorSpec infer_reshape(const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
  const Shape& from = in[0].shape;
  std::vector<int64_t> dims = attrs.shape;
  int inferred = -1;
  int64_t known = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      if (inferred >= 0) {
        throw_invalid(kReshape, "only one dimension of the new shape [{}] may be -1",
                      fmt::join(attrs.shape, ","));
      }
      inferred = static_cast<int>(i);
    } else if (dims[i] < 0) {
      throw_invalid(kReshape, "dimension {} of the new shape [{}] is negative", i,
                    fmt::join(attrs.shape, ","));
    } else {
      known *= dims[i];
    }
  }
  const int64_t count = from.num_elements();
  if (inferred >= 0) {
    if (known == 0 || count % known != 0) {
      throw_invalid(kReshape, "cannot reshape a tensor of shape {} ({} elements) into [{}]",
                    from.to_string(), count, fmt::join(attrs.shape, ","));
    }
    dims[static_cast<size_t>(inferred)] = count / known;
  }
  const Shape to(dims);
  if (to.num_elements() != count) {
    throw_invalid(kReshape,
                  "cannot reshape a tensor of shape {} ({} elements) into {} ({} elements)",
                  from.to_string(), count, to.to_string(), to.num_elements());
  }
  return {to, in[0].dtype, {}};
}

struct DimGroup {
  std::vector<int> in;
  std::vector<int> out;
};

// Groups of consecutive dims whose extents multiply to the same product; size-1 dims that lie
// between groups form groups of their own ({1} -> {} or {} -> {1}). Needs a non-empty tensor.
std::vector<DimGroup> reshape_groups(const Shape& from, const Shape& to) {
  std::vector<DimGroup> groups;
  const int rin = from.rank();
  const int rout = to.rank();
  int i = 0;
  int j = 0;
  while (i < rin || j < rout) {
    const bool in_one = i < rin && from[i] == 1;
    const bool out_one = j < rout && to[j] == 1;
    if (in_one && !out_one) {
      groups.push_back({{i++}, {}});
      continue;
    }
    if (out_one && !in_one) {
      groups.push_back({{}, {j++}});
      continue;
    }
    if (i >= rin || j >= rout) {
      throw_error(ErrorCode::kInternal, kReshape, "cannot group the dims of {} and {}",
                  from.to_string(), to.to_string());
    }
    DimGroup g{{i}, {j}};
    int64_t pi = from[i++];
    int64_t pj = to[j++];
    while (pi != pj) {
      if (pi < pj && i < rin) {
        g.in.push_back(i);
        pi *= from[i++];
      } else if (pj < pi && j < rout) {
        g.out.push_back(j);
        pj *= to[j++];
      } else {
        throw_error(ErrorCode::kInternal, kReshape, "cannot group the dims of {} and {}",
                    from.to_string(), to.to_string());
      }
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

ShardingDecision shard_reshape(const std::vector<TensorSpec>& in, const TensorSpec& out) {
  const Layout& layout = in[0].layout;
  const Mesh& mesh = layout.mesh();
  const Shape& from = in[0].shape;
  const Shape& to = out.shape;
  SpecList want(static_cast<size_t>(from.rank()));
  SpecList result(static_cast<size_t>(to.rank()));
  if (from.num_elements() > 0) {
    const SpecList have = spec_list(layout);
    for (const DimGroup& g : reshape_groups(from, to)) {
      if (g.in.empty() || g.out.empty()) continue;  // a size-1 dim alone: unsharded
      const std::vector<std::string>& lead = have[static_cast<size_t>(g.in.front())];
      if (lead.empty()) continue;
      // The leading input dim's shards cover flat ranges of chunk ca * (product / a0) in the
      // group; on the output side cb * (product / b0). Equal chunks: equal blocks.
      const int64_t a0 = from[g.in.front()];
      const int64_t b0 = to[g.out.front()];
      int64_t product = 1;
      for (int d : g.in) product *= from[d];
      const int64_t n = mesh_dims_size(mesh, lead);
      if (ceil_div(a0, n) * (product / a0) != ceil_div(b0, n) * (product / b0)) continue;
      want[static_cast<size_t>(g.in.front())] = lead;
      result[static_cast<size_t>(g.out.front())] = lead;
    }
  }
  return {{make_layout(mesh, want, layout.partial())}, make_layout(mesh, result, layout.partial())};
}

void reshape_kernel(const std::vector<Tensor>& in, Tensor& out) {
  if (in[0].num_elements() != out.num_elements()) {
    throw_error(ErrorCode::kInternal, kReshape, "local block {} does not match output block {}",
                in[0].shape().to_string(), out.shape().to_string());
  }
  if (out.nbytes() > 0) std::memcpy(out.data(), in[0].data(), out.nbytes());
}

// ---- transpose ----------------------------------------------------------------------------
constexpr std::string_view kTranspose = "transpose";

std::vector<int64_t> resolve_perm(const std::vector<int64_t>& perm, int rank) {
  if (perm.empty()) {
    std::vector<int64_t> reverse(static_cast<size_t>(rank));
    for (int i = 0; i < rank; ++i) reverse[static_cast<size_t>(i)] = rank - 1 - i;
    return reverse;
  }
  if (static_cast<int>(perm.size()) != rank) {
    throw_invalid(kTranspose, "perm [{}] has {} entries for a tensor of rank {}",
                  fmt::join(perm, ","), perm.size(), rank);
  }
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  std::vector<int64_t> out;
  for (int64_t p : perm) {
    if (p < -rank || p >= rank) {
      throw_invalid(kTranspose, "perm [{}] has entry {} outside [{}, {})", fmt::join(perm, ","), p,
                    -rank, rank);
    }
    const int64_t q = p < 0 ? p + rank : p;
    if (seen[static_cast<size_t>(q)]) {
      throw_invalid(kTranspose, "perm [{}] is not a permutation: {} appears twice",
                    fmt::join(perm, ","), q);
    }
    seen[static_cast<size_t>(q)] = true;
    out.push_back(q);
  }
  return out;
}

TensorSpec infer_transpose(const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
  const std::vector<int64_t> perm = resolve_perm(attrs.perm, in[0].shape.rank());
  std::vector<int64_t> dims;
  for (int64_t p : perm) dims.push_back(in[0].shape[static_cast<int>(p)]);
  return {Shape(dims), in[0].dtype, {}};
}

ShardingDecision shard_transpose(const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
  const Layout& layout = in[0].layout;
  const std::vector<int64_t> perm = resolve_perm(attrs.perm, layout.rank());
  const SpecList have = spec_list(layout);
  SpecList out;
  for (int64_t p : perm) out.push_back(have[static_cast<size_t>(p)]);
  return {{layout}, make_layout(layout.mesh(), out, layout.partial())};
}

// Output rows (runs of the output's last dimension) one intra-op thread copies at the least.
constexpr int64_t kTransposeGrainElements = int64_t{1} << 14;

template <typename E>
void transpose_block(const E* src, const std::vector<int64_t>& in_shape, E* dst,
                     const std::vector<int64_t>& perm) {
  const size_t rank = perm.size();
  std::vector<int64_t> in_strides(rank, 1);
  for (size_t d = rank - 1; d-- > 0;) in_strides[d] = in_strides[d + 1] * in_shape[d + 1];
  std::vector<int64_t> ext(rank), stride(rank);  // per output dim
  for (size_t k = 0; k < rank; ++k) {
    ext[k] = in_shape[static_cast<size_t>(perm[k])];
    stride[k] = in_strides[static_cast<size_t>(perm[k])];
  }
  const int64_t inner = ext[rank - 1];
  const int64_t inner_stride = stride[rank - 1];
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < rank; ++d) rows *= ext[d];
  // Output rows [first, last): the source offset of the first from its index, then an odometer
  // over the outer dimensions; a row whose elements are adjacent in the source (the last
  // dimension stays last: attention's head split) is one memcpy.
  const auto copy_rows = [&](int64_t first, int64_t last) {
    std::vector<int64_t> index(rank, 0);
    int64_t s = 0;
    for (size_t d = rank - 1, left = static_cast<size_t>(first); d-- > 0;) {
      index[d] = static_cast<int64_t>(left) % ext[d];
      left /= static_cast<size_t>(ext[d]);
      s += index[d] * stride[d];
    }
    E* out = dst + first * inner;
    for (int64_t row = first; row < last; ++row, out += inner) {
      if (inner_stride == 1) {
        std::memcpy(out, src + s, static_cast<size_t>(inner) * sizeof(E));
      } else {
        for (int64_t j = 0; j < inner; ++j) out[j] = src[s + j * inner_stride];
      }
      for (size_t d = rank - 1; d-- > 0;) {
        if (++index[d] < ext[d]) {
          s += stride[d];
          break;
        }
        s -= (ext[d] - 1) * stride[d];
        index[d] = 0;
      }
    }
  };
  parallel_for(rows, std::max<int64_t>(1, kTransposeGrainElements / std::max<int64_t>(inner, 1)),
               copy_rows);
}

void transpose_kernel(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs) {
  if (out.num_elements() == 0) return;
  const int rank = in[0].rank();
  if (rank == 0) {
    std::memcpy(out.data(), in[0].data(), out.nbytes());
    return;
  }
  const std::vector<int64_t> perm = resolve_perm(attrs.perm, rank);
  const std::vector<int64_t>& shape = in[0].shape().dims();
  switch (dtype_size(in[0].dtype())) {
    case 1:
      return transpose_block(static_cast<const uint8_t*>(in[0].data()), shape,
                             static_cast<uint8_t*>(out.data()), perm);
    case 2:
      return transpose_block(static_cast<const uint16_t*>(in[0].data()), shape,
                             static_cast<uint16_t*>(out.data()), perm);
    case 4:
      return transpose_block(static_cast<const uint32_t*>(in[0].data()), shape,
                             static_cast<uint32_t*>(out.data()), perm);
    case 8:
      return transpose_block(static_cast<const uint64_t*>(in[0].data()), shape,
                             static_cast<uint64_t*>(out.data()), perm);
    default:
      throw_error(ErrorCode::kUnimplemented, kTranspose, "no kernel for dtype {}",
                  dtype_name(in[0].dtype()));
  }
}

// ---- slice --------------------------------------------------------------------------------
constexpr std::string_view kSlice = "slice";

// The slice's sizes with -1 resolved; kInvalidArgument for bad begin / size.
std::vector<int64_t> resolve_slice(const Shape& shape, const std::vector<int64_t>& begin,
                                   const std::vector<int64_t>& size) {
  const int rank = shape.rank();
  if (static_cast<int>(begin.size()) != rank || static_cast<int>(size.size()) != rank) {
    throw_invalid(kSlice, "begin [{}] and size [{}] must both have {} entries for shape {}",
                  fmt::join(begin, ","), fmt::join(size, ","), rank, shape.to_string());
  }
  std::vector<int64_t> out(static_cast<size_t>(rank));
  for (int d = 0; d < rank; ++d) {
    const size_t k = static_cast<size_t>(d);
    if (begin[k] < 0 || begin[k] > shape[d]) {
      throw_invalid(kSlice, "Expected begin[{}] in [0, {}], but got {} (shape {})", d, shape[d],
                    begin[k], shape.to_string());
    }
    const int64_t n = size[k] == -1 ? shape[d] - begin[k] : size[k];
    if (n < 0 || begin[k] + n > shape[d]) {
      throw_invalid(kSlice, "Expected size[{}] in [0, {}], but got {} (shape {}, begin {})", d,
                    shape[d] - begin[k], size[k], shape.to_string(), begin[k]);
    }
    out[k] = n;
  }
  return out;
}

TensorSpec infer_slice(const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
  return {Shape(resolve_slice(in[0].shape, attrs.begin, attrs.size)), in[0].dtype, {}};
}

// `full` (the larger shape) and `part` (the slice's): dims where they differ are unsharded.
SpecList keep_full_dims(const Layout& layout, const Shape& full, const Shape& part) {
  SpecList specs = spec_list(layout);
  for (int d = 0; d < full.rank(); ++d) {
    if (full[d] != part[d]) specs[static_cast<size_t>(d)].clear();
  }
  return specs;
}

ShardingDecision shard_slice(const std::vector<TensorSpec>& in, const TensorSpec& out) {
  const Layout& layout = in[0].layout;
  const Layout want =
      make_layout(layout.mesh(), keep_full_dims(layout, in[0].shape, out.shape), layout.partial());
  return {{want}, want};
}

// Dims where the slice is a partial range: the input block is the whole dim there, the output
// block is the slice; elsewhere both blocks are the same.
// Where the output block starts in the input block: at begin along the sliced dims (whole in
// both: the sharding rule demands it), at 0 along the others (sharded alike).
std::vector<int64_t> slice_source_offsets(const LocalContext& context, const OpAttrs& attrs) {
  const int rank = context.output_shape.rank();
  std::vector<int64_t> src_offsets(static_cast<size_t>(rank), 0);
  for (int d = 0; d < rank; ++d) {
    const size_t k = static_cast<size_t>(d);
    if (context.input_shapes[0][d] != context.output_shape[d]) src_offsets[k] = attrs.begin[k];
  }
  return src_offsets;
}

void slice_kernel(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                  const LocalContext& context) {
  const std::vector<int64_t> src_offsets = slice_source_offsets(context, attrs);
  copy_box(bytes_of(in[0]), in[0].shape().dims(), src_offsets, bytes_of(out), out.shape().dims(),
           std::vector<int64_t>(static_cast<size_t>(out.rank()), 0), out.shape().dims(),
           dtype_size(out.dtype()));
}

// ---- slice_grad(g): g padded with zeros to attrs.shape at attrs.begin -------------------
constexpr std::string_view kSliceGrad = "slice_grad";

TensorSpec infer_slice_grad(const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
  const Shape full(attrs.shape);
  const std::vector<int64_t> size = resolve_slice(full, attrs.begin, in[0].shape.dims());
  if (Shape(size) != in[0].shape) {
    throw_invalid(kSliceGrad, "gradient shape {} does not match the slice",
                  in[0].shape.to_string());
  }
  return {full, in[0].dtype, {}};
}

ShardingDecision shard_slice_grad(const std::vector<TensorSpec>& in, const TensorSpec& out) {
  const Layout& layout = in[0].layout;
  const SpecList specs = keep_full_dims(layout, out.shape, in[0].shape);
  return {{make_layout(layout.mesh(), specs, layout.partial())},
          make_layout(layout.mesh(), specs, layout.partial())};
}

void slice_grad_kernel(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                       const LocalContext& context) {
  if (out.nbytes() == 0) return;
  std::memset(out.data(), 0, out.nbytes());
  std::vector<int64_t> dst_offsets(static_cast<size_t>(out.rank()), 0);
  for (int d = 0; d < out.rank(); ++d) {
    const size_t k = static_cast<size_t>(d);
    if (context.input_shapes[0][d] != context.output_shape[d]) dst_offsets[k] = attrs.begin[k];
  }
  copy_box(bytes_of(in[0]), in[0].shape().dims(),
           std::vector<int64_t>(static_cast<size_t>(out.rank()), 0), bytes_of(out),
           out.shape().dims(), dst_offsets, in[0].shape().dims(), dtype_size(out.dtype()));
}

// ---- concatN ------------------------------------------------------------------------------

// The call's concat axis, as given (may be negative); none: kInvalidArgument naming the op.
int64_t concat_axis(const OpAttrs& attrs, std::string_view op) {
  if (!attrs.axis) throw_invalid(op, "needs the concat axis in attrs.axis");
  return *attrs.axis;
}

TensorSpec infer_concat(const std::vector<TensorSpec>& in, const OpAttrs& attrs,
                        std::string_view op) {
  const int rank = in[0].shape.rank();
  if (rank == 0) throw_invalid(op, "cannot concatenate scalars (rank 0)");
  const int64_t axis = normalize_axis(concat_axis(attrs, op), rank, op);
  std::vector<int64_t> dims = in[0].shape.dims();
  for (size_t k = 1; k < in.size(); ++k) {
    const Shape& s = in[k].shape;
    if (in[k].dtype != in[0].dtype) {
      throw_invalid(op, "input {} is {}, input 0 is {}", k, dtype_name(in[k].dtype),
                    dtype_name(in[0].dtype));
    }
    bool ok = s.rank() == rank;
    for (int d = 0; ok && d < rank; ++d) ok = d == axis || s[d] == in[0].shape[d];
    if (!ok) {
      throw_invalid(op,
                    "input {} has shape {}, input 0 has shape {}: every dimension but the concat "
                    "axis {} must match",
                    k, s.to_string(), in[0].shape.to_string(), axis);
    }
    dims[static_cast<size_t>(axis)] += s[static_cast<int>(axis)];
  }
  return {Shape(dims), in[0].dtype, {}};
}

ShardingDecision shard_concat(const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
  const Layout& first = in[0].layout;
  const int64_t axis = normalize_axis(concat_axis(attrs, "concat"), first.rank(), "concat");
  SpecList specs = spec_list(first);
  specs[static_cast<size_t>(axis)].clear();
  // The first input's pending reductions are kept unless another input has a different reduce
  // op pending over the same mesh dim (no relayout turns one into the other): then all reduce.
  std::vector<PartialDim> partial = first.partial();
  for (const TensorSpec& other : in) {
    for (const PartialDim& q : other.layout.partial()) {
      for (const PartialDim& p : first.partial()) {
        if (p.mesh_dim == q.mesh_dim && p.op != q.op) partial.clear();
      }
    }
  }
  const Layout want = make_layout(first.mesh(), specs, partial);
  return {std::vector<Layout>(in.size(), want), want};
}

void concat_kernel(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs) {
  const int rank = out.rank();
  const int64_t given = concat_axis(attrs, "concat");
  const int64_t axis = given < 0 ? given + rank : given;
  std::vector<int64_t> dst_offsets(static_cast<size_t>(rank), 0);
  const std::vector<int64_t> zeros(static_cast<size_t>(rank), 0);
  for (const Tensor& t : in) {
    copy_box(bytes_of(t), t.shape().dims(), zeros, bytes_of(out), out.shape().dims(), dst_offsets,
             t.shape().dims(), dtype_size(out.dtype()));
    dst_offsets[static_cast<size_t>(axis)] += t.shape()[static_cast<int>(axis)];
  }
}

OpAttrs slice_attrs(std::vector<int64_t> begin, std::vector<int64_t> size) {
  OpAttrs a;
  a.begin = std::move(begin);
  a.size = std::move(size);
  return a;
}

// slice_grad's attrs: g goes at `begin` of zeros shaped like the sliced input.
OpAttrs slice_grad_attrs(std::vector<int64_t> begin, std::vector<int64_t> input_shape) {
  OpAttrs a;
  a.begin = std::move(begin);
  a.shape = std::move(input_shape);
  return a;
}

// An OpDef named `name` whose VJP reads nothing of a call but shapes and attrs (a tape keeps
// nothing of it): every shape op's.
OpDef shape_op(std::string name) {
  OpDef def;
  def.name = std::move(name);
  def.saves = VjpSaves::nothing();
  return def;
}

}  // namespace

std::string concat_name(size_t arity) { return fmt::format("concat{}", arity); }

void register_shape_ops(OpRegistry& registry) {
  {
    OpDef def = shape_op(std::string(kReshape));
    def.infer = infer_reshape;
    def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec& out, const OpAttrs&) {
      return shard_reshape(in, out);
    };
    def.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs&,
                    const LocalContext&) { reshape_kernel(in, out); };
    def.output_views_input = true;  // the kernel runs only where a view cannot serve
    def.vjp = [](const VjpArgs& a) {
      return std::vector<DTensor>{reshape(a.grad, a.inputs[0].shape())};
    };
    registry.add(std::move(def));
  }
  {
    OpDef def = shape_op(std::string(kTranspose));
    def.infer = infer_transpose;
    def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs& attrs) {
      return shard_transpose(in, attrs);
    };
    def.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                    const LocalContext&) { transpose_kernel(in, out, attrs); };
    def.vjp = [](const VjpArgs& a) {
      const std::vector<int64_t> perm = resolve_perm(a.attrs->perm, a.inputs[0].rank());
      std::vector<int64_t> inverse(perm.size());
      for (size_t k = 0; k < perm.size(); ++k)
        inverse[static_cast<size_t>(perm[k])] = static_cast<int64_t>(k);
      return std::vector<DTensor>{transpose(a.grad, inverse)};
    };
    registry.add(std::move(def));
  }
  {
    OpDef def = shape_op(std::string(kSlice));
    def.infer = infer_slice;
    def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec& out, const OpAttrs&) {
      return shard_slice(in, out);
    };
    def.kernel = slice_kernel;
    // A contiguous box (a range of the leading dims: qkv's thirds) is served as a view.
    def.output_view_offsets = slice_source_offsets;
    def.vjp = [](const VjpArgs& a) {
      return std::vector<DTensor>{call_op(
          kSliceGrad, {a.grad}, slice_grad_attrs(a.attrs->begin, a.inputs[0].shape().dims()))};
    };
    registry.add(std::move(def));
  }
  {
    OpDef def = shape_op(std::string(kSliceGrad));
    def.infer = infer_slice_grad;
    def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec& out, const OpAttrs&) {
      return shard_slice_grad(in, out);
    };
    def.kernel = slice_grad_kernel;
    def.vjp = [](const VjpArgs& a) {
      return std::vector<DTensor>{slice(a.grad, a.attrs->begin, a.inputs[0].shape().dims())};
    };
    registry.add(std::move(def));
  }
  for (int arity = 2; arity <= kMaxConcatArity; ++arity) {
    OpDef def = shape_op(concat_name(static_cast<size_t>(arity)));
    def.num_inputs = arity;
    def.infer = [name = def.name](const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
      return infer_concat(in, attrs, name);
    };
    def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs& attrs) {
      return shard_concat(in, attrs);
    };
    def.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                    const LocalContext&) { concat_kernel(in, out, attrs); };
    // The gradient of each input is its slice of g along the axis.
    def.vjp = [](const VjpArgs& a) {
      const int rank = a.grad.rank();
      const size_t axis =
          static_cast<size_t>(normalize_axis(concat_axis(*a.attrs, "concat"), rank, "concat"));
      std::vector<DTensor> grads;
      std::vector<int64_t> begin(static_cast<size_t>(rank), 0);
      for (const DTensor& input : a.inputs) {
        grads.push_back(slice(a.grad, begin, input.shape().dims()));
        begin[axis] += input.shape()[static_cast<int>(axis)];
      }
      return grads;
    };
    registry.add(std::move(def));
  }
}

}  // namespace detail

DTensor reshape(const DTensor& x, const Shape& shape) {
  OpAttrs attrs;
  attrs.shape = shape.dims();
  return call_op(detail::kReshape, {x}, attrs);
}

DTensor transpose(const DTensor& x) {
  return call_op(detail::kTranspose, {x}, OpAttrs{});  // an empty attrs.perm: reversed
}

DTensor transpose(const DTensor& x, const std::vector<int64_t>& perm) {
  if (perm.empty() && x.rank() > 0) {
    detail::throw_invalid(detail::kTranspose,
                          "perm [] has 0 entries for a tensor of rank {} (transpose(x) without "
                          "a perm reverses the axes)",
                          x.rank());
  }
  OpAttrs attrs;
  attrs.perm = perm;
  return call_op(detail::kTranspose, {x}, attrs);
}

DTensor slice(const DTensor& x, const std::vector<int64_t>& begin,
              const std::vector<int64_t>& size) {
  return call_op(detail::kSlice, {x}, detail::slice_attrs(begin, size));
}

DTensor concat(const std::vector<DTensor>& values, int64_t axis) {
  if (values.empty()) detail::throw_invalid("concat", "needs at least one input, got none");
  for (size_t i = 0; i < values.size(); ++i) {
    if (!values[i].defined()) detail::throw_invalid("concat", "input {} is a null DTensor", i);
  }
  OpAttrs attrs;
  attrs.axis = axis;
  if (values.size() == 1) {
    const int rank = values[0].rank();
    if (rank == 0) detail::throw_invalid("concat", "cannot concatenate scalars (rank 0)");
    detail::normalize_axis(axis, rank, "concat");
    return values[0];
  }
  // Fold: the running result plus up to kMaxConcatArity - 1 more values per call.
  size_t next = std::min<size_t>(values.size(), detail::kMaxConcatArity);
  DTensor result = call_op(
      detail::concat_name(next),
      std::vector<DTensor>(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(next)),
      attrs);
  while (next < values.size()) {
    const size_t take = std::min<size_t>(values.size() - next, detail::kMaxConcatArity - 1);
    std::vector<DTensor> group{result};
    group.insert(group.end(), values.begin() + static_cast<std::ptrdiff_t>(next),
                 values.begin() + static_cast<std::ptrdiff_t>(next + take));
    result = call_op(detail::concat_name(group.size()), group, attrs);
    next += take;
  }
  return result;
}

}  // namespace tessel
