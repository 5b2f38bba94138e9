// An embedding table's optimizer and its options: TF's OptimizationParameters
// (tensorflow/core/protobuf/tpu/optimization_parameters.proto; tf.tpu.experimental.embedding.*),
// the update formulas of TF's TPU embedding (docs/embedding.md lists them).
//
// Every optimizer is lazy (only the rows a step touched are updated; TF's TPU embedding
// semantics) except Adam with lazy_adam = false, whose every row's moments decay each step.
// Around the optimizer's update of a row, in this order (TF's):
//   g = clip(g, clip_gradient_min, clip_gradient_max)          (gradient_clipping_limits)
//   w -= wd * w, wd = weight_decay_factor (x the step's learning rate when
//        multiply_weight_decay_factor_by_learning_rate)         (decoupled weight decay)
//   w = optimizer update of w with g
//   w = clip(w, clip_weight_min, clip_weight_max)               (clipping_limits)
// The learning rate is `learning_rate`, or, when dynamic_learning_rate_tag >= 0, the value the
// step's apply_gradients gives for that tag (TF's dynamic learning rate: one value per tag fed
// with each step's gradients; tables of one tag share it).
#pragma once

#include <cstdint>
#include <limits>
#include <string_view>

namespace tessel {

// TF's names (the oneof fields of OptimizationParameters).
enum class EmbeddingOptimizer {
  kSgd,
  kAdagrad,
  kAdam,
  kMomentum,
  kRmsProp,
  kCenteredRmsProp,
  kFtrl,
  kProximalAdagrad,
  kAdadelta,
  kProximalYogi,
};

// TF's names: "sgd", "adagrad", "adam", "momentum", "rms_prop", "centered_rms_prop", "ftrl",
// "proximal_adagrad", "adadelta", "proximal_yogi".
std::string_view optimizer_name(EmbeddingOptimizer optimizer);

struct OptimizationParameters {
  EmbeddingOptimizer optimizer = EmbeddingOptimizer::kSgd;
  float learning_rate = 0.01f;
  // Adagrad, FTRL, ProximalAdagrad: every accumulator's start (TF: the slot initializer, 0.1).
  // ProximalYogi: the start of its second moment v (TF's default there is 1e-6: set it).
  float initial_accumulator = 0.1f;
  float beta1 = 0.9f;  // Adam, ProximalYogi
  float beta2 = 0.999f;
  float epsilon = 1e-8f;             // Adam, RMSProp, centered RMSProp, Adadelta, ProximalYogi
  bool use_sum_inside_sqrt = false;  // Adam: m / sqrt(v + eps^2) instead of m / (sqrt(v) + eps)
  bool lazy_adam = true;             // Adam: false: every row's moments decay each step
  float momentum = 0.0f;             // Momentum, RMSProp, centered RMSProp
  bool use_nesterov = false;         // Momentum
  float rho = 0.9f;                  // RMSProp, centered RMSProp, Adadelta
  // FTRL: TF's ApplyFtrlV2 with beta (McMahan et al., Algorithm 1).
  float learning_rate_power = -0.5f;
  float l1_regularization_strength = 0.0f;        // FTRL, ProximalAdagrad, ProximalYogi
  float l2_regularization_strength = 0.0f;        // FTRL, ProximalAdagrad, ProximalYogi
  float beta = 0.0f;                              // FTRL
  bool multiply_linear_by_learning_rate = false;  // FTRL: the "linears" slot holds lr x linear

  // Options of every optimizer (see above); the defaults change nothing.
  float clip_gradient_min = -std::numeric_limits<float>::infinity();
  float clip_gradient_max = std::numeric_limits<float>::infinity();
  float clip_weight_min = -std::numeric_limits<float>::infinity();
  float clip_weight_max = std::numeric_limits<float>::infinity();
  float weight_decay_factor = 0.0f;
  bool multiply_weight_decay_factor_by_learning_rate = false;
  int32_t dynamic_learning_rate_tag = -1;  // >= 0: the learning rate is fed per step
  // TF's gradient_accumulation_status. true (ENABLED, the default): a row's gradients from every
  // device that looked it up are summed, then the row is updated once. false (DISABLED): each
  // device's gradient of the row (its bags' sum) updates the row in turn, in device order, as
  // TF applies each core's gradient as it arrives (the same for SGD, to rounding; not for the
  // others). Not for DATA_PARALLEL tables, whose gradients are all-reduced (kUnimplemented).
  bool gradient_accumulation = true;

  friend bool operator==(const OptimizationParameters&, const OptimizationParameters&) = default;
};

}  // namespace tessel
