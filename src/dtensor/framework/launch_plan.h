// Internal: the kernel half of an op call. A LaunchPlan is everything about a call that does not
// depend on its input data — the op, its output spec, where the output and input blocks lie on
// the local devices, and each device's LocalContext — made once and then shared: by every eager
// call that repeats it (dispatch_cache.h) and by every replay of a compiled graph's op node
// (src/replicate/trace_replay.h). launch_op runs a plan on inputs already in the layouts the
// plan was made for, allocating only the output blocks.
//
//   auto plan = make_launch_plan(def, out, {spec_a, spec_b}, runtime, def.name);
//   DTensor y = launch_op(plan, {a, b}, attrs, runtime);   // as often as the call repeats
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "dtensor/placement.h"
#include "tessel/dtensor/dtensor.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/runtime/runtime.h"

namespace tessel::detail {

struct LaunchPlan {
  LaunchPlan() = default;
  // contexts[i].output_layout points into the plan itself: never copied or moved.
  LaunchPlan(const LaunchPlan&) = delete;
  LaunchPlan& operator=(const LaunchPlan&) = delete;

  const OpDef* def = nullptr;
  TensorSpec out;                                           // the global output and its layout
  std::shared_ptr<const Placement> out_place;               // placement(out.layout, out.shape)
  std::vector<std::shared_ptr<const Placement>> in_places;  // each input's placement
  std::vector<Shape> out_blocks;                            // per local device: its block's shape
  std::vector<LocalContext> contexts;                       // per local device
  bool tiny = false;  // the blocks (inputs and outputs, every device) hold few elements in all
};

// An op call's attrs, copied into shared ownership only when something keeps them past the
// call (a kernel task left on a stream, a tape): a kernel run inline reads the caller's.
class CallAttrs {
 public:
  explicit CallAttrs(const OpAttrs& attrs) : attrs_(&attrs) {}
  explicit CallAttrs(std::shared_ptr<const OpAttrs> shared)
      : attrs_(shared.get()), shared_(std::move(shared)) {}

  const OpAttrs& get() const { return *attrs_; }
  // The attrs in shared ownership: copied on the first call.
  const std::shared_ptr<const OpAttrs>& shared() const {
    if (shared_ == nullptr) shared_ = std::make_shared<const OpAttrs>(*attrs_);
    return shared_;
  }

 private:
  const OpAttrs* attrs_;
  mutable std::shared_ptr<const OpAttrs> shared_;
};

// The plan of op `def` writing `out` from inputs with the specs `inputs` (the layouts its kernel
// reads them in) on `runtime`'s devices. Errors: placement()'s, from `component`.
std::shared_ptr<const LaunchPlan> make_launch_plan(const OpDef& def, TensorSpec out,
                                                   const std::vector<TensorSpec>& inputs,
                                                   Runtime& runtime, std::string_view component);

// Allocates the output blocks on their devices and runs the plan's kernel on every local device
// (waiting, before each, until the device's stream holds fewer than 4 kernels not yet finished:
// queued kernels hold their tensors, so running further ahead would hold memory the program has
// let go of):
// on the calling thread when the device's stream is idle and the plan is tiny (or
// `inline_when_idle`: a one-device replay, whose caller would only wait for the worker), else
// enqueued on the stream (the task keeps the plan and `attrs.shared()`). `ready` are the inputs,
// in the plan's input layouts.
DTensor launch_op(const std::shared_ptr<const LaunchPlan>& plan, const std::vector<DTensor>& ready,
                  const CallAttrs& attrs, Runtime& runtime, bool inline_when_idle = false);

}  // namespace tessel::detail
