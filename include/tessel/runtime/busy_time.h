// Busy time per device: how long each device's stream spent running op kernels and
// collectives, as the op launcher (every kernel of a DTensor op, on the stream or inline) and
// comm's group steps (every collective task: relayouts, CrossDeviceOps, embeddings) report it.
// What a device computed in a window is the difference of two readings; the rest of the window
// it was idle, or doing other work (copies between layouts, allocation). The pipeline's measured
// bubble reads it (docs/pipeline.md).
//
//   const BusyTime before = busy_time(runtime.device(0));
//   ...                                                   // a training step
//   const BusyTime after = busy_time(runtime.device(0));
//   double computing = after.kernel_seconds - before.kernel_seconds;
//
// Times are wall time on the thread that ran the work (a CPU device's thread descheduled while
// a kernel runs counts, as the op profile counts it; a GPU device's kernels count their launch on
// the host, not their run on the GPU). A collective's time includes its wait for late peers.
// Counting costs two clock reads per kernel and collective.
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>

#include "tessel/runtime/device.h"

namespace tessel {

struct BusyTime {
  double kernel_seconds = 0;         // op kernels
  double communication_seconds = 0;  // collectives (waiting for peers included)
  int64_t kernels = 0;
  int64_t collectives = 0;
};

// The device's totals so far (a device made at the address of one destroyed before continues
// its totals: read differences).
BusyTime busy_time(const Device& device);

namespace detail {
// For the op launcher and the group steps: adds one kernel's or one collective's time.
void add_kernel_time(const Device& device, std::chrono::steady_clock::duration time);
void add_communication_time(const Device& device, std::chrono::steady_clock::duration time);
}  // namespace detail

}  // namespace tessel
