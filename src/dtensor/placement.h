// Internal: where a layout puts a tensor of a given shape on this process — the runtime's device
// of each local device, its mesh offset and its block — computed once per (runtime, layout,
// shape) and kept in a small per-thread cache, because every op call and every DTensor needs it
// and building it (device-name parsing, a ShardMap of the whole mesh) costs more than a tiny op.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "tessel/core/box.h"
#include "tessel/core/shape.h"
#include "tessel/mesh/layout.h"
#include "tessel/runtime/device.h"
#include "tessel/runtime/runtime.h"

namespace tessel::detail {

struct Placement {
  std::vector<Device*> devices;  // per local device, mesh.local_devices() order
  std::vector<int64_t> offsets;  // mesh offsets
  std::vector<Box> blocks;       // each local device's block of the global tensor
};

// Errors as check_tensor_layout / resolve_local_devices / ShardMap, from `component`.
std::shared_ptr<const Placement> placement(const Layout& layout, const Shape& shape,
                                           Runtime& runtime, std::string_view component);

}  // namespace tessel::detail
