// Internal: which regions must move, from whom to whom, for participants to go from their blocks
// under one layout to their blocks under another (the arithmetic behind every block-moving
// relayout step).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tessel/core/dtype.h"
#include "tessel/core/shape.h"
#include "tessel/dtensor/relayout_plan.h"
#include "tessel/mesh/layout.h"

namespace tessel::detail {

// A participant's block; nullopt: it holds nothing (outside that mesh).
using MaybeBox = std::optional<Box>;

// Per mesh offset, the block ShardMap(layout, shape) gives it.
std::vector<Box> blocks_of(const Layout& layout, const Shape& shape);

// The device names of a mesh by offset (global devices, or the local ones of a single-client
// mesh); kUnimplemented when the mesh does not name every device.
std::vector<std::string> mesh_device_names(const Mesh& mesh);

// Transfers taking every participant p from before[p] to after[p], each region from a holder in
// p's group (group[p]): p itself when it holds the region, else the holders of that block in
// turn (spreading the sends). nullopt when some participant's after-block is not covered by its
// group's before-blocks (the step cannot be done inside the groups).
std::optional<std::vector<RelayoutTransfer>> block_transfers(const std::vector<MaybeBox>& before,
                                                             const std::vector<MaybeBox>& after,
                                                             const std::vector<int>& group);

// The most bytes any participant sends to another one.
int64_t max_bytes_sent(const std::vector<RelayoutTransfer>& transfers, int participants,
                       DType dtype);
// Bytes sent between participants, summed.
int64_t total_bytes_sent(const std::vector<RelayoutTransfer>& transfers, DType dtype);
// The largest block of `blocks`, in bytes.
int64_t max_block_bytes(const std::vector<MaybeBox>& blocks, DType dtype);

}  // namespace tessel::detail
