// DynamicLossScale: the loss scale of f16 mixed precision, as PyTorch's GradScaler and
// TensorFlow's LossScaleOptimizer keep it. f16 holds magnitudes from 6e-8 (subnormal) to 65504,
// so the small gradients of a mean loss flush to zero on their way back through f16 matmuls:
// the loss is multiplied by the scale before the backward pass and the gradients divided by it
// after. A step whose scaled gradients are not finite is skipped and the scale halves; after
// growth_interval finite steps in a row it doubles. It never goes below 1 (TF's floor): a step
// that overflows at scale 1 is a divergence, not an f16 range problem, and the trainer stops on
// it as on any non-finite gradient (trainable.h).
//
//   train::DynamicLossScale scale;                        // 65536, x2 every 2000 good steps
//   DTensor scaled = multiply(loss, scale.scale());
//   ... gradients of `scaled`, their global norm ...
//   if (scale.update(std::isfinite(norm))) apply(gradients / scale_before);  // else skipped
//
// Thread safety: none (one per trainer).
#pragma once

#include <cstdint>

namespace tessel::train {

class DynamicLossScale {
 public:
  struct Options {
    double initial = 65536.0;        // PyTorch's init_scale 2^16
    double growth_factor = 2.0;      // > 1
    double backoff_factor = 0.5;     // in (0, 1)
    int64_t growth_interval = 2000;  // finite steps in a row before the scale grows (>= 1)
  };

  // Out-of-range options: kInvalidArgument from "loss scale" naming the value.
  explicit DynamicLossScale(Options options);
  DynamicLossScale() : DynamicLossScale(Options{}) {}

  double scale() const { return scale_; }
  int64_t good_steps() const { return good_steps_; }  // finite steps since the last change
  int64_t skipped_steps() const { return skipped_; }  // steps skipped so far

  // After a step whose gradients were computed at scale(): true when they were finite (apply
  // the update); false when they were not and the scale was above 1 (skip it; the scale backs
  // off). Not finite at scale 1: false too, the scale stays, and the caller reports the step's
  // non-finite gradient instead of skipping it.
  bool update(bool finite);
  // True when update(false) now would skip the step (scale() > 1).
  bool can_back_off() const { return scale_ > 1.0; }

  // A resumed run's state (checkpoints): kInvalidArgument for a scale < 1 or not finite, or
  // good_steps < 0.
  void restore(double scale, int64_t good_steps);

 private:
  Options options_;
  double scale_;
  int64_t good_steps_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace tessel::train
