#include "trainable.h"

#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "tessel/core/error.h"

namespace tessel::train {

StepReport take_step(Trainable& model) {
  const auto start = std::chrono::steady_clock::now();
  PendingStep pending = model.compute_step();
  StepReport& r = pending.report;
  if (!std::isfinite(r.loss) || (!r.skipped && !std::isfinite(r.grad_norm))) {
    throw Error(ErrorCode::kFailedPrecondition, model.name(),
                fmt::format("step {}: the loss is {} and the gradient norm {} (learning rate {}); "
                            "stopped before applying a non-finite update",
                            r.step, r.loss, r.grad_norm, r.learning_rate));
  }
  pending.apply();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace tessel::train
