// Internal: helpers shared by the op families (see op_util.h).
#include "dtensor/framework/op_util.h"

namespace tessel::detail {

SpecList spec_list(const Layout& layout) {
  SpecList specs;
  for (const ShardingSpec& s : layout.sharding_specs()) specs.push_back(s.mesh_dims());
  return specs;
}

Layout make_layout(const Mesh& mesh, const SpecList& specs, std::vector<PartialDim> partial) {
  std::vector<ShardingSpec> out;
  out.reserve(specs.size());
  for (const auto& dims : specs) {
    out.push_back(dims.empty() ? ShardingSpec::unsharded() : ShardingSpec::sharded(dims));
  }
  return Layout::create(LayoutType::kStatic, std::move(out), mesh, std::move(partial));
}

bool shards_over(const Layout& layout, const std::string& mesh_dim) {
  for (const ShardingSpec& s : layout.sharding_specs()) {
    if (s.uses(mesh_dim)) return true;
  }
  return false;
}

bool uses_mesh_dim(const Layout& layout, const std::string& mesh_dim) {
  if (shards_over(layout, mesh_dim)) return true;
  for (const PartialDim& p : layout.partial()) {
    if (p.mesh_dim == mesh_dim) return true;
  }
  return false;
}

void require_index(DType dtype, std::string_view op, std::string_view what) {
  if (dtype != DType::kI32 && dtype != DType::kI64) {
    throw_invalid(op, "{} must be i32 or i64, got {}", what, dtype_name(dtype));
  }
}

int64_t normalize_axis(int64_t axis, int rank, std::string_view op) {
  if (axis < -rank || axis >= rank) {
    throw_invalid(op, "axis {} is out of range for rank {}", axis, rank);
  }
  return axis < 0 ? axis + rank : axis;
}

std::vector<bool> reduced_mask(const std::vector<int64_t>& axes, const Shape& shape,
                               std::string_view op) {
  const int rank = shape.rank();
  std::vector<bool> mask(static_cast<size_t>(rank), axes.empty());
  for (int64_t axis : axes) {
    if (axis < -rank || axis >= rank) {
      throw_invalid(op, "axis {} is out of range for input of shape {} (rank {})", axis,
                    shape.to_string(), rank);
    }
    const size_t a = static_cast<size_t>(axis < 0 ? axis + rank : axis);
    if (mask[a]) {
      throw_invalid(op, "axis {} is listed twice in axes [{}]", a, fmt::join(axes, ","));
    }
    mask[a] = true;
  }
  return mask;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op) {
  const int rank = std::max(a.rank(), b.rank());
  std::vector<int64_t> dims(static_cast<size_t>(rank));
  for (int i = 0; i < rank; ++i) {
    const int ia = i - (rank - a.rank());
    const int ib = i - (rank - b.rank());
    const int64_t da = ia >= 0 ? a[ia] : 1;
    const int64_t db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      throw_invalid(op, "shapes {} and {} do not broadcast", a.to_string(), b.to_string());
    }
    dims[static_cast<size_t>(i)] = da == 1 ? db : da;
  }
  return Shape(dims);
}

void require_float(DType dtype, std::string_view op, std::string_view what, NotFloat how) {
  if (dtype == DType::kF32 || dtype == DType::kF64) return;
  if (how == NotFloat::kInvalid) {
    throw_invalid(op, "{} must be f32 or f64, got {}", what, dtype_name(dtype));
  }
  if (how == NotFloat::kNeedsFloating && !is_floating(dtype)) {
    throw_invalid(op, "{} must be a floating dtype (f32 or f64), got {}", what, dtype_name(dtype));
  }
  throw_error(ErrorCode::kUnimplemented, op, "no kernel for {} {} (f32 and f64 only)", what,
              dtype_name(dtype));
}

BroadcastDims broadcast_dims(const Tensor& a, const Tensor& b, const Shape& out) {
  BroadcastDims dims;
  const int rank = out.rank();
  for (int d = 0; d < rank; ++d) {
    const int64_t e = out[d];
    if (e == 1) continue;
    const int ia = d - (rank - a.rank());
    const int ib = d - (rank - b.rank());
    const int64_t stride_a =
        ia < 0 || a.shape()[ia] != e ? 0 : a.strides()[static_cast<size_t>(ia)];
    const int64_t stride_b =
        ib < 0 || b.shape()[ib] != e ? 0 : b.strides()[static_cast<size_t>(ib)];
    if (!dims.extent.empty() && dims.a_stride.back() == stride_a * e &&
        dims.b_stride.back() == stride_b * e) {
      dims.extent.back() *= e;
      dims.a_stride.back() = stride_a;
      dims.b_stride.back() = stride_b;
      continue;
    }
    dims.extent.push_back(e);
    dims.a_stride.push_back(stride_a);
    dims.b_stride.push_back(stride_b);
  }
  return dims;
}

bool first_in_sum_groups(const Layout& layout, int64_t offset) {
  if (!layout.is_partial()) return true;
  const Mesh& mesh = layout.mesh();
  const std::vector<int64_t> strides = mesh.strides();
  for (const PartialDim& p : layout.partial()) {
    if (p.op != ReduceOp::kSum) continue;
    const size_t i = static_cast<size_t>(mesh.dim_index(p.mesh_dim));
    if ((offset / strides[i]) % mesh.dim_size(p.mesh_dim) != 0) return false;
  }
  return true;
}

AxisExtents axis_extents(const Shape& shape, int64_t axis) {
  AxisExtents e;
  for (int d = 0; d < shape.rank(); ++d) {
    if (d < axis) e.outer *= shape[d];
    if (d == axis) e.n = shape[d];
    if (d > axis) e.inner *= shape[d];
  }
  return e;
}

void no_rule(std::string_view why) {
  throw Error(ErrorCode::kUnimplemented, "sharding rule", std::string(why));
}

void working_axis_sharded(int64_t axis, std::string_view input) {
  no_rule(fmt::format("axis {} of {}, which the op works along, is sharded", axis, input));
}

}  // namespace tessel::detail
