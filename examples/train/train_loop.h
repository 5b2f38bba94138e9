// TrainLoop: the training run around a Trainable (trainable.h), the same for every model:
// resume from the newest checkpoint, steps with evaluations every eval_interval steps and at the
// end, checkpoints every checkpoint_every steps, progress output. `tessel train gpt` runs it.
//
//   train::TrainOptions options{.steps = 2000, .eval_interval = 250, .tokens_per_step = 768};
//   options.checkpoint_dir = "runs/gpt";  options.checkpoint_every = 100;  options.resume = true;
//   options.progress = &std::cout;
//   const train::TrainHistory history = train::TrainLoop(options).run(trainer);
//   train::write_metrics_csv(file, history);
//   std::cout << history.summary() << "\n";
//
// A run:
// - resume: the newest checkpoint in checkpoint_dir (CheckpointManager::latest_step), restored
//   by the trainable on its own layouts; none there: it starts afresh. "resumed from step N
//   (directory)" goes to the progress output.
// - steps next_step() .. steps - 1 through take_step (a non-finite loss or gradient norm stops
//   the run, its error thrown); before step s, an evaluation when s is a positive multiple of
//   eval_interval; after step s, a checkpoint of step s + 1 when s + 1 is a multiple of
//   checkpoint_every (asynchronous with async_checkpoint: the step waits only for a copy; the
//   last save is committed before the final evaluation). The newest 3 are kept.
// - the final evaluation, labelled `steps`.
// Several processes: every process runs the loop (the steps and evaluations are collective);
// only the one given a progress stream prints.
// Progress output: each evaluation as "step N: train loss X, val loss Y"; on a terminal
// (redraw) a bar redrawn after every step, else one line every 50 steps and after the last.
//
// Errors: options out of range (steps < 1, eval_interval < 1, checkpoint_every < 0, resume or
// checkpoint_every without checkpoint_dir): kInvalidArgument from "train" naming the value;
// the rest from the trainable and checkpoint::CheckpointManager.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "trainable.h"

namespace tessel::train {

struct TrainOptions {
  int64_t steps = 0;           // the run ends before this step (a resumed run too)
  int64_t eval_interval = 0;   // evaluations before every step that is a multiple, and at the end
  double tokens_per_step = 0;  // for the tokens per second of the progress and the summary
  std::string checkpoint_dir = "";  // "": no checkpoints
  int64_t checkpoint_every = 0;     // 0: never
  bool async_checkpoint = false;
  bool resume = false;               // from the newest checkpoint in checkpoint_dir
  std::ostream* progress = nullptr;  // nullptr: no progress output
  bool redraw = false;               // the progress is a terminal: one line, redrawn
};

struct Evaluation {
  int64_t step = 0;  // evaluated before this step
  double train_loss = 0;
  double val_loss = 0;
};

// What a run did.
struct TrainHistory {
  int64_t total_steps = 0;     // TrainOptions::steps
  double tokens_per_step = 0;  // TrainOptions::tokens_per_step
  // The steps this run took (a resumed run: from the resumed one).
  std::vector<StepReport> steps = {};
  std::vector<Evaluation> evaluations = {};  // in order; the last one after the last step
  double train_seconds = 0;  // the steps, evaluations and checkpoints, not the final evaluation

  // The median step's wall time (tessel::median: the mean of the middle two of an even count);
  // 0 when no step ran.
  double median_step_seconds() const;
  // tokens_per_step / median_step_seconds() (infinite when no step ran).
  double tokens_per_second() const;
  // "trained N steps in X s (median step Y ms, Z tokens/s); final val loss L".
  std::string summary() const;
};

// The metrics CSV: the header "kind,step,loss,lr,grad_norm,step_seconds,val_loss", a "train"
// row per step ("train,step,loss,lr,grad_norm,step_seconds,"), then an "eval" row per evaluation
// ("eval,step,train_loss,,,,val_loss").
void write_metrics_csv(std::ostream& out, const TrainHistory& history);

class TrainLoop {
 public:
  // Options out of range: kInvalidArgument (above).
  explicit TrainLoop(TrainOptions options);

  const TrainOptions& options() const { return options_; }
  TrainHistory run(Trainable& model) const;

 private:
  TrainOptions options_;
};

}  // namespace tessel::train
