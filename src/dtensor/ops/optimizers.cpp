// SGD and Adam written with the SPMD ops, so every update runs on the parameter's own shards.
#include "tessel/dtensor/optimizers.h"

#include <algorithm>
#include <cmath>

#include "core/errors.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/ops.h"

namespace tessel {
namespace {
constexpr std::string_view kComponent = "Optimizer";
}  // namespace

Optimizer::Optimizer(double learning_rate) : learning_rate_(learning_rate) {}

void Optimizer::set_learning_rate(double learning_rate) {
  if (!(learning_rate >= 0) || !std::isfinite(learning_rate)) {
    detail::throw_invalid(kComponent, "learning_rate must be a finite number >= 0, got {}",
                          learning_rate);
  }
  learning_rate_ = learning_rate;
}

void Optimizer::apply(std::vector<DTensor>& params, const std::vector<DTensor>& grads) {
  if (params.size() != grads.size()) {
    detail::throw_invalid(kComponent, "{} parameters but {} gradients", params.size(), grads.size());
  }
  if (iterations_ == 0) {
    for (const DTensor& p : params) shapes_.push_back(p.shape());
    init_state(params);
    note_state_runtimes();
  } else if (params.size() != shapes_.size()) {
    detail::throw_invalid(kComponent, "the optimizer holds state for {} parameters, got {}",
                          shapes_.size(), params.size());
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (!(params[i].shape() == shapes_[i]) || !(grads[i].shape() == params[i].shape()) ||
        grads[i].layout() != params[i].layout()) {
      detail::throw_invalid(kComponent,
                            "parameter {} is {} in {}, its gradient {} in {} (state: {})", i,
                            params[i].shape().to_string(), params[i].layout().to_string(),
                            grads[i].shape().to_string(), grads[i].layout().to_string(),
                            shapes_[i].to_string());
    }
  }
  // The state lives on the first list's runtime; the ops would refuse to mix runtimes.
  for (size_t i = 0; i < state_runtimes_.size(); ++i) {
    if (&params[i].runtime() != state_runtimes_[i]) {
      detail::throw_invalid(kComponent,
                            "parameter {} lives on another runtime than the optimizer's state: "
                            "the state belongs to the first parameter list; use a new optimizer, "
                            "or restore() one, for parameters of another runtime",
                            i);
    }
  }
  ++iterations_;
  for (size_t i = 0; i < params.size(); ++i) update(i, params[i], grads[i]);
}

void Optimizer::note_state_runtimes() {
  state_runtimes_.clear();
  const auto state = slots();
  if (state.empty()) return;  // no state (SGD without momentum): nothing to mix
  for (const DTensor& t : state.begin()->second) state_runtimes_.push_back(&t.runtime());
}

void Optimizer::restore(int64_t iterations, const std::vector<DTensor>& params,
                        const std::map<std::string, std::vector<DTensor>>& slots) {
  if (iterations < 0) detail::throw_invalid(kComponent, "restore: iterations {} < 0", iterations);
  std::vector<std::string> expected = iterations == 0 ? std::vector<std::string>{} : slot_names();
  std::vector<std::string> given;
  for (const auto& [name, tensors] : slots) given.push_back(name);
  std::sort(expected.begin(), expected.end());
  if (given != expected) {
    detail::throw_invalid(kComponent, "restore after {} iterations: slots [{}], expected [{}]",
                          iterations, fmt::join(given, ", "), fmt::join(expected, ", "));
  }
  for (const auto& [name, tensors] : slots) {
    if (tensors.size() != params.size()) {
      detail::throw_invalid(kComponent, "restore: slot '{}' has {} tensors for {} parameters", name,
                            tensors.size(), params.size());
    }
    for (size_t i = 0; i < params.size(); ++i) {
      if (!(tensors[i].shape() == params[i].shape()) || tensors[i].layout() != params[i].layout()) {
        detail::throw_invalid(kComponent,
                              "restore: slot '{}' tensor {} is {} in {}; parameter {} in {}", name,
                              i, tensors[i].shape().to_string(), tensors[i].layout().to_string(),
                              params[i].shape().to_string(), params[i].layout().to_string());
      }
    }
  }
  iterations_ = iterations;
  shapes_.clear();
  if (iterations == 0) return;  // the next apply() starts afresh
  for (const DTensor& p : params) shapes_.push_back(p.shape());
  set_slots(slots);
  note_state_runtimes();
}

SGD::SGD(double learning_rate, double momentum, bool nesterov)
    : Optimizer(learning_rate), momentum_(momentum), nesterov_(nesterov) {
  if (learning_rate < 0 || momentum < 0 || momentum > 1) {
    detail::throw_invalid("SGD", "learning_rate {} must be >= 0 and momentum {} in [0, 1]",
                          learning_rate, momentum);
  }
}

std::map<std::string, std::vector<DTensor>> SGD::slots() const {
  if (velocity_.empty()) return {};
  return {{"velocity", velocity_}};
}

std::vector<std::string> SGD::slot_names() const {
  return momentum_ == 0 ? std::vector<std::string>{} : std::vector<std::string>{"velocity"};
}

void SGD::set_slots(const std::map<std::string, std::vector<DTensor>>& slots) {
  velocity_ = momentum_ == 0 ? std::vector<DTensor>{} : slots.at("velocity");
}

void SGD::init_state(const std::vector<DTensor>& params) {
  if (momentum_ == 0) return;
  for (const DTensor& p : params) velocity_.push_back(zeros_like(p));
}

void SGD::update(size_t index, DTensor& param, const DTensor& grad) {
  if (momentum_ == 0) {
    param = subtract(param, multiply(grad, learning_rate()));
    return;
  }
  DTensor& v = velocity_[index];
  v = subtract(multiply(v, momentum_), multiply(grad, learning_rate()));
  param = nesterov_ ? subtract(add(param, multiply(v, momentum_)), multiply(grad, learning_rate()))
                    : add(param, v);
}

Adam::Adam(double learning_rate, double beta_1, double beta_2, double epsilon)
    : Optimizer(learning_rate), beta_1_(beta_1), beta_2_(beta_2), epsilon_(epsilon) {
  if (learning_rate < 0 || beta_1 < 0 || beta_1 >= 1 || beta_2 < 0 || beta_2 >= 1 || epsilon <= 0) {
    detail::throw_invalid("Adam",
                          "learning_rate {} >= 0, beta_1 {} and beta_2 {} in [0, 1), epsilon {} > 0 "
                          "required",
                          learning_rate, beta_1, beta_2, epsilon);
  }
}

std::map<std::string, std::vector<DTensor>> Adam::slots() const {
  if (m_.empty()) return {};
  return {{"m", m_}, {"v", v_}};
}

std::vector<std::string> Adam::slot_names() const { return {"m", "v"}; }

void Adam::set_slots(const std::map<std::string, std::vector<DTensor>>& slots) {
  m_ = slots.at("m");
  v_ = slots.at("v");
}

void Adam::init_state(const std::vector<DTensor>& params) {
  for (const DTensor& p : params) {
    m_.push_back(zeros_like(p));
    v_.push_back(zeros_like(p));
  }
}

void Adam::update(size_t index, DTensor& param, const DTensor& grad) {
  const double t = static_cast<double>(iterations());
  const double lr_t =
      learning_rate() * std::sqrt(1 - std::pow(beta_2_, t)) / (1 - std::pow(beta_1_, t));
  adam_step(index, param, grad, lr_t, epsilon_);
}

void Adam::adam_step(size_t index, DTensor& param, const DTensor& grad, double lr_t,
                     double epsilon, double decay) {
  DTensor& m = m_[index];
  DTensor& v = v_[index];
  // Three one-pass kernels (ops_optimizer.cpp) instead of ten elementwise ops.
  OpAttrs beta1, beta2, step;
  beta1.beta = beta_1_;
  beta2.beta = beta_2_;
  step.learning_rate = lr_t;
  step.epsilon = epsilon;
  step.scale = decay;
  m = call_op("ema", {m, grad}, beta1);
  v = call_op("ema_square", {v, grad}, beta2);
  param = call_op("adam_apply", {param, m, v}, step);
}

AdamW::AdamW(double learning_rate, double beta_1, double beta_2, double epsilon,
             double weight_decay)
    : Adam(learning_rate, beta_1, beta_2, epsilon), weight_decay_(weight_decay) {
  if (!(weight_decay >= 0) || !std::isfinite(weight_decay)) {
    detail::throw_invalid("AdamW", "weight_decay must be a finite number >= 0, got {}",
                          weight_decay);
  }
}

void AdamW::set_decay_mask(std::vector<bool> decays) { decays_ = std::move(decays); }

void AdamW::update(size_t index, DTensor& param, const DTensor& grad) {
  if (!decays_.empty() && decays_.size() != m_.size()) {
    detail::throw_invalid("AdamW", "the decay mask has {} flags for {} parameters", decays_.size(),
                          m_.size());
  }
  const bool decays = decays_.empty() ? param.rank() >= 2 : decays_[index];
  // torch's arithmetic: p * (1 - lr * wd), then lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t)
  // + eps), i.e. Adam's step with epsilon scaled by sqrt(1 - b2^t), in the same pass.
  const double t = static_cast<double>(iterations());
  const double correction2 = std::sqrt(1 - std::pow(beta_2_, t));
  adam_step(index, param, grad, learning_rate() * correction2 / (1 - std::pow(beta_1_, t)),
            epsilon_ * correction2, decays ? 1 - learning_rate() * weight_decay_ : 1.0);
}

std::pair<std::vector<DTensor>, DTensor> clip_by_global_norm(std::vector<DTensor> grads,
                                                            double clip_norm) {
  if (!(clip_norm > 0) || !std::isfinite(clip_norm)) {
    detail::throw_invalid("clip_by_global_norm", "clip_norm must be a finite number > 0, got {}",
                          clip_norm);
  }
  DTensor total;
  for (const DTensor& g : grads) {
    if (!g.defined()) continue;
    const DTensor squares = reduce_sum(multiply(g, g));  // Partial over g's sharded dims
    total = total.defined() ? add(total, squares) : squares;
  }
  if (!total.defined()) {
    detail::throw_invalid("clip_by_global_norm", "none of the {} gradients is defined",
                          grads.size());
  }
  const DTensor norm = sqrt(total);  // the one reduction of the pending sums
  // clip_norm / max(norm, clip_norm), replicated: 1 while the norm is within the bound.
  const DTensor bound = fill(Shape{}, clip_norm, norm.layout(), norm.dtype(), &norm.runtime());
  const DTensor scale = divide(bound, maximum(norm, bound));
  // Each clipped gradient replaces its source at once: a gradient the caller gave up (moved in)
  // is freed as soon as its copy exists, so the step never holds every gradient twice.
  for (DTensor& g : grads) {
    if (g.defined()) g = multiply(g, scale);
  }
  return {std::move(grads), norm};
}

double WarmupCosineDecay::operator()(int64_t step) const {
  if (step < warmup_steps) {
    return peak * static_cast<double>(step + 1) / static_cast<double>(warmup_steps + 1);
  }
  if (step > decay_steps) return minimum;
  const double ratio = static_cast<double>(step - warmup_steps) /
                       static_cast<double>(std::max<int64_t>(decay_steps - warmup_steps, 1));
  return minimum + 0.5 * (1 + std::cos(M_PI * ratio)) * (peak - minimum);
}

}  // namespace tessel
