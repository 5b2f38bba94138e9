// recompute_grad: one tape record in place of a function's ops, whose VJP runs the function
// again under a tape of its own (recompute_grad.h).
#include "tessel/dtensor/recompute_grad.h"

#include <memory>
#include <utility>

#include "core/errors.h"
#include "dtensor/framework/tape_suspension.h"
#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/op_registry.h"

namespace tessel {
namespace {

constexpr std::string_view kComponent = "recompute_grad";

DTensor call_checked(const DTensorFunction& fn, const std::vector<DTensor>& inputs) {
  DTensor out = fn(inputs);
  if (!out.defined()) detail::throw_invalid(kComponent, "the function returned a null DTensor");
  return out;
}

// The record's op: its VJP differentiates a fresh run of fn; it keeps the inputs only.
std::shared_ptr<const OpDef> recomputing_op(std::shared_ptr<const DTensorFunction> fn,
                                            size_t num_inputs) {
  auto def = std::make_shared<OpDef>();
  def->name = std::string(kComponent);
  def->num_inputs = static_cast<int>(num_inputs);
  def->saves = VjpSaves{VjpSaves::kAllInputs, /*output=*/false};
  def->vjp = [fn = std::move(fn)](const VjpArgs& a) {
    GradientTape tape;
    for (const DTensor& in : a.inputs) tape.watch(in);
    const DTensor out = call_checked(*fn, a.inputs);
    return tape.gradient_with_pending(out, a.inputs, a.grad);
  };
  return def;
}

}  // namespace

DTensorFunction recompute_grad(DTensorFunction fn) {
  if (!fn) detail::throw_invalid(kComponent, "needs a function, got a null one");
  auto shared = std::make_shared<const DTensorFunction>(std::move(fn));
  return [shared](const std::vector<DTensor>& inputs) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].defined()) detail::throw_invalid(kComponent, "input {} is a null DTensor", i);
    }
    if (!GradientTape::any()) return call_checked(*shared, inputs);
    DTensor out;
    {
      const detail::TapeSuspension forward(&inputs);
      out = call_checked(*shared, inputs);
      if (!forward.suspends_any()) return out;
    }
    for (const DTensor& in : inputs) {
      if (in.id() == out.id()) return out;  // fn returned an input: its gradient is the output's
    }
    const std::shared_ptr<const OpDef> def = recomputing_op(shared, inputs.size());
    GradientTape::record_call(*def, inputs, inputs, out, nullptr, def);
    return out;
  };
}

}  // namespace tessel
