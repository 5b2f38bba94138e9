// Internal: launch plans and launch_op (see launch_plan.h).
#include "dtensor/framework/launch_plan.h"

#include <chrono>
#include <optional>
#include <utility>

#include "core/errors.h"
#include "dtensor/framework/kernel_runner.h"
#include "tessel/dtensor/op_profile.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/runtime/busy_time.h"

namespace tessel::detail {
namespace {

// Calls whose local blocks hold at most this many elements in all (inputs and outputs, every
// local device) run inline: a few microseconds of work at most.
constexpr int64_t kInlineElements = 16384;

// One device's kernel, its time counted in the op profile (when on) and in the device's busy
// time (busy_time.h).
void run_counted_kernel(const OpDef& def, const std::vector<Tensor>& inputs, Tensor& output,
                        const OpAttrs& attrs, const LocalContext& context, const Device& device,
                        int phase) {
  const double start = profile_clock();
  const auto begun = std::chrono::steady_clock::now();
  run_kernel(def, inputs, output, attrs, context);
  add_kernel_time(device, std::chrono::steady_clock::now() - begun);
  record_profile(phase, def.name, start);
}

// One device's kernel call with its arguments, run by reference on the calling thread: a
// std::function holding a single reference needs no allocation.
struct InlineKernel {
  const LaunchPlan& plan;
  const std::vector<Tensor>& inputs;
  Tensor& output;
  const OpAttrs& attrs;
  size_t device;
  const Device* on;  // the device whose kernel it is
  int phase;         // op_profile.h
  void operator()() const {
    run_counted_kernel(*plan.def, inputs, output, attrs, plan.contexts[device], *on, phase);
  }
};

constexpr std::string_view kAllocateOutputs = "(allocate outputs)";

// A device's stream holds at most this many op kernels not yet finished: a launch waits for room
// before it enqueues another. A queued kernel holds its input and output blocks, so a controller
// running ahead of a busy device would otherwise keep alive every tensor the program has let go
// of since (a whole forward pass's intermediates: a training step's memory would be its queue's,
// not its activations'). Four keep a device fed: one kernel running, three waiting. Past
// kQueueWait the launch enqueues anyway: the bound is for memory, never for correctness. Inside
// a RelayoutTimeoutScope (a pipeline stage's forward or backward) a stream that makes no room
// within the scope's timeout is a stalled device, named as a collective names a late peer.
constexpr size_t kMaxQueuedKernels = 4;
constexpr std::chrono::seconds kQueueWait{60};

void wait_for_room(Device& device, std::string_view op) {
  const std::optional<std::chrono::milliseconds> scoped = scoped_relayout_timeout();
  const auto deadline = std::chrono::steady_clock::now() +
                        (scoped ? std::chrono::steady_clock::duration(*scoped)
                                : std::chrono::steady_clock::duration(kQueueWait));
  if (device.stream().wait_until_pending_below(kMaxQueuedKernels, deadline) || !scoped) return;
  throw_error(ErrorCode::kDeadlineExceeded, "launch",
              "{} on {}: the device's stream made no room within {} ms (the relayout timeout "
              "of this thread's scope): '{}' has been running since, {} kernels pending; the "
              "device is stalled",
              op, device.name(), scoped->count(), device.stream().current_op(),
              device.stream().pending());
}

// Device i's output block as a view of its first input block (OpDef::output_views_input) or of
// a box of it (OpDef::output_view_offsets), or nullopt when that cannot serve: on another device,
// strided, or another element count.
std::optional<Tensor> view_of_input(const LaunchPlan& p, const std::vector<DTensor>& ready,
                                    size_t i, const Device* device, const OpAttrs& attrs) {
  const DTensor& in = ready.front();
  const int index = static_cast<int>(i);
  if (in.num_components() <= index || &in.device(index) != device) return std::nullopt;
  const Tensor& block = in.component(index);
  if (p.def->output_view_offsets) {
    Tensor box =
        block.block(p.def->output_view_offsets(p.contexts[i], attrs), p.out_blocks[i].dims());
    if (!box.is_contiguous()) return std::nullopt;
    return box;
  }
  if (!block.is_contiguous() || block.num_elements() != p.out_blocks[i].num_elements()) {
    return std::nullopt;
  }
  return block.reshape(p.out_blocks[i]);
}

}  // namespace

// The output DTensor of a launch: its blocks have the plan's dtype and shapes on the plan's
// devices, which is what the DTensor constructor would check.
struct PlannedOutput {
  static DTensor make(const LaunchPlan& plan, std::vector<Tensor> blocks, Runtime& runtime) {
    DTensor out;
    out.data_ = std::make_shared<const DTensor::Data>(DTensor::Data{.layout = plan.out.layout,
                                                                    .shape = plan.out.shape,
                                                                    .dtype = plan.out.dtype,
                                                                    .components = std::move(blocks),
                                                                    .placement = plan.out_place,
                                                                    .runtime = &runtime});
    return out;
  }
};

std::shared_ptr<const LaunchPlan> make_launch_plan(const OpDef& def, TensorSpec out,
                                                   const std::vector<TensorSpec>& inputs,
                                                   Runtime& runtime, std::string_view component) {
  auto plan = std::make_shared<LaunchPlan>();
  plan->def = &def;
  plan->out = std::move(out);
  plan->out_place = placement(plan->out.layout, plan->out.shape, runtime, component);
  plan->in_places.reserve(inputs.size());
  for (const TensorSpec& in : inputs) {
    plan->in_places.push_back(placement(in.layout, in.shape, runtime, component));
  }
  const Placement& out_place = *plan->out_place;
  int64_t elements = 0;
  for (size_t i = 0; i < out_place.devices.size(); ++i) {
    plan->out_blocks.emplace_back(out_place.blocks[i].extents);
    LocalContext context;
    context.output_block = out_place.blocks[i];
    context.output_shape = plan->out.shape;
    context.mesh_offset = out_place.offsets[i];
    context.output_layout = &plan->out.layout;
    context.cuda_stream = out_place.devices[i]->cuda_stream();
    elements += out_place.blocks[i].num_elements();
    for (size_t k = 0; k < inputs.size(); ++k) {
      context.input_blocks.push_back(plan->in_places[k]->blocks[i]);
      context.input_shapes.push_back(inputs[k].shape);
      elements += plan->in_places[k]->blocks[i].num_elements();
    }
    plan->contexts.push_back(std::move(context));
  }
  plan->tiny = elements <= kInlineElements;
  return plan;
}

DTensor launch_op(const std::shared_ptr<const LaunchPlan>& plan, const std::vector<DTensor>& ready,
                  const CallAttrs& attrs, Runtime& runtime, bool inline_when_idle) {
  const LaunchPlan& p = *plan;
  const Placement& out_place = *p.out_place;
  const size_t n = out_place.devices.size();
  // A tiny call runs on this thread where the device is idle: waking the device's worker would
  // cost more than the kernel (tessel bench dispatch). So does every call of a one-device replay
  // (inline_when_idle), whose caller would only wait for the worker.
  const bool on_caller = inline_when_idle || p.tiny;
  const int phase = current_profile_phase();
  std::vector<Tensor> outputs;
  outputs.reserve(n);
  // One device's input blocks, refilled per device: this thread's list, taken for the call (a
  // nested call finds it taken and makes its own) and given back empty with its capacity.
  thread_local std::vector<Tensor> spare_inputs;
  std::vector<Tensor> local = std::move(spare_inputs);
  local.reserve(ready.size());
  for (size_t i = 0; i < n; ++i) {
    Device* device = out_place.devices[i];
    if (p.def->output_views_input || p.def->output_view_offsets) {
      if (std::optional<Tensor> view = view_of_input(p, ready, i, device, attrs.get())) {
        outputs.push_back(std::move(*view));
        continue;
      }
    }
    // Room on the stream first, so that the tensors its kernels held are free before the output
    // is allocated.
    wait_for_room(*device, p.def->name);
    const double allocation = profile_clock();
    outputs.push_back(device->allocate(p.out_blocks[i], p.out.dtype, /*zero_fill=*/false));
    record_profile(phase, kAllocateOutputs, allocation);
    local.clear();
    for (const DTensor& in : ready) local.push_back(in.component(static_cast<int>(i)));
    if (on_caller) {
      const InlineKernel call{p, local, outputs.back(), attrs.get(), i, device, phase};
      if (device->stream().run_inline_if_idle(p.def->name, [&call] { call(); })) continue;
    }
    device->stream().enqueue(
        p.def->name, [plan, i, phase, device, local = std::move(local), output = outputs.back(),
                      shared = attrs.shared()]() mutable {
          run_counted_kernel(*plan->def, local, output, *shared, plan->contexts[i], *device, phase);
        });
    local = std::vector<Tensor>();  // moved into the task
    local.reserve(ready.size());
  }
  local.clear();  // the blocks are not kept alive by the spare list
  spare_inputs = std::move(local);
  return PlannedOutput::make(p, std::move(outputs), runtime);
}

}  // namespace tessel::detail
