// Box: a rectangular block of a global row-major array (offsets and extents per dimension),
// the unit in which shards are described and moved.
//
//   Box a{{0, 4}, {4, 6}};             // rows [0,4), columns [4,10)
//   Box b{{2, 0}, {4, 8}};             // rows [2,6), columns [0,8)
//   intersect(a, b) == Box{{2, 4}, {2, 4}}
//   copy_box(src, src_origin, dst, dst_origin, region): copies `region` (global coordinates)
//   from `src`, which holds the block starting at src_origin, into `dst`, which holds the block
//   starting at dst_origin.
//
// Thread safety: value type and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/core/tensor.h"

namespace tessel {

struct Box {
  std::vector<int64_t> offsets;  // first index per dimension
  std::vector<int64_t> extents;  // length per dimension (0: empty)

  int rank() const { return static_cast<int>(offsets.size()); }
  int64_t num_elements() const;  // product of extents (1 for rank 0)
  bool empty() const { return num_elements() == 0; }
  // True when `other` lies inside this box (an empty box lies inside every box of its rank).
  bool contains(const Box& other) const;
  std::string to_string() const;  // "[0:4, 4:10]"
  friend bool operator==(const Box&, const Box&) = default;
};

// The common part of two boxes of equal rank (extents 0 where they do not meet); ranks differ:
// kInvalidArgument.
Box intersect(const Box& a, const Box& b);

// Copies `region` from `src` (contiguous, holding the block that starts at `src_origin`) into
// `dst` (contiguous, holding the block that starts at `dst_origin`). Both must hold all of
// `region` and share a dtype (kInvalidArgument naming the boxes otherwise). Whole contiguous
// runs are copied with memcpy. Both in one device's memory: strided copies on the device
// (DeviceMemoryOps::copy_rows; on a GPU cudaMemcpy2D); in different memories (a device's and the
// host's, or two devices'): through host copies of the blocks.
void copy_box(const Tensor& src, const std::vector<int64_t>& src_origin, Tensor& dst,
              const std::vector<int64_t>& dst_origin, const Box& region);

// copy_box over raw row-major buffers of `item_size`-byte elements: `src` holds `src_block`,
// `dst` holds `dst_block` (e.g. a memory-mapped file's bytes). Unchecked: the caller ensures
// that both blocks contain `region` and that the buffers hold their blocks.
void copy_box_bytes(const void* src, const Box& src_block, void* dst, const Box& dst_block,
                    const Box& region, size_t item_size);

}  // namespace tessel
