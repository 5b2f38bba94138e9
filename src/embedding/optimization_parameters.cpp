// OptimizationParameters: TF's names, TF's proto form (optimization_parameters.proto's field
// numbers) and the range checks of every optimizer's hyper-parameters.
#include <cmath>
#include <iterator>

#include "core/errors.h"
#include "embedding/optimization_proto.h"

namespace tessel {
namespace {

constexpr const char* kComponent = "EmbeddingConfiguration";
constexpr std::string_view kOptimizerNames[] = {
    "sgd",  "adagrad",          "adam",     "momentum",     "rms_prop", "centered_rms_prop",
    "ftrl", "proximal_adagrad", "adadelta", "proximal_yogi"};

// TF's ClippingLimits: an infinite limit is an absent one.
void limits_to_proto(float lower, float upper, proto::ClippingLimitsProto& p) {
  if (std::isfinite(lower)) p.mutable_lower()->set_value(lower);
  if (std::isfinite(upper)) p.mutable_upper()->set_value(upper);
}

void limits_from_proto(const proto::ClippingLimitsProto& p, float& lower, float& upper) {
  if (p.has_lower()) lower = p.lower().value();
  if (p.has_upper()) upper = p.upper().value();
}

// RMSProp and centered RMSProp: the same three fields.
void rms_prop_to_proto(const OptimizationParameters& o, proto::RmsPropParametersProto& p) {
  p.set_rho(o.rho);
  p.set_momentum(o.momentum);
  p.set_epsilon(o.epsilon);
}

void rms_prop_from_proto(const proto::RmsPropParametersProto& p, OptimizationParameters& o) {
  o.rho = p.rho();
  o.momentum = p.momentum();
  o.epsilon = p.epsilon();
}

// proto3 cannot tell 0 from unset: an initial accumulator of 0 means TF's default (0.1).
float initial_accumulator_or_default(float value) { return value != 0 ? value : 0.1f; }

}  // namespace

std::string_view optimizer_name(EmbeddingOptimizer optimizer) {
  const auto i = static_cast<size_t>(optimizer);
  return i < std::size(kOptimizerNames) ? kOptimizerNames[i] : std::string_view("?");
}

namespace detail {

void optimization_to_proto(const OptimizationParameters& o, proto::OptimizationParametersProto& p) {
  if (o.dynamic_learning_rate_tag >= 0) {
    p.mutable_learning_rate()->mutable_dynamic()->set_tag(o.dynamic_learning_rate_tag);
  } else {
    p.mutable_learning_rate()->set_constant(o.learning_rate);
  }
  if (std::isfinite(o.clip_weight_min) || std::isfinite(o.clip_weight_max)) {
    limits_to_proto(o.clip_weight_min, o.clip_weight_max, *p.mutable_clipping_limits());
  }
  if (std::isfinite(o.clip_gradient_min) || std::isfinite(o.clip_gradient_max)) {
    limits_to_proto(o.clip_gradient_min, o.clip_gradient_max,
                    *p.mutable_gradient_clipping_limits());
  }
  p.set_weight_decay_factor(o.weight_decay_factor);
  if (!o.gradient_accumulation) {
    p.set_gradient_accumulation_status(proto::GradientAccumulationStatusProto::DISABLED);
  }
  p.set_multiply_weight_decay_factor_by_learning_rate(
      o.multiply_weight_decay_factor_by_learning_rate);
  switch (o.optimizer) {
    case EmbeddingOptimizer::kSgd:
      p.mutable_stochastic_gradient_descent();
      break;
    case EmbeddingOptimizer::kAdagrad:
      p.mutable_adagrad()->set_initial_accumulator(o.initial_accumulator);
      break;
    case EmbeddingOptimizer::kAdam: {
      auto* a = p.mutable_adam();
      a->set_beta1(o.beta1);
      a->set_beta2(o.beta2);
      a->set_epsilon(o.epsilon);
      a->set_use_sum_inside_sqrt(o.use_sum_inside_sqrt);
      a->set_use_non_lazy_adam(!o.lazy_adam);
      break;
    }
    case EmbeddingOptimizer::kMomentum:
      p.mutable_momentum()->set_momentum(o.momentum);
      p.mutable_momentum()->set_use_nesterov(o.use_nesterov);
      break;
    case EmbeddingOptimizer::kRmsProp:
      rms_prop_to_proto(o, *p.mutable_rms_prop());
      break;
    case EmbeddingOptimizer::kCenteredRmsProp:
      rms_prop_to_proto(o, *p.mutable_centered_rms_prop());
      break;
    case EmbeddingOptimizer::kFtrl: {
      auto* f = p.mutable_ftrl();
      f->set_l1(o.l1_regularization_strength);
      f->set_l2(o.l2_regularization_strength);
      f->set_lr_power(o.learning_rate_power);
      f->set_beta(o.beta);
      f->set_multiply_linear_by_lr(o.multiply_linear_by_learning_rate);
      f->set_initial_accumulator(o.initial_accumulator);
      break;
    }
    case EmbeddingOptimizer::kProximalAdagrad:
      p.mutable_proximal_adagrad()->set_l1(o.l1_regularization_strength);
      p.mutable_proximal_adagrad()->set_l2(o.l2_regularization_strength);
      p.mutable_proximal_adagrad()->set_initial_accumulator(o.initial_accumulator);
      break;
    case EmbeddingOptimizer::kAdadelta:
      p.mutable_adadelta()->set_rho(o.rho);
      p.mutable_adadelta()->set_epsilon(o.epsilon);
      break;
    case EmbeddingOptimizer::kProximalYogi: {
      auto* y = p.mutable_proximal_yogi();
      y->set_l1(o.l1_regularization_strength);
      y->set_l2(o.l2_regularization_strength);
      y->set_beta1(o.beta1);
      y->set_beta2(o.beta2);
      y->set_epsilon(o.epsilon);
      y->set_initial_accumulator(o.initial_accumulator);
      break;
    }
  }
}

OptimizationParameters optimization_from_proto(const proto::OptimizationParametersProto& p,
                                               const std::string& table) {
  OptimizationParameters o;
  o.gradient_accumulation =
      p.gradient_accumulation_status() != proto::GradientAccumulationStatusProto::DISABLED;
  if (p.learning_rate().has_dynamic()) {
    o.dynamic_learning_rate_tag = p.learning_rate().dynamic().tag();
  } else if (p.has_learning_rate()) {
    o.learning_rate = p.learning_rate().constant();
  }
  if (p.has_clipping_limits()) {
    limits_from_proto(p.clipping_limits(), o.clip_weight_min, o.clip_weight_max);
  }
  if (p.has_gradient_clipping_limits()) {
    limits_from_proto(p.gradient_clipping_limits(), o.clip_gradient_min, o.clip_gradient_max);
  }
  o.weight_decay_factor = p.weight_decay_factor();
  o.multiply_weight_decay_factor_by_learning_rate =
      p.multiply_weight_decay_factor_by_learning_rate();
  using P = proto::OptimizationParametersProto;
  switch (p.parameters_case()) {
    case P::kAdagrad:
      o.optimizer = EmbeddingOptimizer::kAdagrad;
      o.initial_accumulator = initial_accumulator_or_default(p.adagrad().initial_accumulator());
      break;
    case P::kAdam:
      o.optimizer = EmbeddingOptimizer::kAdam;
      o.beta1 = p.adam().beta1();
      o.beta2 = p.adam().beta2();
      o.epsilon = p.adam().epsilon();
      o.use_sum_inside_sqrt = p.adam().use_sum_inside_sqrt();
      o.lazy_adam = !p.adam().use_non_lazy_adam();
      break;
    case P::kMomentum:
      o.optimizer = EmbeddingOptimizer::kMomentum;
      o.momentum = p.momentum().momentum();
      o.use_nesterov = p.momentum().use_nesterov();
      break;
    case P::kRmsProp:
      o.optimizer = EmbeddingOptimizer::kRmsProp;
      rms_prop_from_proto(p.rms_prop(), o);
      break;
    case P::kCenteredRmsProp:
      o.optimizer = EmbeddingOptimizer::kCenteredRmsProp;
      rms_prop_from_proto(p.centered_rms_prop(), o);
      break;
    case P::kFtrl:
      o.optimizer = EmbeddingOptimizer::kFtrl;
      o.l1_regularization_strength = p.ftrl().l1();
      o.l2_regularization_strength = p.ftrl().l2();
      o.learning_rate_power = p.ftrl().lr_power();
      o.beta = p.ftrl().beta();
      o.multiply_linear_by_learning_rate = p.ftrl().multiply_linear_by_lr();
      o.initial_accumulator = initial_accumulator_or_default(p.ftrl().initial_accumulator());
      break;
    case P::kProximalAdagrad:
      o.optimizer = EmbeddingOptimizer::kProximalAdagrad;
      o.l1_regularization_strength = p.proximal_adagrad().l1();
      o.l2_regularization_strength = p.proximal_adagrad().l2();
      o.initial_accumulator =
          initial_accumulator_or_default(p.proximal_adagrad().initial_accumulator());
      break;
    case P::kAdadelta:
      o.optimizer = EmbeddingOptimizer::kAdadelta;
      o.rho = p.adadelta().rho();
      o.epsilon = p.adadelta().epsilon();
      break;
    case P::kProximalYogi: {
      const auto& y = p.proximal_yogi();
      o.optimizer = EmbeddingOptimizer::kProximalYogi;
      o.l1_regularization_strength = y.l1();
      o.l2_regularization_strength = y.l2();
      o.beta1 = y.beta1();
      o.beta2 = y.beta2();
      o.epsilon = y.epsilon();
      // 0 (unset): TF's initial_accumulator_value default for ProximalYogi.
      o.initial_accumulator = y.initial_accumulator() != 0 ? y.initial_accumulator() : 1e-6f;
      break;
    }
    default:
      o.optimizer = EmbeddingOptimizer::kSgd;
  }
  return o;
}

void check_optimization_parameters(const OptimizationParameters& o, const std::string& table) {
  const std::string_view name = optimizer_name(o.optimizer);
  const auto bad = [&](std::string_view what, float value) {
    throw_invalid(kComponent, "table '{}' ({}): {} {} is out of range", table, name, what, value);
  };
  const auto at_least_zero = [&](std::string_view what, float value) {
    if (!(std::isfinite(value) && value >= 0)) bad(fmt::format("{} (must be >= 0)", what), value);
  };
  const auto positive = [&](std::string_view what, float value) {
    if (!(std::isfinite(value) && value > 0)) bad(fmt::format("{} (must be > 0)", what), value);
  };
  const auto fraction = [&](std::string_view what, float value, bool one_allowed) {
    if (!(value >= 0 && (value < 1 || (one_allowed && value == 1)))) {
      bad(fmt::format("{} (must be in [0, 1{})", what, one_allowed ? "]" : ")"), value);
    }
  };
  if (o.dynamic_learning_rate_tag < 0) at_least_zero("learning_rate", o.learning_rate);
  if (o.dynamic_learning_rate_tag < -1) {
    bad("dynamic_learning_rate_tag (must be >= 0, or -1: constant)",
        static_cast<float>(o.dynamic_learning_rate_tag));
  }
  if (std::isnan(o.clip_gradient_min) || std::isnan(o.clip_gradient_max) ||
      o.clip_gradient_min > o.clip_gradient_max) {
    bad(fmt::format("clip_gradient_min (above clip_gradient_max {})", o.clip_gradient_max),
        o.clip_gradient_min);
  }
  if (std::isnan(o.clip_weight_min) || std::isnan(o.clip_weight_max) ||
      o.clip_weight_min > o.clip_weight_max) {
    bad(fmt::format("clip_weight_min (above clip_weight_max {})", o.clip_weight_max),
        o.clip_weight_min);
  }
  at_least_zero("weight_decay_factor", o.weight_decay_factor);
  switch (o.optimizer) {
    case EmbeddingOptimizer::kSgd:
      break;
    case EmbeddingOptimizer::kAdagrad:
    case EmbeddingOptimizer::kProximalAdagrad:
      positive("initial_accumulator", o.initial_accumulator);
      at_least_zero("l1_regularization_strength", o.l1_regularization_strength);
      at_least_zero("l2_regularization_strength", o.l2_regularization_strength);
      break;
    case EmbeddingOptimizer::kAdam:
      fraction("beta1", o.beta1, false);
      fraction("beta2", o.beta2, false);
      positive("epsilon", o.epsilon);
      break;
    case EmbeddingOptimizer::kMomentum:
      at_least_zero("momentum", o.momentum);
      break;
    case EmbeddingOptimizer::kRmsProp:
    case EmbeddingOptimizer::kCenteredRmsProp:
      fraction("rho", o.rho, true);
      at_least_zero("momentum", o.momentum);
      positive("epsilon", o.epsilon);
      break;
    case EmbeddingOptimizer::kAdadelta:
      fraction("rho", o.rho, true);
      positive("epsilon", o.epsilon);
      break;
    case EmbeddingOptimizer::kProximalYogi:
      fraction("beta1", o.beta1, false);
      fraction("beta2", o.beta2, false);
      positive("epsilon", o.epsilon);
      positive("initial_accumulator", o.initial_accumulator);
      at_least_zero("l1_regularization_strength", o.l1_regularization_strength);
      at_least_zero("l2_regularization_strength", o.l2_regularization_strength);
      break;
    case EmbeddingOptimizer::kFtrl:
      // TF's ApplyFtrl: lr > 0 (it divides by it), lr_power <= 0, l1, l2 >= 0.
      if (o.dynamic_learning_rate_tag < 0) positive("learning_rate", o.learning_rate);
      positive("initial_accumulator", o.initial_accumulator);
      if (!(o.learning_rate_power <= 0)) {
        bad("learning_rate_power (must be <= 0)", o.learning_rate_power);
      }
      at_least_zero("l1_regularization_strength", o.l1_regularization_strength);
      at_least_zero("l2_regularization_strength", o.l2_regularization_strength);
      at_least_zero("beta", o.beta);
      break;
  }
}

}  // namespace detail
}  // namespace tessel
