// The thread's active op tracer and the eager-only error (see trace_hooks.h). They live in the
// dtensor layer, which dispatch belongs to; the tracer itself is the replicate layer's (trace.h).
#include "dtensor/framework/trace_hooks.h"

#include "core/errors.h"

namespace tessel::detail {
namespace {

thread_local OpTracer* t_active_tracer = nullptr;

}  // namespace

OpTracer* active_op_tracer() { return t_active_tracer; }

OpTracer* set_active_op_tracer(OpTracer* tracer) {
  OpTracer* previous = t_active_tracer;
  t_active_tracer = tracer;
  return previous;
}

void throw_eager_only(std::string_view component, std::string_view call, std::string_view rule) {
  throw_error(ErrorCode::kFailedPrecondition, component,
              "{} is eager-only{}: it was called while compile() traces a computation on this "
              "thread, or on an abstract (traced) value; call it outside the traced function",
              call, rule.empty() ? "" : fmt::format(" ({})", rule));
}

}  // namespace tessel::detail
