// call_op: infer, shard, relayout the inputs, enqueue the kernels, record on the tape (see
// op_registry.h).
#include <atomic>
#include <iostream>
#include <memory>
#include <mutex>
#include <set>

#include "core/errors.h"
#include "dtensor/framework/dispatch_cache.h"
#include "dtensor/dtensor_internal.h"
#include "dtensor/framework/launch_plan.h"
#include "dtensor/framework/trace_hooks.h"  // tracing hook: record calls instead of running them
#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/mesh/shard_map.h"

namespace tessel {
namespace {

std::atomic<bool> g_replicate_fallback{false};

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

// The rule's decision, or (kUnimplemented with the fallback on) replicate_everything, which sets
// *fallback when given.
ShardingDecision decide(const OpDef& def, const std::vector<TensorSpec>& inputs,
                        const TensorSpec& output, const OpAttrs& attrs, bool* fallback = nullptr) {
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
    if (fallback != nullptr) *fallback = true;
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

namespace {

std::vector<TensorSpec> specs_of(const std::vector<DTensor>& tensors) {
  std::vector<TensorSpec> specs;
  specs.reserve(tensors.size());
  for (const DTensor& t : tensors) specs.push_back({t.shape(), t.dtype(), t.layout()});
  return specs;
}

// Checks the inputs of a call of `def` (kInvalidArgument / kFailedPrecondition naming the op).
void check_inputs(const OpDef& def, const std::vector<DTensor>& inputs, bool tracing) {
  if (static_cast<int>(inputs.size()) != def.num_inputs) {
    detail::throw_invalid(def.name, "takes {} inputs, got {}", def.num_inputs, inputs.size());
  }
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
    if (inputs[i].is_abstract() && !tracing) {
      detail::throw_error(ErrorCode::kFailedPrecondition, def.name,
                          "input {} is an abstract DTensor (a value traced by compile()) used "
                          "outside its trace: it has no data",
                          i);
    }
  }
}

// `inputs` relaid out to `layouts` where they differ; `inputs` itself (no copy) when none does.
const std::vector<DTensor>& relaid_out(const std::vector<DTensor>& inputs,
                                       const std::vector<Layout>& layouts,
                                       std::vector<DTensor>& storage) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].layout() == layouts[i]) continue;
    if (storage.empty()) storage = inputs;
    storage[i] = detail::relayout_untracked(inputs[i], layouts[i]);
  }
  return storage.empty() ? inputs : storage;
}

// Whose devices a call runs on, as the cache tells runtimes apart: the inputs' runtime, else a
// creation op's attrs.runtime, else 0 for Runtime::global() (made once, never replaced, and not
// made here: a call that fails its shape inference does not start it).
uint64_t runtime_id_of(const std::vector<DTensor>& inputs, const OpAttrs& attrs) {
  if (!inputs.empty()) return inputs[0].runtime().id();
  return attrs.runtime != nullptr ? attrs.runtime->id() : 0;
}

Runtime& runtime_of(const std::vector<DTensor>& inputs, const OpAttrs& attrs) {
  if (!inputs.empty()) return inputs[0].runtime();
  return attrs.runtime != nullptr ? *attrs.runtime : Runtime::global();
}

// Runs a call eagerly: its plan from this thread's cache (dispatch_cache.h), else inferred,
// sharded and planned here (and kept unless it took the replicate fallback); the inputs relaid
// out as the plan asks; the kernels launched. `ready` receives the inputs as the kernels read
// them.
DTensor run_eagerly(const OpDef& def, const std::vector<DTensor>& inputs,
                    const detail::CallAttrs& call_attrs,
                    std::vector<DTensor>& ready_storage, const std::vector<DTensor>*& ready) {
  const OpAttrs& attrs = call_attrs.get();
  const uint64_t runtime_id = runtime_id_of(inputs, attrs);
  const size_t key = detail::call_key(def, inputs, attrs, runtime_id);
  std::shared_ptr<const detail::PlannedCall> planned =
      detail::find_planned_call(key, def, inputs, attrs, runtime_id);
  if (planned != nullptr) {
    ready = &relaid_out(inputs, planned->input_layouts, ready_storage);
    return detail::launch_op(planned->launch, *ready, call_attrs, runtime_of(inputs, attrs));
  }
  std::vector<TensorSpec> specs = specs_of(inputs);
  const TensorSpec out = def.infer(specs, attrs);
  bool fallback = false;
  ShardingDecision decision = decide(def, specs, out, attrs, &fallback);
  ready = &relaid_out(inputs, decision.inputs, ready_storage);
  Runtime& runtime = runtime_of(inputs, attrs);
  auto call = std::make_shared<detail::PlannedCall>();
  call->launch = detail::make_launch_plan(def, {out.shape, out.dtype, decision.output},
                                          specs_of(*ready), runtime, def.name);
  call->def = &def;
  call->runtime_id = runtime_id;
  call->attrs = attrs;
  call->inputs = std::move(specs);
  call->input_layouts = std::move(decision.inputs);
  if (!fallback) detail::remember_planned_call(key, call);
  return detail::launch_op(call->launch, *ready, call_attrs, runtime);
}

}  // namespace

DTensor call_op(std::string_view name, const std::vector<DTensor>& inputs, const OpAttrs& attrs) {
  const OpDef& def = OpRegistry::global().get(name);
  detail::OpTracer* tracer = detail::active_op_tracer();  // tracing hook (trace_hooks.h)
  check_inputs(def, inputs, tracer != nullptr);
  const detail::CallAttrs call_attrs(attrs);  // shared only if a task or a tape keeps them
  std::vector<DTensor> ready_storage;
  const std::vector<DTensor>* ready = &ready_storage;
  DTensor result;
  if (tracer != nullptr) {
    // Tracing hook: record the call (and the relayouts it needs) instead of running it.
    const std::vector<TensorSpec> specs = specs_of(inputs);
    const TensorSpec out = def.infer(specs, attrs);
    const ShardingDecision decision = decide(def, specs, out, attrs);
    detail::TracedCall traced = tracer->record_op(def, inputs, out, decision, call_attrs.shared());
    ready_storage = std::move(traced.ready);
    result = std::move(traced.result);
  } else {
    result = run_eagerly(def, inputs, call_attrs, ready_storage, ready);
  }
  for (GradientTape* tape : GradientTape::active()) {
    tape->record(def, inputs, *ready, result, call_attrs.shared());
  }
  return result;
}

}  // namespace tessel
