#include "train_loop.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "tessel/checkpoint/checkpoint_manager.h"
#include "tessel/core/error.h"
#include "tessel/core/median.h"

namespace tessel::train {
namespace {

constexpr int kCheckpointsKept = 3;
constexpr int64_t kLogLineEvery = 50;  // steps between progress lines when not redrawing
constexpr int kBarWidth = 24;
constexpr const char* kClearLine = "\r\033[K";

[[noreturn]] void bad_option(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, "train", message);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// "[=====      ] step   120/2000 loss 2.1234 lr 9.87e-04   51234 tok/s ETA   37 s"
std::string progress_line(const StepReport& r, int64_t total, double tokens_per_step,
                          double elapsed) {
  const int filled = static_cast<int>(kBarWidth * (r.step + 1) / std::max<int64_t>(total, 1));
  const double eta =
      elapsed / static_cast<double>(r.step + 1) * static_cast<double>(total - r.step - 1);
  return fmt::format("[{}{}] step {:>5}/{} loss {:.4f} lr {:.2e} {:>7.0f} tok/s ETA {:>4.0f} s",
                     std::string(static_cast<size_t>(filled), '='),
                     std::string(static_cast<size_t>(kBarWidth - filled), ' '), r.step + 1, total,
                     r.loss, r.learning_rate, tokens_per_step / r.seconds, eta);
}

}  // namespace

double TrainHistory::median_step_seconds() const {
  if (steps.empty()) return 0.0;
  std::vector<double> seconds;
  for (const StepReport& r : steps) seconds.push_back(r.seconds);
  return median(std::move(seconds));
}

double TrainHistory::tokens_per_second() const { return tokens_per_step / median_step_seconds(); }

std::string TrainHistory::summary() const {
  const double val = evaluations.empty() ? 0.0 : evaluations.back().val_loss;
  return fmt::format(
      "trained {} steps in {:.1f} s (median step {:.1f} ms, {:.0f} tokens/s); "
      "final val loss {:.4f}",
      total_steps, train_seconds, median_step_seconds() * 1e3, tokens_per_second(), val);
}

void write_metrics_csv(std::ostream& out, const TrainHistory& history) {
  out << "kind,step,loss,lr,grad_norm,step_seconds,val_loss\n";
  for (const StepReport& r : history.steps) {
    out << fmt::format("train,{},{:.6f},{:.6g},{:.6f},{:.6f},\n", r.step, r.loss, r.learning_rate,
                       r.grad_norm, r.seconds);
  }
  for (const Evaluation& e : history.evaluations) {
    out << fmt::format("eval,{},{:.6f},,,,{:.6f}\n", e.step, e.train_loss, e.val_loss);
  }
}

TrainLoop::TrainLoop(TrainOptions options) : options_(std::move(options)) {
  const TrainOptions& o = options_;
  if (o.steps < 1) bad_option(fmt::format("steps must be >= 1, got {}", o.steps));
  if (o.eval_interval < 1) {
    bad_option(fmt::format("eval_interval must be >= 1, got {}", o.eval_interval));
  }
  if (o.checkpoint_every < 0) {
    bad_option(fmt::format("checkpoint_every must be >= 0, got {}", o.checkpoint_every));
  }
  if ((o.checkpoint_every > 0 || o.resume) && o.checkpoint_dir.empty()) {
    bad_option("checkpoint_every and resume need a checkpoint directory");
  }
}

TrainHistory TrainLoop::run(Trainable& model) const {
  const TrainOptions& o = options_;
  std::ostream* progress = o.progress;
  const char* clear = o.redraw ? kClearLine : "";
  TrainHistory history{.total_steps = o.steps, .tokens_per_step = o.tokens_per_step};
  const auto evaluate = [&](int64_t step) {
    const SplitLosses losses = model.evaluate();
    history.evaluations.push_back({step, losses.train, losses.val});
    if (progress != nullptr) {
      *progress << clear
                << fmt::format("step {:>5}: train loss {:.4f}, val loss {:.4f}\n", step,
                               losses.train, losses.val)
                << std::flush;
    }
  };
  std::optional<checkpoint::CheckpointManager> checkpoints;
  if (!o.checkpoint_dir.empty()) {
    checkpoints.emplace(o.checkpoint_dir, checkpoint::CheckpointManagerOptions{
                                              .max_to_keep = kCheckpointsKept, .save = {}});
  }
  if (o.resume) {
    if (const std::optional<int64_t> latest = checkpoints->latest_step()) {
      const std::string directory = checkpoints->step_directory(*latest);
      model.restore(directory);
      if (progress != nullptr) {
        *progress << fmt::format("resumed from step {} ({})\n", *latest, directory);
      }
    }
  }
  const auto start = std::chrono::steady_clock::now();
  for (int64_t s = model.next_step(); s < o.steps; ++s) {
    if (s % o.eval_interval == 0 && s > 0) evaluate(s);
    history.steps.push_back(take_step(model));
    if (o.checkpoint_every > 0 && (s + 1) % o.checkpoint_every == 0) {
      checkpoints->save(s + 1, model.state(), o.async_checkpoint);
    }
    const bool line_due = (s + 1) % kLogLineEvery == 0 || s + 1 == o.steps;
    if (progress != nullptr && (o.redraw || line_due)) {
      *progress << clear
                << progress_line(history.steps.back(), o.steps, o.tokens_per_step,
                                 seconds_since(start))
                << (o.redraw ? "" : "\n") << std::flush;
    }
  }
  if (checkpoints) checkpoints->close();  // the last asynchronous save committed (or thrown)
  history.train_seconds = seconds_since(start);
  if (progress != nullptr && o.redraw) *progress << "\n";
  evaluate(o.steps);
  return history;
}

}  // namespace tessel::train
