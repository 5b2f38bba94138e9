// Internal: helpers shared by the op families (see op_util.h).
#include "dtensor/op_util.h"

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

int64_t normalize_axis(int64_t axis, int rank, std::string_view op) {
  if (axis < -rank || axis >= rank) {
    throw_invalid(op, "axis {} is out of range for rank {}", axis, rank);
  }
  return axis < 0 ? axis + rank : axis;
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

void no_rule(std::string_view why) {
  throw Error(ErrorCode::kUnimplemented, "sharding rule", std::string(why));
}

}  // namespace tessel::detail
