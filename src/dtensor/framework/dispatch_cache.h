// Internal: call_op's memory of the calls it has planned. What dispatch works out from a call's
// op, attrs, runtime and its inputs' shapes, dtypes and layouts — the inferred output, the
// layouts the sharding rule asks of the inputs, and the launch plan (launch_plan.h) — depends
// on nothing else, so a call that repeats one already planned skips shape inference, the
// sharding rule, the placement lookups and the LocalContexts, and allocates only its outputs.
//
//   const size_t key = call_key(def, inputs, attrs, runtime_id);
//   if (auto hit = find_planned_call(key, def, inputs, attrs, runtime_id)) ...   // reuse it
//   else remember_planned_call(key, std::make_shared<const PlannedCall>(...));
//
// Calls that took the sharding fallback are remembered with what their fallback counts
// (sharding_fallback.h), so that each run of one is counted; call_op plans such a call again when
// strict mode has come on since (which fails it). Calls that failed are not remembered. Attrs
// match by ==: -0.0 equals 0.0 there, which no shape inference or sharding rule tells apart (the
// kernel gets the call's own attrs). Bounded: 1024 slots per thread, a call's key picking its
// slot and a new call replacing the one in it.
//
// Thread safety: one cache per thread (call_op runs on each controller thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "dtensor/framework/launch_plan.h"
#include "dtensor/framework/sharding_fallback.h"
#include "tessel/dtensor/dtensor.h"
#include "tessel/dtensor/op_registry.h"

namespace tessel::detail {

struct PlannedCall {
  const OpDef* def = nullptr;
  uint64_t runtime_id = 0;  // Runtime::id(), or 0 for Runtime::global()
  OpAttrs attrs;
  std::vector<TensorSpec> inputs;     // the call's inputs, as given
  std::vector<Layout> input_layouts;  // the layouts the sharding rule asks of them
  std::shared_ptr<const LaunchPlan> launch;
  Fallback fallback;  // what a run counts when the rule had no answer
};

// A hash of what a call's plan depends on: the op, the runtime, the inputs' shapes, dtypes and
// layouts, and every attr (OpAttrs::for_each_field), so that calls differing in any of them
// (reductions over other axes, slices elsewhere) tend to land in different slots.
size_t call_key(const OpDef& def, const std::vector<DTensor>& inputs, const OpAttrs& attrs,
                uint64_t runtime_id);

// This thread's plan of an equal call (same op, runtime and attrs, inputs of the same shapes,
// dtypes and layouts), or null.
std::shared_ptr<const PlannedCall> find_planned_call(size_t key, const OpDef& def,
                                                     const std::vector<DTensor>& inputs,
                                                     const OpAttrs& attrs, uint64_t runtime_id);

// Keeps `call` (made for a call whose call_key was `key`) for this thread's later calls.
void remember_planned_call(size_t key, std::shared_ptr<const PlannedCall> call);

}  // namespace tessel::detail
