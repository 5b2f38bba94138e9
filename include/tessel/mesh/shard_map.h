// ShardMap: which device holds which block of a tensor, for a layout and a global shape.
//
//   ShardMap map(Layout::from_string("sharding_specs:x,unsharded, mesh:|x=2,y=2|*CPU"), {8, 6});
//   map.block(3) -> offsets {4, 0}, extents {4, 6}   (device offset 3 is at x=1)
//   map.visualize() draws a grid of blocks labelled with the device ids that hold them,
//   like jax.debug.visualize_array_sharding, for rank 1 and 2; higher ranks print a table.
//
// Blocks follow chunk semantics (shard_range.h): uneven shards are short or empty, never lost.
// Thread safety: an immutable value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/core/shape.h"
#include "tessel/mesh/layout.h"

namespace tessel {

struct ShardBlock {
  std::vector<int64_t> offsets;  // first index per tensor dimension
  std::vector<int64_t> extents;  // length per tensor dimension (0 = empty block)
  std::vector<int64_t> shard;    // shard index per tensor dimension
  friend bool operator==(const ShardBlock&, const ShardBlock&) = default;
};

class ShardMap {
 public:
  // layout.rank() != global_shape.rank(): kInvalidArgument naming both; an empty layout or a
  // layout with match/any specs: kInvalidArgument.
  ShardMap(const Layout& layout, const Shape& global_shape);

  const Layout& layout() const { return layout_; }
  const Shape& global_shape() const { return global_shape_; }
  // The block of the device at mesh `offset` (0..mesh.size()-1; single-device mesh: 0).
  const ShardBlock& block(int64_t offset) const;
  int64_t num_devices() const { return static_cast<int64_t>(blocks_.size()); }
  // The distinct blocks in shard order, each with the offsets of the devices holding it.
  struct Replicas {
    ShardBlock block;
    std::vector<int64_t> device_offsets;
  };
  std::vector<Replicas> distinct_blocks() const;

  // A grid (rank 1, 2) or table (rank 0, >= 3) of blocks with global device ids; Partial dims
  // are listed under the drawing.
  std::string visualize() const;

 private:
  Layout layout_;
  Shape global_shape_;
  std::vector<ShardBlock> blocks_;  // one per device offset
};

// ShardMap(layout, global_shape).visualize().
std::string visualize(const Layout& layout, const Shape& global_shape);

}  // namespace tessel
