// The optimizers' row updates: TF's update formulas (training_ops' ApplyAdagrad, ApplyMomentum,
// ApplyRMSProp, ApplyCenteredRMSProp, ApplyFtrlV2, ApplyProximalAdagrad, ApplyAdadelta; Adam
// without bias correction, TF's TPU embedding's; ProximalYogi as TensorFlow Addons' Yogi with l1
// and l2, without bias correction as TF's TPU embedding), with TF's TPU embedding options around
// them.
#include "embedding/row_update.h"

#include <algorithm>
#include <cmath>

namespace tessel::detail {
namespace {

void clip(float* x, int64_t n, float lo, float hi) {
  if (!std::isfinite(lo) && !std::isfinite(hi)) return;
  for (int64_t c = 0; c < n; ++c) x[c] = std::min(std::max(x[c], lo), hi);
}

// TF's ApplyFtrlV2 with beta (and multiply_linear_by_lr), in double: the accumulator's powers
// are subtracted, which float would round badly.
void ftrl(const OptimizationParameters& o, float lr, float* w, float* acc, float* linear,
          const float* g, int64_t cols) {
  const double p = -static_cast<double>(o.learning_rate_power);
  const auto power = [p](double a) { return p == 0.5 ? std::sqrt(a) : std::pow(a, p); };
  const double l1 = o.l1_regularization_strength, l2 = o.l2_regularization_strength;
  const double beta = o.beta, rate = lr;
  for (int64_t c = 0; c < cols; ++c) {
    const double gc = g[c], old_acc = acc[c], new_acc = old_acc + gc * gc;
    const double sigma = power(new_acc) - power(old_acc);
    double lin = linear[c], quadratic, l1_scaled;
    if (o.multiply_linear_by_learning_rate) {
      lin += gc * rate - sigma * w[c];
      quadratic = power(new_acc) + beta + 2 * l2 * rate;
      l1_scaled = l1 * rate;
    } else {
      lin += gc - sigma / rate * w[c];
      quadratic = (power(new_acc) + beta) / rate + 2 * l2;
      l1_scaled = l1;
    }
    linear[c] = static_cast<float>(lin);
    acc[c] = static_cast<float>(new_acc);
    w[c] = std::abs(lin) > l1_scaled
               ? static_cast<float>((std::copysign(l1_scaled, lin) - lin) / quadratic)
               : 0.0f;
  }
}

}  // namespace

std::vector<std::string> embedding_slot_names(EmbeddingOptimizer optimizer) {
  switch (optimizer) {
    case EmbeddingOptimizer::kSgd:
      return {};
    case EmbeddingOptimizer::kAdagrad:
    case EmbeddingOptimizer::kProximalAdagrad:
      return {"accumulators"};
    case EmbeddingOptimizer::kAdam:
      return {"momenta", "velocities"};
    case EmbeddingOptimizer::kMomentum:
      return {"momenta"};
    case EmbeddingOptimizer::kRmsProp:
      return {"ms", "mom"};
    case EmbeddingOptimizer::kCenteredRmsProp:
      return {"ms", "mom", "mg"};
    case EmbeddingOptimizer::kFtrl:
      return {"accumulators", "linears"};
    case EmbeddingOptimizer::kAdadelta:
      return {"accumulators", "updates"};
    case EmbeddingOptimizer::kProximalYogi:
      return {"v", "m"};  // TF's LoadTPUEmbeddingProximalYogiParameters(parameters, v, m)
  }
  return {};
}

float slot_initial_value(const OptimizationParameters& o, const std::string& name) {
  const bool adagrad_like = o.optimizer == EmbeddingOptimizer::kAdagrad ||
                            o.optimizer == EmbeddingOptimizer::kFtrl ||
                            o.optimizer == EmbeddingOptimizer::kProximalAdagrad;
  if (o.optimizer == EmbeddingOptimizer::kProximalYogi)
    return name == "v" ? o.initial_accumulator : 0.0f;
  return adagrad_like && name == "accumulators" ? o.initial_accumulator : 0.0f;
}

void update_row(const OptimizationParameters& o, float lr, float* w, float* const* slots, float* g,
                int64_t cols) {
  clip(g, cols, o.clip_gradient_min, o.clip_gradient_max);
  if (o.weight_decay_factor != 0) {
    const float decay =
        o.weight_decay_factor * (o.multiply_weight_decay_factor_by_learning_rate ? lr : 1.0f);
    for (int64_t c = 0; c < cols; ++c) w[c] -= decay * w[c];
  }
  switch (o.optimizer) {
    case EmbeddingOptimizer::kSgd:
      for (int64_t c = 0; c < cols; ++c) w[c] -= lr * g[c];
      break;
    case EmbeddingOptimizer::kAdagrad: {
      float* acc = slots[0];
      for (int64_t c = 0; c < cols; ++c) {
        acc[c] += g[c] * g[c];
        w[c] -= lr * g[c] / std::sqrt(acc[c]);
      }
      break;
    }
    case EmbeddingOptimizer::kAdam: {
      float *m = slots[0], *v = slots[1];
      for (int64_t c = 0; c < cols; ++c) {
        m[c] = o.beta1 * m[c] + (1 - o.beta1) * g[c];
        v[c] = o.beta2 * v[c] + (1 - o.beta2) * g[c] * g[c];
        const float denom = o.use_sum_inside_sqrt ? std::sqrt(v[c] + o.epsilon * o.epsilon)
                                                  : std::sqrt(v[c]) + o.epsilon;
        w[c] -= lr * m[c] / denom;
      }
      break;
    }
    case EmbeddingOptimizer::kMomentum: {
      float* m = slots[0];
      for (int64_t c = 0; c < cols; ++c) {
        m[c] = o.momentum * m[c] + g[c];
        w[c] -= o.use_nesterov ? lr * (g[c] + o.momentum * m[c]) : lr * m[c];
      }
      break;
    }
    case EmbeddingOptimizer::kRmsProp:
    case EmbeddingOptimizer::kCenteredRmsProp: {
      float *ms = slots[0], *mom = slots[1];
      float* mg = o.optimizer == EmbeddingOptimizer::kCenteredRmsProp ? slots[2] : nullptr;
      for (int64_t c = 0; c < cols; ++c) {
        ms[c] = o.rho * ms[c] + (1 - o.rho) * g[c] * g[c];
        float denom = ms[c] + o.epsilon;
        if (mg != nullptr) {
          mg[c] = o.rho * mg[c] + (1 - o.rho) * g[c];
          denom -= mg[c] * mg[c];
        }
        mom[c] = o.momentum * mom[c] + lr * g[c] / std::sqrt(denom);
        w[c] -= mom[c];
      }
      break;
    }
    case EmbeddingOptimizer::kFtrl:
      ftrl(o, lr, w, slots[0], slots[1], g, cols);
      break;
    case EmbeddingOptimizer::kProximalAdagrad: {
      float* acc = slots[0];
      for (int64_t c = 0; c < cols; ++c) {
        acc[c] += g[c] * g[c];
        const float rate = lr / std::sqrt(acc[c]);
        const float prox = w[c] - rate * g[c];
        const float shrunk = std::max(std::abs(prox) - rate * o.l1_regularization_strength, 0.0f);
        w[c] = std::copysign(shrunk, prox) / (1 + rate * o.l2_regularization_strength);
      }
      break;
    }
    case EmbeddingOptimizer::kProximalYogi: {
      // Yogi's second moment moves towards g^2 by (1 - beta2) g^2 at most (sign-controlled),
      // then the proximal step of l1 (shrink) and l2 (scale) at the per-coordinate rate; no
      // bias correction (TF: put it in a dynamic learning rate).
      float *v = slots[0], *m = slots[1];
      for (int64_t c = 0; c < cols; ++c) {
        const float g2 = g[c] * g[c];
        m[c] = o.beta1 * m[c] + (1 - o.beta1) * g[c];
        const float direction = v[c] > g2 ? 1.0f : (v[c] < g2 ? -1.0f : 0.0f);
        v[c] -= (1 - o.beta2) * direction * g2;
        const float rate = lr / (std::sqrt(v[c]) + o.epsilon);
        const float stepped = w[c] - rate * m[c];
        const float shrunk =
            std::max(std::abs(stepped) - rate * o.l1_regularization_strength, 0.0f);
        w[c] = std::copysign(shrunk, stepped) / (1 + rate * o.l2_regularization_strength);
      }
      break;
    }
    case EmbeddingOptimizer::kAdadelta: {
      float *acc = slots[0], *updates = slots[1];
      for (int64_t c = 0; c < cols; ++c) {
        acc[c] = o.rho * acc[c] + (1 - o.rho) * g[c] * g[c];
        const float update =
            std::sqrt(updates[c] + o.epsilon) / std::sqrt(acc[c] + o.epsilon) * g[c];
        w[c] -= lr * update;
        updates[c] = o.rho * updates[c] + (1 - o.rho) * update * update;
      }
      break;
    }
  }
  clip(w, cols, o.clip_weight_min, o.clip_weight_max);
}

}  // namespace tessel::detail
