// SGD and Adam written with the SPMD ops, so every update runs on the parameter's own shards.
#include "tessel/dtensor/optimizers.h"

#include <cmath>

#include "core/errors.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/ops.h"

namespace tessel {
namespace {
constexpr std::string_view kComponent = "Optimizer";
}  // namespace

void Optimizer::apply(std::vector<DTensor>& params, const std::vector<DTensor>& grads) {
  if (params.size() != grads.size()) {
    detail::throw_invalid(kComponent, "{} parameters but {} gradients", params.size(), grads.size());
  }
  if (iterations_ == 0) {
    for (const DTensor& p : params) shapes_.push_back(p.shape());
    init_state(params);
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
  ++iterations_;
  for (size_t i = 0; i < params.size(); ++i) update(i, params[i], grads[i]);
}

SGD::SGD(double learning_rate, double momentum, bool nesterov)
    : learning_rate_(learning_rate), momentum_(momentum), nesterov_(nesterov) {
  if (learning_rate < 0 || momentum < 0 || momentum > 1) {
    detail::throw_invalid("SGD", "learning_rate {} must be >= 0 and momentum {} in [0, 1]",
                          learning_rate, momentum);
  }
}

void SGD::init_state(const std::vector<DTensor>& params) {
  if (momentum_ == 0) return;
  for (const DTensor& p : params) velocity_.push_back(zeros_like(p));
}

void SGD::update(size_t index, DTensor& param, const DTensor& grad) {
  if (momentum_ == 0) {
    param = subtract(param, multiply(grad, learning_rate_));
    return;
  }
  DTensor& v = velocity_[index];
  v = subtract(multiply(v, momentum_), multiply(grad, learning_rate_));
  param = nesterov_ ? subtract(add(param, multiply(v, momentum_)), multiply(grad, learning_rate_))
                    : add(param, v);
}

Adam::Adam(double learning_rate, double beta_1, double beta_2, double epsilon)
    : learning_rate_(learning_rate), beta_1_(beta_1), beta_2_(beta_2), epsilon_(epsilon) {
  if (learning_rate < 0 || beta_1 < 0 || beta_1 >= 1 || beta_2 < 0 || beta_2 >= 1 || epsilon <= 0) {
    detail::throw_invalid("Adam",
                          "learning_rate {} >= 0, beta_1 {} and beta_2 {} in [0, 1), epsilon {} > 0 "
                          "required",
                          learning_rate, beta_1, beta_2, epsilon);
  }
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
      learning_rate_ * std::sqrt(1 - std::pow(beta_2_, t)) / (1 - std::pow(beta_1_, t));
  DTensor& m = m_[index];
  DTensor& v = v_[index];
  // Three one-pass kernels (ops_optimizer.cpp) instead of ten elementwise ops.
  OpAttrs beta1, beta2, step;
  beta1.beta = beta_1_;
  beta2.beta = beta_2_;
  step.learning_rate = lr_t;
  step.epsilon = epsilon_;
  m = call_op("ema", {m, grad}, beta1);
  v = call_op("ema_square", {v, grad}, beta2);
  param = call_op("adam_apply", {param, m, v}, step);
}

}  // namespace tessel
