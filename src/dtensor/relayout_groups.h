// Internal: the communicator groups relayout runs its collectives on, one pool per Runtime (a
// group of device threads must not be shared by two runtimes that happen to name their devices
// alike). A failed relayout drops its runtime's pool: an aborted group stays aborted, so the
// next relayout starts from fresh groups.
#pragma once

#include <memory>

#include "tessel/mesh_groups.h"
#include "tessel/runtime.h"

namespace tessel::detail {

std::shared_ptr<CommunicatorPool> relayout_groups(const Runtime& runtime);
void drop_relayout_groups(const Runtime& runtime);
// Counts one collective sending `bytes` in relayout_stats() (relayout.h).
void count_collective(int64_t bytes);
// Tests: the runtime's groups from now on come from `factory` (recording transports).
void set_relayout_group_factory(const Runtime& runtime, CommunicatorPool::GroupFactory factory);

}  // namespace tessel::detail
