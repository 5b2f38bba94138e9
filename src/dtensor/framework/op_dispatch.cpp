// call_op: infer, shard, relayout the inputs, enqueue the kernels, record on the tape (see
// op_registry.h).
#include <memory>

#include "core/errors.h"
#include "dtensor/dtensor_internal.h"
#include "dtensor/framework/dispatch_cache.h"
#include "dtensor/framework/launch_plan.h"
#include "dtensor/framework/sharding_fallback.h"
#include "dtensor/framework/trace_hooks.h"  // tracing hook: record calls instead of running them
#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/dtensor/sharding_fallback.h"
#include "tessel/mesh/shard_map.h"

namespace tessel {

// Deprecated: the fallback is on unless strict mode is (sharding_fallback.h).
void set_replicate_fallback(bool enabled) { set_sharding_fallback_strict(!enabled); }
bool replicate_fallback() { return !sharding_fallback_strict(); }

namespace {

// kInvalidArgument naming the op unless it is given its number of inputs (plan_op and call_op).
void check_arity(const OpDef& def, size_t given) {
  if (static_cast<int>(given) != def.num_inputs) {
    detail::throw_invalid(def.name, "takes {} inputs, got {}", def.num_inputs, given);
  }
}

}  // namespace

ShardingDecision plan_op(std::string_view name, const std::vector<TensorSpec>& inputs,
                         const OpAttrs& attrs) {
  const OpDef& def = OpRegistry::global().get(name);
  check_arity(def, inputs.size());
  return detail::decide_sharding(def, inputs, def.infer(inputs, attrs), attrs);
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
  check_arity(def, inputs.size());
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
                          "outside its trace: it has no data (so is a gradient tape's stand-in "
                          "for a tensor it did not keep: OpDef::saves)",
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
// sharded and planned here, and kept; the inputs relaid out as the plan asks; the kernels
// launched. A call that takes the sharding fallback counts it each time it runs, from the cache
// too, unless strict mode has come on since it was planned: then it is planned again, which
// raises. `ready` receives the inputs as the kernels read them.
DTensor run_eagerly(const OpDef& def, const std::vector<DTensor>& inputs,
                    const detail::CallAttrs& call_attrs, std::vector<DTensor>& ready_storage,
                    const std::vector<DTensor>*& ready) {
  const OpAttrs& attrs = call_attrs.get();
  const uint64_t runtime_id = runtime_id_of(inputs, attrs);
  const size_t key = detail::call_key(def, inputs, attrs, runtime_id);
  std::shared_ptr<const detail::PlannedCall> planned =
      detail::find_planned_call(key, def, inputs, attrs, runtime_id);
  if (planned != nullptr && (!planned->fallback.happened() || !sharding_fallback_strict())) {
    ready = &relaid_out(inputs, planned->input_layouts, ready_storage);
    DTensor out = detail::launch_op(planned->launch, *ready, call_attrs, runtime_of(inputs, attrs));
    if (planned->fallback.happened()) detail::count_fallback(planned->fallback);
    return out;
  }
  std::vector<TensorSpec> specs = specs_of(inputs);
  const TensorSpec out = def.infer(specs, attrs);
  auto call = std::make_shared<detail::PlannedCall>();
  ShardingDecision decision = detail::decide_sharding(def, specs, out, attrs, &call->fallback);
  ready = &relaid_out(inputs, decision.inputs, ready_storage);
  Runtime& runtime = runtime_of(inputs, attrs);
  call->launch = detail::make_launch_plan(def, {out.shape, out.dtype, decision.output},
                                          specs_of(*ready), runtime, def.name);
  call->def = &def;
  call->runtime_id = runtime_id;
  call->attrs = attrs;
  call->inputs = std::move(specs);
  call->input_layouts = std::move(decision.inputs);
  detail::remember_planned_call(key, call);
  DTensor result = detail::launch_op(call->launch, *ready, call_attrs, runtime);
  if (call->fallback.happened()) detail::count_fallback(call->fallback);
  return result;
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
    detail::Fallback fallback;
    const ShardingDecision decision = detail::decide_sharding(def, specs, out, attrs, &fallback);
    detail::TracedCall traced = tracer->record_op(def, inputs, out, decision, call_attrs.shared());
    if (fallback.happened()) detail::count_fallback(fallback);  // once, when traced
    ready_storage = std::move(traced.ready);
    result = std::move(traced.result);
  } else {
    result = run_eagerly(def, inputs, call_attrs, ready_storage, ready);
  }
  if (GradientTape::any()) {
    GradientTape::record_call(def, inputs, *ready, result, call_attrs.shared());
  }
  return result;
}

}  // namespace tessel
