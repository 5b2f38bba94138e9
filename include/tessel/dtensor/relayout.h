// relayout: runs a RelayoutPlan (relayout_plan.h) on a DTensor's devices.
//
//   DTensor cols = relayout(rows, Layout({"unsharded", "x"}, mesh));  // one all_to_all
//   DTensor like = relayout_like(grad, input);                       // grad in input's layout
//
// Each step runs on every device's stream at once, each device with its communicator for its
// group of the step's mesh dimensions; the steps' temporaries are allocated from the devices, so
// memory_stats() shows them, and are released when the step ends. The result shares no storage
// with the input unless the plan is empty (same layout: the input is returned as is).
//
// Errors: those of plan_relayout (kInvalidArgument); a null DTensor: kInvalidArgument; a step
// that fails, or a device that does not join before the call's `timeout` (one budget for all
// the steps) runs out: the error names the step, the
// device and the root cause (kDeadlineExceeded names the late device); nothing hangs. After a
// failure the runtime's relayout groups are rebuilt on the next call.
//
// Thread safety: one relayout at a time per runtime from one controller thread, like TF's eager
// ops (concurrent relayouts on disjoint devices are fine).
#pragma once

#include <chrono>
#include <optional>

#include "tessel/core/tensor.h"
#include "tessel/dtensor/dtensor.h"
#include "tessel/dtensor/relayout_plan.h"
#include "tessel/mesh/layout.h"

namespace tessel {

// The timeout of the relayouts this thread runs without one of their own (RelayoutOptions{}: the
// relayouts inside ops, gradient tapes and relayout_batch): 60 s, or what the innermost
// RelayoutTimeoutScope of this thread says.
std::chrono::milliseconds default_relayout_timeout();
// The timeout of this thread's innermost RelayoutTimeoutScope; nullopt outside any.
std::optional<std::chrono::milliseconds> scoped_relayout_timeout();

// Sets default_relayout_timeout() on this thread while it lives; closing it restores the value
// it found (scopes nest). A pipeline stage bounds the collectives inside its forward and backward
// passes by its transfers' deadline this way. Inside a scope an op launch that waits for room on
// a device's stream (dispatch runs a few kernels ahead of each device) waits as long too, then
// throws kDeadlineExceeded naming the device and the kernel it is running: a device whose
// kernel does not end within the scope's timeout is stalled, as a peer that does not join a
// collective is (outside any scope the launch waits 60 s, then enqueues anyway). A timeout <= 0:
// kInvalidArgument.
//
//   RelayoutTimeoutScope scope(std::chrono::milliseconds(500));
//   DTensor y = matmul(x, w);  // a Partial reduced inside: DeadlineExceeded after 500 ms
class RelayoutTimeoutScope {
 public:
  explicit RelayoutTimeoutScope(std::chrono::milliseconds timeout);
  ~RelayoutTimeoutScope();
  RelayoutTimeoutScope(const RelayoutTimeoutScope&) = delete;
  RelayoutTimeoutScope& operator=(const RelayoutTimeoutScope&) = delete;

 private:
  std::chrono::milliseconds previous_;
};

struct RelayoutOptions {
  // For the whole call: every step (and the communicator groups it sets up) shares this budget,
  // so a relayout of several steps ends within `timeout` (+10%, + 50 ms), not steps x timeout.
  std::chrono::milliseconds timeout = default_relayout_timeout();
};

DTensor relayout(const DTensor& tensor, const Layout& layout, const RelayoutOptions& options);
// relayout.h's form with default options (declared in dtensor_api.h for call_with_layout).
DTensor relayout(const DTensor& tensor, const Layout& layout);
// A host tensor: copy_to_mesh (TF's eager relayout of a non-DTensor value).
DTensor relayout(const Tensor& tensor, const Layout& layout, Runtime& runtime = Runtime::global());
// `tensor` in `like`'s layout, mesh included (TF's RelayoutLike: like's shape and dtype do not
// matter).
DTensor relayout_like(const DTensor& tensor, const DTensor& like,
                      const RelayoutOptions& options = {});
// Collectives relayouts have run in this process (steps that communicate; a fused bucket of
// relayout_batch counts once) and the bytes their plans send between devices: for reports such
// as the demo's "collectives per step". `seconds` sums, over every device, the wall time of its
// calls into those collectives (waiting for its peers included, as NCCL's timings count it):
// divided by the devices, the time a device spends in relayout collectives.
struct RelayoutStats {
  int64_t collectives = 0;
  int64_t bytes = 0;
  double seconds = 0;
};
RelayoutStats relayout_stats();

// Runs an already made plan (its `from` must be the tensor's layout and shape: kInvalidArgument
// otherwise).
DTensor execute_relayout(const DTensor& tensor, const RelayoutPlan& plan,
                         const RelayoutOptions& options = {});

}  // namespace tessel
