// Internal: the seam between op dispatch (src/dtensor/framework/op_dispatch.cpp, pack.cpp) and tracing
// (trace.h, compile.h). Dispatch sees only this interface: while a tracer is active on the
// calling thread, call_op hands it the call (after shape inference and the sharding rule) instead
// of running kernels, and pack / unpack refuse to run (BR-74-05: eager only). The replay of a
// compiled graph calls launch_op (launch_plan.h) directly with a plan per node made once,
// skipping inference, the sharding rule and the relayout planner.
//
//   // op_dispatch.cpp
//   if (detail::OpTracer* tracer = detail::active_op_tracer()) {
//     detail::TracedCall traced = tracer->record_op(def, inputs, out, decision, attrs);
//     ...
//   }
//
// Thread safety: the active tracer is per thread (thread_local); a tracer is used only by the
// thread that installed it.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "tessel/dtensor/dtensor.h"
#include "tessel/dtensor/op_registry.h"

namespace tessel::detail {

// What a traced op call gives back to dispatch: its inputs in the layouts the sharding rule
// requires (abstract values; relayout nodes recorded where they differ) and its abstract output.
struct TracedCall {
  std::vector<DTensor> ready;
  DTensor result;
};

class OpTracer {
 public:
  virtual ~OpTracer() = default;
  // Records one op call whose output spec and sharding decision dispatch has computed. Errors
  // (kFailedPrecondition, kInvalidArgument) name the op and the offending input.
  virtual TracedCall record_op(const OpDef& def, const std::vector<DTensor>& inputs,
                               const TensorSpec& output, const ShardingDecision& decision,
                               const std::shared_ptr<const OpAttrs>& attrs) = 0;
};

// The tracer recording on this thread, or null (defined in src/replicate/trace.cpp).
OpTracer* active_op_tracer();
// Installs `tracer` on this thread and returns the previous one (null to uninstall).
OpTracer* set_active_op_tracer(OpTracer* tracer);

// kFailedPrecondition from `component`: `call` is eager-only and ran while tracing (or on an
// abstract value outside its trace); `rule` ("BR-74-05") is quoted when given.
[[noreturn]] void throw_eager_only(std::string_view component, std::string_view call,
                                   std::string_view rule = {});

}  // namespace tessel::detail
