// Layout: how a tensor is laid out over a Mesh — one ShardingSpec per tensor dimension, plus
// the mesh dimensions over which the shards hold pending reductions (Partial).
//
// Text form is TensorFlow's, round-tripping exactly:
//   sharding_specs:x,unsharded, mesh:|x=2,y=2|0,1,2,3|0,1,2,3|/job:localhost/task:0/device:CPU:0,..
// tessel's extensions (docs/layout-text.md) never parse as a valid TF layout:
//   sharding_specs:x+y,unsharded, mesh:...           one tensor dim over two mesh dims
//   sharding_specs:x,unsharded, partial:sum(y), mesh:...   shards hold partial sums over y
//
// Uneven shards follow chunk semantics (shard_range.h): local_shape() of a device is exact,
// local_shape_from_global_shape() is the largest (first) shard's shape.
//
//   Mesh mesh = Mesh::from_string("|x=2,y=2|*CPU");
//   Layout l({"x", "unsharded"}, mesh);
//   l.num_shards(0) == 2; l.local_shape_from_global_shape({8, 6}) == {4, 6}
//
// Types: kStatic (normal), kParted (TF's PARTED, same specs, axes independent), kSingleDevice
// (iff the mesh is single-device), kEmpty (iff the mesh is empty).
// Errors: Error kInvalidArgument with TF's message texts (§2.3, §2.5).
// Thread safety: an immutable value.
#pragma once

#include <concepts>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "tessel/core/partial_shape.h"
#include "tessel/core/reduce_op.h"
#include "tessel/core/shape.h"
#include "tessel/mesh/mesh.h"
#include "tessel/mesh/sharding_spec.h"

namespace tessel {

enum class LayoutType { kEmpty, kStatic, kParted, kSingleDevice };

// A mesh dimension whose shards hold values still to be combined with `op`.
struct PartialDim {
  std::string mesh_dim;
  ReduceOp op = ReduceOp::kSum;
  friend bool operator==(const PartialDim&, const PartialDim&) = default;
};

class Layout {
 public:
  // The empty layout (empty mesh, rank 0), printed "empty_layout".
  Layout();

  // TF's Python constructor Layout(sharding_specs, mesh): the Python checks in order, then
  // the C++ ones. Type kStatic. Specs are strings: a mesh dim, "x+y", "unsharded" or "match".
  Layout(const std::vector<std::string>& sharding_specs, const Mesh& mesh);

  // TF's C++ GetLayout(type, specs, mesh) plus tessel's Partial dims (kept in mesh order).
  static Layout create(LayoutType type, std::vector<ShardingSpec> specs, const Mesh& mesh,
                       std::vector<PartialDim> partial = {});
  static Layout replicated(const Mesh& mesh, int rank);
  // Spec `axis` is `batch_dim`, the others unsharded. Bad dim or axis: kInvalidArgument.
  static Layout batch_sharded(const Mesh& mesh, const std::string& batch_dim, int rank,
                              int axis = 0);
  // batch_sharded with axis = rank - 1.
  static Layout inner_sharded(const Mesh& mesh, const std::string& inner_dim, int rank);
  // The single-device layout of a single-device mesh ("maximal:true, mesh:<device>").
  static Layout single_device(const Mesh& mesh);
  static Layout from_string(const std::string& text);
  static Layout from_proto(const std::string& bytes);

  LayoutType type() const { return data().type; }
  const Mesh& mesh() const { return data().mesh; }
  int rank() const { return static_cast<int>(data().specs.size()); }
  const std::vector<ShardingSpec>& sharding_specs() const { return data().specs; }
  // Specs as TF-style strings ("x", "unsharded", "x+y", ...).
  std::vector<std::string> sharding_spec_strings() const;
  const std::vector<PartialDim>& partial() const { return data().partial; }
  bool is_partial() const { return !data().partial.empty(); }

  // Shards along tensor dimension `axis`: 1 for unsharded, the product of the mesh dims'
  // sizes otherwise. axis out of range: kOutOfRange. match/any: kInvalidArgument (TF returns
  // (size_t)-1; see docs/compatibility.md).
  int64_t num_shards(int axis) const;
  std::vector<int64_t> num_shards_per_dim() const;

  bool is_empty() const { return type() == LayoutType::kEmpty; }
  bool is_single_device() const { return type() == LayoutType::kSingleDevice; }
  // TF: a tile mesh and every spec literally "unsharded" (size-1 mesh dims do not count), and
  // (tessel) nothing Partial. Rank 0 is fully replicated.
  bool is_fully_replicated() const;
  // Rank >= 1, spec 0 sharded, every other spec unsharded.
  bool is_batch_parallel() const;
  // The mesh dimensions used by any spec, in mesh order.
  std::vector<std::string> sharded_mesh_dims() const;

  // Shapes. Wrong rank: kInvalidArgument naming both ranks.
  // The exact block held by the device at mesh `offset` (chunk semantics, may be short/empty).
  Shape local_shape(const Shape& global_shape, int64_t offset) const;
  // The largest block's shape: ceil(n / shards) per dim (TF truncates; tessel never does).
  Shape local_shape_from_global_shape(const Shape& global_shape) const;
  // TF's PartialTensorShape overload: the unknown rank comes back unchanged, an unknown (-1,
  // dynamic) dimension stays unknown, a known one is as above. (A template only so that a braced
  // list, local_shape_from_global_shape({8, 6}), still means the Shape overload.)
  template <std::same_as<PartialShape> P>
  PartialShape local_shape_from_global_shape(const P& global_shape) const {
    return local_partial_shape_from_global_shape(global_shape);
  }
  // local[i] * num_shards(i) (exact for even shards; an upper bound for uneven ones).
  Shape global_shape_from_local_shape(const Shape& local_shape) const;

  // Shard coordinates: for each device offset 0..size-1 the shard index along every tensor dim
  // (0 for unsharded).
  std::vector<std::vector<int64_t>> offset_to_shard() const;
  // Row-major index of a shard tuple with num_shards_per_dim() as radices.
  int64_t offset_tuple_to_global_index(const std::vector<int64_t>& shard) const;
  // TF's ShardVector: 1-based shard coordinates per device offset, "shards:[(1,1),(1,2)]
  // num_shards_per_dim:(2,3)" in to_string() form.
  std::string shard_vector_string() const;

  // Derived layouts.
  Layout to_parted() const;
  // Drops the listed tensor dims (negative dims are ignored, as in TF's Layout.delete).
  Layout delete_dims(const std::vector<int>& dims) const;
  // Swaps the last two specs; rank < 2: kInvalidArgument.
  Layout transposed_2d() const;
  // Prepends unsharded specs up to `rank` (no-op if already that rank or more).
  Layout left_pad(int rank) const;
  // The same layout with no Partial dims / with these Partial dims.
  Layout without_partial() const;
  Layout with_partial(std::vector<PartialDim> partial) const;

  // Same type, rank and mesh, Partial dims equal, and specs that differ only where both sides
  // have one shard.
  bool is_equivalent(const Layout& other) const;
  bool is_equivalent_ignoring_type(const Layout& other) const;

  std::string to_string() const;
  std::string as_proto() const;  // serialized LayoutProto bytes
  friend bool operator==(const Layout& a, const Layout& b);
  friend bool operator!=(const Layout& a, const Layout& b) { return !(a == b); }
  size_t hash() const;

 private:
  Layout(LayoutType type, std::vector<ShardingSpec> specs, Mesh mesh,
         std::vector<PartialDim> partial);
  PartialShape local_partial_shape_from_global_shape(const PartialShape& global_shape) const;
  // The largest block's extent along `axis` of a global extent n >= 0.
  int64_t largest_block_extent(int axis, int64_t n) const;
  // Shard index of the device at `offset` along tensor dim `axis`.
  int64_t shard_index(int axis, const std::vector<int64_t>& location) const;

  // What copies share (a layout never changes once made), so that copying a layout costs a
  // reference count and comparing two copies a pointer compare.
  struct Data {
    LayoutType type = LayoutType::kEmpty;
    std::vector<ShardingSpec> specs;   // one per tensor dimension
    Mesh mesh;                         // the mesh the specs refer to
    std::vector<PartialDim> partial;   // pending reductions, in mesh-dimension order
  };
  // The data, or the empty layout's.
  const Data& data() const { return data_ ? *data_ : empty_data(); }
  static const Data& empty_data();

  std::shared_ptr<const Data> data_;  // null: the empty layout
};

std::ostream& operator<<(std::ostream& os, const Layout& layout);

}  // namespace tessel

template <>
struct std::hash<tessel::Layout> {
  size_t operator()(const tessel::Layout& l) const { return l.hash(); }
};
