// cpu_vector_math.h: branch-free float32 approximations and the cloned loops over them.
#include "dtensor/ops/cpu_vector_math.h"

#include "dtensor/ops/cpu_vector_approx.h"
#include "tessel/core/parallel.h"

namespace tessel::detail::vec {
namespace {

// Elements one thread takes at the least: below this the split costs more than it saves.
constexpr int64_t kGrain = int64_t{1} << 15;

constexpr float kSqrtHalf = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

TESSEL_VECTOR_CLONES void gelu_erf_range(const float* __restrict x, float* __restrict y,
                                         int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + erf_approx(x[i] * kSqrtHalf));
}

TESSEL_VECTOR_CLONES void gelu_erf_grad_range(const float* __restrict dy, const float* __restrict x,
                                              float* __restrict dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float cdf = 0.5f * (1.0f + erf_approx(v * kSqrtHalf));
    const float pdf = kInvSqrt2Pi * exp_approx(-0.5f * v * v);
    dx[i] = dy[i] * (cdf + v * pdf);
  }
}

// sigmoid(x), 0 below -88 (where exp(-x) would pass float32's range).
TESSEL_INLINE float sigmoid_approx(float x) {
  return x < -88.0f ? 0.0f : 1.0f / (1.0f + exp_approx(-x));
}

TESSEL_VECTOR_CLONES void silu_range(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * sigmoid_approx(x[i]);
}

TESSEL_VECTOR_CLONES void silu_grad_range(const float* __restrict dy, const float* __restrict x,
                                          float* __restrict dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float s = sigmoid_approx(x[i]);
    dx[i] = dy[i] * (s * (1.0f + x[i] * (1.0f - s)));
  }
}

TESSEL_VECTOR_CLONES void exp_range(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = exp_approx(x[i]);
}

TESSEL_VECTOR_CLONES void erf_range(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = erf_approx(x[i]);
}

}  // namespace

void gelu_erf(const float* x, float* y, int64_t n) {
  tessel::parallel_for(n, kGrain,
                       [&](int64_t b, int64_t e) { gelu_erf_range(x + b, y + b, e - b); });
}

void gelu_erf_grad(const float* dy, const float* x, float* dx, int64_t n) {
  tessel::parallel_for(
      n, kGrain, [&](int64_t b, int64_t e) { gelu_erf_grad_range(dy + b, x + b, dx + b, e - b); });
}

void silu(const float* x, float* y, int64_t n) {
  tessel::parallel_for(n, kGrain, [&](int64_t b, int64_t e) { silu_range(x + b, y + b, e - b); });
}

void silu_grad(const float* dy, const float* x, float* dx, int64_t n) {
  tessel::parallel_for(
      n, kGrain, [&](int64_t b, int64_t e) { silu_grad_range(dy + b, x + b, dx + b, e - b); });
}

void exp(const float* x, float* y, int64_t n) {
  tessel::parallel_for(n, kGrain, [&](int64_t b, int64_t e) { exp_range(x + b, y + b, e - b); });
}

void erf(const float* x, float* y, int64_t n) {
  tessel::parallel_for(n, kGrain, [&](int64_t b, int64_t e) { erf_range(x + b, y + b, e - b); });
}

}  // namespace tessel::detail::vec
