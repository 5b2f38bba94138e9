// Trainable: what a model's trainer gives the training loop (train_loop.h), whatever the model.
//
//   class GptTrainer : public train::Trainable { ... };   // examples/gpt/gpt_trainer.h
//   StepReport r = train::take_step(trainer);             // one checked update
//
// A step is computed first and applied second (PendingStep), so that take_step can refuse an
// update whose loss or gradient norm is not finite: kFailedPrecondition from the trainable's
// name(), naming the step, the values and the learning rate, with the parameters untouched
// (training on NaN would only print NaN from then on). A step skipped by dynamic loss scaling
// (StepReport::skipped) has a non-finite norm by design and passes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "tessel/checkpoint/checkpoint.h"

namespace tessel::train {

struct StepReport {
  int64_t step = 0;  // the step's number, from 0
  double loss = 0;
  double learning_rate = 0;
  double grad_norm = 0;  // before clipping
  double seconds = 0;    // wall time of the step, including the loss's transfer to the host
  // Dynamic loss scaling (loss_scale.h): the scale the step's gradients were computed at (0:
  // none), and whether its update was skipped for gradients that overflowed at that scale (the
  // step still counts; grad_norm is then not finite).
  double loss_scale = 0;
  bool skipped = false;
};

// A step whose loss and gradients are computed but whose update is not applied yet.
struct PendingStep {
  StepReport report;            // step, loss, learning_rate, grad_norm (seconds: take_step's)
  std::function<void()> apply;  // applies the update and advances next_step()
};

// The mean losses of an evaluation, on the training and the validation split.
struct SplitLosses {
  double train = 0;
  double val = 0;
};

class Trainable {
 public:
  virtual ~Trainable() = default;

  // The component of the errors take_step throws ("gpt").
  virtual std::string_view name() const = 0;
  // The step the next compute_step() computes: 0 at the start, the saved one after restore().
  virtual int64_t next_step() const = 0;
  // Loss, gradients and learning rate of step next_step(), the update left to PendingStep::apply.
  virtual PendingStep compute_step() = 0;
  // The mean losses on fixed evaluation batches (no dropout); the parameters are unchanged.
  virtual SplitLosses evaluate() = 0;
  // Everything a resumed run needs, for checkpoint::save (docs/checkpoints.md).
  virtual checkpoint::State state() const = 0;
  // Continues from a checkpoint of state() in `directory` (saved on any mesh).
  virtual void restore(const std::string& directory) = 0;
};

// One step of `model`: compute_step(), the finiteness check, apply; the report with its wall
// time. A non-finite loss or gradient norm: kFailedPrecondition (see above), nothing applied.
StepReport take_step(Trainable& model);

}  // namespace tessel::train
