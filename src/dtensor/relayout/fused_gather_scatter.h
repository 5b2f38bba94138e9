// Internal: relayout_batch's fused all-gathers and reduce-scatters. Many tensors whose plans are
// one all_gather (or one reduce_scatter) over the same mesh dimensions and dtype move in ONE
// collective per bucket: each device packs its parts of every member into one flat buffer, the
// collective runs once on it, and each device unpacks its blocks. Fully sharded parameters
// (fsdp) gather a transformer block's weights this way and reduce-scatter their gradients the
// same way: one rendezvous of the group per block instead of one per parameter.
//
// Which plans fuse is decided from layouts and shapes alone, so every process of a mesh makes the
// same buckets (the same collectives). Uneven shards are fused as they are: the buffers hold each
// device's own block sizes (all_gather and reduce_scatter take per-rank sizes), nothing is padded.
#pragma once

#include <cstddef>
#include <vector>

#include "dtensor/dtensor_internal.h"
#include "runtime/launch.h"
#include "tessel/dtensor/dtensor.h"
#include "tessel/dtensor/relayout_plan.h"

namespace tessel::detail {

// Whether `plan` (of a tensor of `shape`) is one all_gather that a fused gather can run: host
// devices, no Partial, and every device's target block exactly the union of its group's source
// blocks.
bool fusable_gather(const RelayoutPlan& plan, const Shape& shape);
// Whether `plan` is one reduce_scatter that a fused reduce-scatter can run: host devices, Partial
// over exactly the step's mesh dimensions, every member of a group holding the same source block
// and every target block inside it.
bool fusable_reduce_scatter(const RelayoutPlan& plan, const Shape& shape);

// Runs the plans of tensors[members] (all fusable_gather, or all fusable_reduce_scatter, with the
// same mesh, mesh dimensions and dtype) as one collective, writing out[member].
void gather_fused(const std::vector<DTensor>& tensors, const std::vector<size_t>& members,
                  const std::vector<RelayoutPlan>& plans, const CallDeadline& deadline,
                  std::vector<DTensor>& out);
void reduce_scatter_fused(const std::vector<DTensor>& tensors, const std::vector<size_t>& members,
                          const std::vector<RelayoutPlan>& plans, const CallDeadline& deadline,
                          std::vector<DTensor>& out);

}  // namespace tessel::detail
