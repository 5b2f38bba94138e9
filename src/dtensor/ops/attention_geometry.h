// Internal: what the fused causal attention's kernels (ops_fused_attention.cpp on the CPU,
// cuda/gpu_attention.cpp on GPUs) need to know about a call: the local [B, T, H, D] block's
// extents, where it lies in the global [B, H, T, T] probabilities (for the dropout draws) and the
// attributes.
#pragma once

#include <cstdint>

#include "tessel/core/box.h"
#include "tessel/core/shape.h"
#include "tessel/dtensor/op_registry.h"

namespace tessel::detail {

struct AttentionGeometry {
  int64_t pairs = 0;  // local (b, h) pairs
  int64_t local_heads = 0;
  int64_t first_batch = 0, first_head = 0;  // the block's offsets in the global B and H
  int64_t heads = 0;                        // global H
  int64_t t = 0, d = 0;
  int64_t row_stride = 0;  // elements from one position's row of a head to the next: H_local * D
  double scale = 1.0, rate = 0.0;
  uint64_t seed = 0;

  // Where (pair, position 0) starts in the local block.
  int64_t offset(int64_t pair) const {
    return (pair / local_heads) * t * row_stride + (pair % local_heads) * d;
  }
  // The global flat index of probability (pair, query 0, key 0) in [B, H, T, T].
  uint64_t first_index(int64_t pair) const {
    const int64_t b = first_batch + pair / local_heads;
    const int64_t h = first_head + pair % local_heads;
    return static_cast<uint64_t>((b * heads + h) * t * t);
  }
};

// The geometry of a local block of shape `local` at `block` in the global shape `global`.
inline AttentionGeometry attention_geometry(const Shape& local, const Box& block,
                                            const Shape& global, const OpAttrs& attrs) {
  AttentionGeometry g;
  g.local_heads = local[2];
  g.pairs = local[0] * local[2];
  g.first_batch = block.offsets[0];
  g.first_head = block.offsets[2];
  g.heads = global[2];
  g.t = local[1];
  g.d = local[3];
  g.row_stride = local[2] * local[3];
  g.scale = attrs.scale.value_or(1.0);
  g.rate = attrs.rate.value_or(0.0);
  g.seed = attrs.seed.value_or(0);
  return g;
}

}  // namespace tessel::detail
