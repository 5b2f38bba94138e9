// call_op: infer, shard, relayout the inputs, enqueue the kernels, record on the tape (see
// op_registry.h).
#include <atomic>
#include <iostream>
#include <memory>
#include <mutex>
#include <set>

#include "core/errors.h"
#include "dtensor/dtensor_internal.h"
#include "dtensor/kernel_runner.h"
#include "dtensor/placement.h"
#include "dtensor/trace_hooks.h"  // tracing hook: record calls instead of running them
#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/mesh/shard_map.h"

namespace tessel {
namespace {

std::atomic<bool> g_replicate_fallback{false};

// Calls whose local blocks hold at most this many elements in all (inputs and outputs, every
// local device) run inline: a few microseconds of work at most.
constexpr int64_t kInlineElements = 16384;

std::string layouts_text(const std::vector<TensorSpec>& inputs) {
  std::string text;
  for (size_t i = 0; i < inputs.size(); ++i) {
    text += fmt::format("{}input {}: {} {} in {}", i == 0 ? "" : "; ", i,
                        inputs[i].shape.to_string(), dtype_name(inputs[i].dtype),
                        inputs[i].layout.to_string());
  }
  return text;
}

// Every input replicated (Partial reduced), the output replicated.
ShardingDecision replicate_everything(const std::vector<TensorSpec>& inputs,
                                      const TensorSpec& output, const Mesh& mesh) {
  ShardingDecision d;
  for (const TensorSpec& in : inputs) d.inputs.push_back(Layout::replicated(mesh, in.shape.rank()));
  d.output = Layout::replicated(mesh, output.shape.rank());
  return d;
}

void warn_fallback_once(const std::string& op, const std::vector<TensorSpec>& inputs) {
  static std::mutex mu;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mu);
  if (!warned.insert(op).second) return;
  int64_t bytes = 0;
  for (const TensorSpec& in : inputs) {
    bytes += plan_relayout(in.shape, in.layout, Layout::replicated(in.layout.mesh(), in.shape.rank()),
                           in.dtype)
                 .bytes_total();
  }
  std::cerr << fmt::format(
      "tessel: warning: op '{}' has no sharding rule for {}; replicating its inputs ({} bytes "
      "moved this call)\n",
      op, layouts_text(inputs), bytes);
}

const Mesh& mesh_of(const std::vector<TensorSpec>& inputs, const OpAttrs& attrs,
                    std::string_view op) {
  if (!inputs.empty()) return inputs[0].layout.mesh();
  if (!attrs.layout) detail::throw_invalid(op, "a creation op needs a layout");
  return attrs.layout->mesh();
}

ShardingDecision decide(const OpDef& def, const std::vector<TensorSpec>& inputs,
                        const TensorSpec& output, const OpAttrs& attrs) {
  try {
    ShardingDecision d = def.shard(inputs, output, attrs);
    if (d.inputs.size() != inputs.size()) {
      detail::throw_error(ErrorCode::kInternal, def.name,
                          "sharding rule returned {} input layouts for {} inputs", d.inputs.size(),
                          inputs.size());
    }
    return d;
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kUnimplemented) throw;
    if (!replicate_fallback()) {
      detail::throw_error(ErrorCode::kUnimplemented, def.name,
                          "no sharding rule for {} ({}); set_replicate_fallback(true) replicates "
                          "the inputs instead",
                          layouts_text(inputs), e.message());
    }
    warn_fallback_once(def.name, inputs);
    return replicate_everything(inputs, output, mesh_of(inputs, attrs, def.name));
  }
}

}  // namespace

void set_replicate_fallback(bool enabled) { g_replicate_fallback = enabled; }
bool replicate_fallback() { return g_replicate_fallback; }

ShardingDecision plan_op(std::string_view name, const std::vector<TensorSpec>& inputs,
                         const OpAttrs& attrs) {
  const OpDef& def = OpRegistry::global().get(name);
  return decide(def, inputs, def.infer(inputs, attrs), attrs);
}

// The kernel half of call_op, shared with the replay of compiled graphs (trace_hooks.h).
DTensor detail::launch_op(const OpDef& def, const std::vector<DTensor>& ready,
                          const TensorSpec& out, const std::shared_ptr<const Layout>& layout,
                          const std::shared_ptr<const OpAttrs>& attrs, Runtime& runtime,
                          const Placement& out_place,
                          const std::vector<std::shared_ptr<const Placement>>& in_places,
                          bool inline_when_idle) {
  const OpDef* op = &def;
  const size_t n = out_place.devices.size();
  // A call touching few elements runs on this thread where the device is idle: waking the
  // device's worker would cost more than the kernel (tessel bench dispatch). So does every call
  // of a one-device replay (inline_when_idle), whose caller would only wait for the worker.
  int64_t elements = 0;
  for (size_t i = 0; i < n; ++i) {
    elements += out_place.blocks[i].num_elements();
    for (const auto& p : in_places) elements += p->blocks[i].num_elements();
  }
  const bool small = inline_when_idle || elements <= kInlineElements;
  std::vector<Tensor> outputs;
  outputs.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const Box& block = out_place.blocks[i];
    Device* device = out_place.devices[i];
    Tensor output = device->allocate(Shape(block.extents), out.dtype, /*zero_fill=*/false);
    outputs.push_back(output);
    LocalContext context;
    context.output_block = block;
    context.output_shape = out.shape;
    context.mesh_offset = out_place.offsets[i];
    context.cuda_stream = device->cuda_stream();
    std::vector<Tensor> local;
    local.reserve(ready.size());
    for (size_t k = 0; k < ready.size(); ++k) {
      context.input_blocks.push_back(in_places[k]->blocks[i]);
      context.input_shapes.push_back(ready[k].shape());
      local.push_back(ready[k].component(static_cast<int>(i)));
    }
    if (small) {
      context.output_layout = layout.get();
      const auto run = [&] { detail::run_kernel(*op, local, output, *attrs, context); };
      if (device->stream().run_inline_if_idle(def.name, run)) continue;
    }
    device->stream().enqueue(def.name, [op, local = std::move(local), output, attrs, layout,
                                        context = std::move(context)]() mutable {
      context.output_layout = layout.get();
      detail::run_kernel(*op, local, output, *attrs, context);
    });
  }
  return DTensor(*layout, out.shape, out.dtype, std::move(outputs), runtime);
}

DTensor call_op(std::string_view name, const std::vector<DTensor>& inputs, const OpAttrs& attrs) {
  const OpDef& def = OpRegistry::global().get(name);
  if (static_cast<int>(inputs.size()) != def.num_inputs) {
    detail::throw_invalid(def.name, "takes {} inputs, got {}", def.num_inputs, inputs.size());
  }
  detail::OpTracer* tracer = detail::active_op_tracer();  // tracing hook (trace_hooks.h)
  std::vector<TensorSpec> specs;
  specs.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) detail::throw_invalid(def.name, "input {} is a null DTensor", i);
    if (inputs[i].layout().mesh() != inputs[0].layout().mesh()) {
      detail::throw_invalid(def.name, "inputs 0 and {} are on different meshes ({} and {})", i,
                            inputs[0].layout().mesh().to_string(),
                            inputs[i].layout().mesh().to_string());
    }
    // The kernels run on the first input's devices: an input of another runtime (a second
    // Runtime with the same device names) would be read there behind its own runtime's back.
    if (&inputs[i].runtime() != &inputs[0].runtime()) {
      detail::throw_invalid(def.name,
                            "inputs 0 and {} belong to different runtimes (both on mesh {}); "
                            "copy one to the other's runtime first",
                            i, inputs[0].layout().mesh().to_string());
    }
    // Tracing hook: an abstract value (compile.h) runs only inside its trace.
    if (inputs[i].is_abstract() && tracer == nullptr) {
      detail::throw_error(ErrorCode::kFailedPrecondition, def.name,
                          "input {} is an abstract DTensor (a value traced by compile()) used "
                          "outside its trace: it has no data",
                          i);
    }
    specs.push_back({inputs[i].shape(), inputs[i].dtype(), inputs[i].layout()});
  }
  const TensorSpec out = def.infer(specs, attrs);
  const ShardingDecision decision = decide(def, specs, out, attrs);
  auto shared_attrs = std::make_shared<const OpAttrs>(attrs);

  std::vector<DTensor> ready;
  DTensor result;
  if (tracer != nullptr) {
    // Tracing hook: record the call (and the relayouts it needs) instead of running it.
    detail::TracedCall traced = tracer->record_op(def, inputs, out, decision, shared_attrs);
    ready = std::move(traced.ready);
    result = std::move(traced.result);
  } else {
    ready.reserve(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      ready.push_back(inputs[i].layout() == decision.inputs[i]
                          ? inputs[i]
                          : detail::relayout_untracked(inputs[i], decision.inputs[i]));
    }
    Runtime& runtime = !inputs.empty() ? inputs[0].runtime()
                                       : (attrs.runtime ? *attrs.runtime : Runtime::global());
    const auto out_place = detail::placement(decision.output, out.shape, runtime, def.name);
    std::vector<std::shared_ptr<const detail::Placement>> in_places;
    in_places.reserve(ready.size());
    for (const DTensor& in : ready) {
      in_places.push_back(detail::placement(in.layout(), in.shape(), runtime, def.name));
    }
    result = detail::launch_op(def, ready, out, std::make_shared<const Layout>(decision.output),
                               shared_attrs, runtime, *out_place, in_places);
  }
  for (GradientTape* tape : GradientTape::active()) {
    tape->record(def, inputs, ready, result, shared_attrs);
  }
  return result;
}

}  // namespace tessel
