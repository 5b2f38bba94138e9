#include "language_model_trainer.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "tessel/core/error.h"
#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/op_profile.h"
#include "tessel/dtensor/ops.h"
#include "memory_plan.h"

namespace tessel::gpt {
namespace {

double scalar_of(const DTensor& t) { return host_value(t).to_doubles().at(0); }

}  // namespace

namespace {

// The model's parameters, after check_memory_plan: a device memory limit that cannot hold the
// training state (with one layer gathered, under fsdp) is refused before anything is allocated.
// A trainer that places the parameters itself (`init`: the pipeline's stages) is not planned:
// the plan reads the model's layouts, which do not say which stage holds a layer.
std::vector<DTensor> init_within_memory_limits(const LanguageModel& model, uint64_t seed,
                                               const std::string& name,
                                               const LanguageModelTrainer::ParameterInit& init) {
  if (init) return init(model, seed);
  check_memory_plan(plan_memory(model, 0), name);
  return model.init(seed);
}

}  // namespace

LanguageModelTrainer::LanguageModelTrainer(std::string name, CharDataset data,
                                           const train::TrainingConfig& training,
                                           const ModelFactory& make_model, Runtime* runtime,
                                           const ParameterInit& init)
    : name_(std::move(name)),
      data_(std::move(data)),
      training_(training),
      model_(make_model(data_.vocab_size())),
      runtime_(runtime != nullptr ? runtime : &Runtime::global()),
      params_(init_within_memory_limits(*model_, training_.seed, name_, init)),
      optimizer_(training_.learning_rate, training_.beta1, training_.beta2, 1e-8,
                 training_.weight_decay),
      schedule_{training_.learning_rate, training_.min_lr, training_.warmup_iters,
                training_.lr_decay_iters} {
  if (training_.loss_scale > 0) {
    loss_scale_.emplace(train::DynamicLossScale::Options{
        .initial = training_.loss_scale,
        .growth_interval = training_.loss_scale_growth_interval});
  }
}

StepReport LanguageModelTrainer::step() { return train::take_step(*this); }

train::PendingStep LanguageModelTrainer::compute_step() {
  const train::TrainingConfig& c = training_;
  StepReport r;
  r.step = step_;
  r.learning_rate = schedule_(step_);
  optimizer_.set_learning_rate(r.learning_rate);
  auto [idx_host, targets_host] =
      data_.batch(Split::kTrain, step_, c.batch_size, model_->block_size(), c.seed);
  const ForwardOptions options{.training = true,
                               .dropout_seed = c.seed * 7919 + static_cast<uint64_t>(step_)};
  r.loss_scale = loss_scale_ ? loss_scale_->scale() : 0;
  BatchGradients g = batch_gradients(idx_host, targets_host, options);
  r.loss = g.loss;
  r.grad_norm = g.norm;
  if (loss_scale_) {
    // Overflow at a scale above 1: skip the update and back off. At scale 1 the non-finite norm
    // stays in the report, and take_step stops on it.
    const bool finite = std::isfinite(g.norm);
    r.skipped = !finite && loss_scale_->can_back_off();
    loss_scale_->update(finite);
  }
  return {r, [this, skipped = r.skipped, clipped = std::move(g.clipped)] {
            const ProfilePhase optimizer("optimizer");
            if (!skipped) optimizer_.apply(params_, clipped);
            ++step_;
          }};
}

LanguageModelTrainer::BatchGradients LanguageModelTrainer::batch_gradients(
    const Tensor& idx_host, const Tensor& targets_host, const ForwardOptions& options) {
  const DTensor idx = model_->tokens(idx_host);
  const DTensor targets = model_->tokens(targets_host);
  // The phases of the op profile (op_profile.h): the forward pass inside the backward one, whose
  // ops are those value_and_grad runs after it.
  std::optional<ProfilePhase> phase(std::in_place, "backward");
  const double scale = loss_scale();
  auto [loss, grads] = value_and_grad(
      [&](const std::vector<DTensor>& p) {
        const ProfilePhase forward("forward");
        const DTensor l = model_->loss(p, idx, targets, options);
        return scale == 1.0 ? l : multiply(l, scale);
      },
      params_);
  phase.emplace("optimizer");
  // Clipping the scaled gradients to the scaled bound, then unscaling them: the clipped unscaled
  // gradients (one more pass over them only when scaled).
  auto [clipped, norm] = clip_by_global_norm(std::move(grads), training_.grad_clip * scale);
  return unscaled(scalar_of(loss) / scale, std::move(clipped), scalar_of(norm), scale);
}

LanguageModelTrainer::BatchGradients LanguageModelTrainer::unscaled(double loss,
                                                                    std::vector<DTensor> clipped,
                                                                    double scaled_norm,
                                                                    double scale) {
  if (scale != 1.0 && std::isfinite(scaled_norm)) {
    for (DTensor& g : clipped) g = multiply(g, 1.0 / scale);
  }
  return {loss, std::move(clipped), scaled_norm / scale};
}

double LanguageModelTrainer::batch_loss(const Tensor& idx, const Tensor& targets) {
  return scalar_of(model_->loss(params_, model_->tokens(idx), model_->tokens(targets)));
}

DTensor LanguageModelTrainer::row_logits(const Tensor& ids) {
  return model_->logits(params_, model_->tokens(ids));
}

checkpoint::State LanguageModelTrainer::state() const {
  const std::vector<std::string>& names = model_->names();
  checkpoint::State state{{"step", step_},
                          {"seed", static_cast<int64_t>(training_.seed)},
                          {"optimizer/iterations", optimizer_.iterations()}};
  if (loss_scale_) {
    state["loss_scale"] = loss_scale_->scale();
    state["loss_scale/good_steps"] = loss_scale_->good_steps();
  }
  for (size_t i = 0; i < names.size(); ++i) state["model/" + names[i]] = params_[i];
  for (const auto& [slot, tensors] : optimizer_.slots()) {
    for (size_t i = 0; i < names.size(); ++i)
      state["optimizer/" + slot + "/" + names[i]] = tensors[i];
  }
  return state;
}

void LanguageModelTrainer::restore(const std::string& directory) {
  const std::vector<std::string>& names = model_->names();
  const checkpoint::CheckpointInfo info = checkpoint::metadata(directory);
  checkpoint::Target target;
  for (size_t i = 0; i < names.size(); ++i) {
    for (const std::string prefix : {"model/", "optimizer/m/", "optimizer/v/"}) {
      if (prefix == "model/" || info.tensors.count(prefix + names[i]) != 0) {
        target[prefix + names[i]] = params_[i].layout();
      }
    }
  }
  const checkpoint::State saved = checkpoint::restore(directory, target, {.runtime = runtime_});
  const int64_t seed = std::get<int64_t>(saved.at("seed"));
  if (seed != static_cast<int64_t>(training_.seed)) {
    throw Error(ErrorCode::kInvalidArgument, name_,
                fmt::format("checkpoint '{}' was trained with seed {}; this run has seed {}",
                            directory, seed, training_.seed));
  }
  std::vector<DTensor> params;
  std::map<std::string, std::vector<DTensor>> slots;
  for (const std::string& name : names) {
    params.push_back(std::get<DTensor>(saved.at("model/" + name)));
    for (const std::string slot : {"m", "v"}) {
      auto it = saved.find("optimizer/" + slot + "/" + name);
      if (it != saved.end()) slots[slot].push_back(std::get<DTensor>(it->second));
    }
  }
  optimizer_.restore(std::get<int64_t>(saved.at("optimizer/iterations")), params, slots);
  // A checkpoint without a loss scale (an f32 or bf16 run) starts this run's at its initial one.
  auto scale = saved.find("loss_scale");
  auto good = saved.find("loss_scale/good_steps");
  if (loss_scale_ && scale != saved.end() && good != saved.end()) {
    loss_scale_->restore(std::get<double>(scale->second), std::get<int64_t>(good->second));
  }
  params_ = std::move(params);
  step_ = std::get<int64_t>(saved.at("step"));
}

double LanguageModelTrainer::estimate_loss(Split split) {
  const ProfilePhase eval("eval");
  const train::TrainingConfig& c = training_;
  double total = 0;
  for (int i = 0; i < c.eval_iters; ++i) {
    auto [idx, targets] = data_.batch(split, -1 - i, c.batch_size, model_->block_size(), c.seed);
    total += batch_loss(idx, targets);
  }
  return total / c.eval_iters;
}

train::SplitLosses LanguageModelTrainer::evaluate() {
  return {estimate_loss(Split::kTrain), estimate_loss(Split::kVal)};
}

std::string LanguageModelTrainer::generate(const std::string& prompt, int count, double temperature,
                                           int top_k, uint64_t seed) {
  if (!(temperature > 0)) {
    throw Error(ErrorCode::kInvalidArgument, name_,
                fmt::format("temperature must be > 0, got {}", temperature));
  }
  std::vector<int32_t> ids = data_.encode(prompt.empty() ? std::string("\n") : prompt);
  std::string out;
  for (int n = 0; n < count; ++n) {
    const int64_t t = std::min<int64_t>(static_cast<int64_t>(ids.size()), model_->block_size());
    const std::vector<int32_t> window(ids.end() - t, ids.end());
    const DTensor logits = row_logits(Tensor::from_vector<int32_t>(window, Shape{1, t}));
    // The last position's logits, sampled where they live: only the drawn id reaches the host.
    const DTensor last = slice(logits, {0, t - 1, 0}, {1, 1, model_->vocab_size()});
    const DTensor next =
        sample_categorical(last, seed * 1000003 + static_cast<uint64_t>(n), temperature, top_k);
    ids.push_back(static_cast<int32_t>(host_value(next).to_doubles().at(0)));
    out += data_.decode({ids.back()});
  }
  return out;
}

}  // namespace tessel::gpt
