// Internal: helpers shared by the op families (layouts from spec lists, axis checks, dtype
// dispatch of kernels, broadcasting).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/errors.h"
#include "tessel/core/parallel.h"
#include "tessel/core/shape.h"
#include "tessel/core/tensor.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/mesh/layout.h"

namespace tessel::detail {

// Per tensor dimension: the mesh dimensions it is sharded over, major first (empty: unsharded).
using SpecList = std::vector<std::vector<std::string>>;

SpecList spec_list(const Layout& layout);
Layout make_layout(const Mesh& mesh, const SpecList& specs, std::vector<PartialDim> partial = {});
// True when `layout` shards some tensor dimension over `mesh_dim`.
bool shards_over(const Layout& layout, const std::string& mesh_dim);
// True when `layout` shards some tensor dimension over `mesh_dim` or is Partial over it.
bool uses_mesh_dim(const Layout& layout, const std::string& mesh_dim);

// axis in [-rank, rank) -> [0, rank); else kInvalidArgument naming the op.
int64_t normalize_axis(int64_t axis, int rank, std::string_view op);

// The reductions' axes (reduce_sum / reduce_mean / reduce_max and their gradient ops): per
// axis of `shape`, reduced or not; empty `axes`: every axis. Out-of-range or repeated axes:
// kInvalidArgument naming the op, the axes and the shape.
std::vector<bool> reduced_mask(const std::vector<int64_t>& axes, const Shape& shape,
                               std::string_view op);

// numpy broadcasting of two shapes; kInvalidArgument naming the op and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op);

// The iteration space of out = f(a, b), a and b broadcast (numpy) to `out`'s shape: per
// dimension its extent and each input's element stride (0 where that input broadcasts), size-1
// dimensions dropped and dimensions that stay contiguous in both inputs merged, so the innermost
// run is as long as possible. Empty for a single element.
struct BroadcastDims {
  std::vector<int64_t> extent;
  std::vector<int64_t> a_stride;
  std::vector<int64_t> b_stride;
};
BroadcastDims broadcast_dims(const Tensor& a, const Tensor& b, const Shape& out);

// True unless the device at mesh `offset` is past the first of its group along some Partial(sum)
// dim of `layout`: add_scalar adds its scalar on those devices only, so that it is added once,
// and a creation op with a Partial(sum) layout puts its value there (the others hold 0).
bool first_in_sum_groups(const Layout& layout, int64_t offset);

// How require_float reports a dtype other than f32 / f64 (each call site keeps its own).
enum class NotFloat {
  // kUnimplemented "no kernel for <what> <dtype> (f32 and f64 only)": the op would make sense
  // for the dtype, no kernel is written.
  kNoKernel,
  // The op needs real numbers: kInvalidArgument "<what> must be a floating dtype (f32 or f64),
  // got <dtype>" for an integer or bool dtype; bf16 / f16 as kNoKernel.
  kNeedsFloating,
  // kInvalidArgument "<what> must be f32 or f64, got <dtype>" for every other dtype.
  kInvalid,
};

// The op families' "f32 and f64 only" check: returns for f32 / f64, else throws as `how` says,
// naming `op`; `what` names the checked value ("dtype", "logits", "the table").
void require_float(DType dtype, std::string_view op, std::string_view what,
                   NotFloat how = NotFloat::kNoKernel);

// The index ops' check of their indices' dtype: i32 or i64, else kInvalidArgument naming the op
// and `what` ("indices", "ids").
void require_index(DType dtype, std::string_view op, std::string_view what = "indices");

// Calls f.template operator()<T>() for f32 / f64 (kUnimplemented naming the op otherwise).
template <typename F>
void dispatch_float(DType dtype, std::string_view op, F&& f) {
  switch (dtype) {
    case DType::kF32: return f.template operator()<float>();
    case DType::kF64: return f.template operator()<double>();
    default:
      throw_error(ErrorCode::kUnimplemented, op, "no kernel for dtype {}", dtype_name(dtype));
  }
}

// The same for the index dtypes i32 / i64.
template <typename F>
void dispatch_index(DType dtype, std::string_view op, F&& f) {
  switch (dtype) {
    case DType::kI32: return f.template operator()<int32_t>();
    case DType::kI64: return f.template operator()<int64_t>();
    default:
      throw_error(ErrorCode::kInvalidArgument, op, "indices must be i32 or i64, got {}",
                  dtype_name(dtype));
  }
}

// The same for the dtypes with arithmetic kernels beyond the float ones: f32, f64, i32, i64
// (kUnimplemented naming the op and those dtypes otherwise).
template <typename F>
void dispatch_number(DType dtype, std::string_view op, F&& f) {
  switch (dtype) {
    case DType::kF32: return f.template operator()<float>();
    case DType::kF64: return f.template operator()<double>();
    case DType::kI32: return f.template operator()<int32_t>();
    case DType::kI64: return f.template operator()<int64_t>();
    default:
      throw_error(ErrorCode::kUnimplemented, op, "no kernel for dtype {} (f32, f64, i32, i64)",
                  dtype_name(dtype));
  }
}

// An element of 16 bytes (c128), copied whole.
struct Bytes16 {
  uint64_t low, high;
};

// Calls f.template operator()<E>() with E an unsigned type of the dtype's size (1, 2, 4, 8 or
// Bytes16): the kernels that only move elements (any dtype).
template <typename F>
void dispatch_bytes(DType dtype, std::string_view op, F&& f) {
  switch (dtype_size(dtype)) {
    case 1: return f.template operator()<uint8_t>();
    case 2: return f.template operator()<uint16_t>();
    case 4: return f.template operator()<uint32_t>();
    case 8: return f.template operator()<uint64_t>();
    case 16: return f.template operator()<Bytes16>();
    default:
      throw_error(ErrorCode::kUnimplemented, op, "no kernel for dtype {}", dtype_name(dtype));
  }
}

// A block of `shape` seen as [outer, n, inner] around dim `axis` (n: that dim's extent).
struct AxisExtents {
  int64_t outer = 1;
  int64_t n = 1;
  int64_t inner = 1;
};
AxisExtents axis_extents(const Shape& shape, int64_t axis);

// fn(o, c0, c1) for every o in [0, outer) and every range [c0, c1) of at most 1024 of the
// `inner` columns, split over the intra-op threads; `cost`: the elements one column of one task
// handles. For the kernels that walk an axis in order for each column of [outer, n, inner]
// (cumsum, the scatters): what each column gets does not depend on the thread count.
template <typename Fn>
void parallel_over_columns(int64_t outer, int64_t inner, int64_t cost, const Fn& fn) {
  if (outer <= 0 || inner <= 0) return;
  constexpr int64_t kWidest = 1024;
  constexpr int64_t kGrainElements = int64_t{1} << 14;
  const int64_t width = std::min(inner, kWidest);
  const int64_t ranges = (inner + width - 1) / width;
  const int64_t grain = std::max<int64_t>(1, kGrainElements / (std::max<int64_t>(cost, 1) * width));
  parallel_for(outer * ranges, grain, [&](int64_t first, int64_t last) {
    for (int64_t t = first; t < last; ++t) {
      const int64_t c0 = (t % ranges) * width;
      fn(t / ranges, c0, std::min(inner, c0 + width));
    }
  });
}

// The rule's answer when it has none: kUnimplemented (call_op names the op and the layouts).
[[noreturn]] void no_rule(std::string_view why);
// no_rule for an op whose working axis (gather's, cumsum's, ...) of input `input` is sharded.
[[noreturn]] void working_axis_sharded(int64_t axis, std::string_view input);

}  // namespace tessel::detail
