// cpu_row_math.h: the row loops, each a sum in eight lanes and an elementwise pass.
#include "dtensor/ops/cpu_row_math.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "core/counter_random.h"
#include "dtensor/ops/cpu_vector_approx.h"

// The lane vectors below live in registers inside always-inlined helpers: no function passes
// one across an ABI boundary, so GCC's note about the AVX-512 vector ABI does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace tessel::detail::vec {
namespace {

// Sixteen float lanes: one AVX-512 register (two AVX2 ones, four SSE ones: GCC's vector
// extensions lower them to whatever the clone's ISA has).
using Lanes = float __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16;

TESSEL_INLINE Lanes load(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
TESSEL_INLINE void store(float* p, Lanes v) { std::memcpy(p, &v, sizeof v); }
TESSEL_INLINE Lanes splat(float x) { return Lanes{} + x; }

// The lanes added pairwise in a fixed order.
TESSEL_INLINE float total(Lanes v) {
  float t[kLanes];
  std::memcpy(t, &v, sizeof t);
  for (int64_t w = kLanes / 2; w > 0; w /= 2) {
    for (int64_t j = 0; j < w; ++j) t[j] += t[j + w];
  }
  return t[0];
}

// sum over c < n of f(c) for a lane function f (Lanes at c) and its scalar form fs (at c):
// two accumulators of 16 lanes (32 elements an iteration), the tail one element at a time.
template <typename F, typename Fs>
TESSEL_INLINE float lane_sum(int64_t n, const F& f, const Fs& fs) {
  Lanes a = {}, b = {};
  int64_t c = 0;
  for (; c + 2 * kLanes <= n; c += 2 * kLanes) {
    a += f(c);
    b += f(c + kLanes);
  }
  if (c + kLanes <= n) {
    a += f(c);
    c += kLanes;
  }
  float tail = 0.0f;
  for (; c < n; ++c) tail += fs(c);
  return total(a + b) + tail;
}

// A row's mean and 1 / sqrt(variance + epsilon) (biased variance, two passes); not centered (RMS
// normalisation): mean 0 and 1 / sqrt(mean(x^2) + epsilon).
TESSEL_INLINE void moments(const float* __restrict x, int64_t n, double epsilon, bool centered,
                           float& mean, float& rstd) {
  mean = 0.0f;
  if (centered) {
    const float sum = lane_sum(
        n, [&](int64_t c) { return load(x + c); }, [&](int64_t c) { return x[c]; });
    mean = sum / static_cast<float>(n);
  }
  const Lanes m = splat(mean);
  const float squares = lane_sum(
      n,
      [&](int64_t c) {
        const Lanes d = load(x + c) - m;
        return d * d;
      },
      [&](int64_t c) { return (x[c] - mean) * (x[c] - mean); });
  rstd = static_cast<float>(1.0 / std::sqrt(static_cast<double>(squares) / n + epsilon));
}

// y[c] = f(c) for c < n, f given as lanes and as scalar.
template <typename F, typename Fs>
TESSEL_INLINE void lane_map(float* __restrict y, int64_t n, const F& f, const Fs& fs) {
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) store(y + c, f(c));
  for (; c < n; ++c) y[c] = fs(c);
}

// std::max's choice (a NaN candidate is skipped), in the form the vectoriser turns into vmaxps.
TESSEL_INLINE float larger(float most, float v) { return most < v ? v : most; }

TESSEL_VECTOR_CLONES void layer_norm_range(const float* __restrict x, const float* __restrict w,
                                           const float* __restrict b, float* __restrict y,
                                           int64_t rows, int64_t n, double epsilon, bool centered) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float mean, rstd;
    moments(xr, n, epsilon, centered, mean, rstd);
    const Lanes m = splat(mean), s = splat(rstd);
    if (b != nullptr) {
      lane_map(
          y + r * n, n,
          [&](int64_t c) { return (load(xr + c) - m) * s * load(w + c) + load(b + c); },
          [&](int64_t c) { return (xr[c] - mean) * rstd * w[c] + b[c]; });
    } else {
      lane_map(
          y + r * n, n, [&](int64_t c) { return (load(xr + c) - m) * s * load(w + c); },
          [&](int64_t c) { return (xr[c] - mean) * rstd * w[c]; });
    }
  }
}

TESSEL_VECTOR_CLONES void layer_norm_stats_range(const float* __restrict x,
                                                 double* __restrict stats, int64_t rows, int64_t n,
                                                 double epsilon, bool centered) {
  for (int64_t r = 0; r < rows; ++r) {
    float mean, rstd;
    moments(x + r * n, n, epsilon, centered, mean, rstd);
    stats[2 * r] = mean;
    stats[2 * r + 1] = rstd;
  }
}

TESSEL_VECTOR_CLONES void layer_norm_grad_range(
    const float* __restrict x, const float* __restrict w, const float* __restrict g,
    const double* __restrict stats, float* __restrict dx, int64_t rows, int64_t n, bool centered) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    const float* gr = g + r * n;
    const float mean = static_cast<float>(stats[2 * r]);
    const float rstd = static_cast<float>(stats[2 * r + 1]);
    const Lanes m = splat(mean);
    // The mean's share of the gradient (none when the mean is not subtracted).
    const float gw = !centered ? 0.0f
                               : lane_sum(
                                     n, [&](int64_t c) { return load(gr + c) * load(w + c); },
                                     [&](int64_t c) { return gr[c] * w[c]; });
    const float gwx = lane_sum(
        n, [&](int64_t c) { return load(gr + c) * load(w + c) * (load(xr + c) - m); },
        [&](int64_t c) { return gr[c] * w[c] * (xr[c] - mean); });
    const float a = gw / static_cast<float>(n);
    const float bb = gwx * rstd / static_cast<float>(n);
    const Lanes va = splat(a), vb = splat(bb), s = splat(rstd);
    lane_map(
        dx + r * n, n,
        [&](int64_t c) {
          const Lanes xhat = (load(xr + c) - m) * s;
          return s * (load(gr + c) * load(w + c) - va - xhat * vb);
        },
        [&](int64_t c) {
          const float xhat = (xr[c] - mean) * rstd;
          return rstd * (gr[c] * w[c] - a - xhat * bb);
        });
  }
}

TESSEL_VECTOR_CLONES void layer_norm_weight_grad_range(const float* __restrict x,
                                                       const float* __restrict g,
                                                       const double* __restrict stats,
                                                       double* __restrict acc, int64_t rows,
                                                       int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    const float* gr = g + r * n;
    const float mean = static_cast<float>(stats[2 * r]);
    const float rstd = static_cast<float>(stats[2 * r + 1]);
    for (int64_t c = 0; c < n; ++c) acc[c] += static_cast<double>(gr[c] * ((xr[c] - mean) * rstd));
  }
}

// Causal rows are short (a query sees 1 to T keys): the maximum and the total run in 8
// independent scalar lanes that the vectoriser maps onto one register (8 rather than 16: fewer
// keys left to the scalar tail), the exps in the same loop.
constexpr int64_t kRowLanes = 8;

TESSEL_VECTOR_CLONES void causal_softmax_range(const float* __restrict x, float* __restrict y,
                                               int64_t n, int64_t visible, float scale) {
  float most[kRowLanes];
  for (int64_t j = 0; j < kRowLanes; ++j) most[j] = -std::numeric_limits<float>::infinity();
  int64_t c = 0;
  for (; c + kRowLanes <= visible; c += kRowLanes) {
    for (int64_t j = 0; j < kRowLanes; ++j) most[j] = larger(most[j], scale * x[c + j]);
  }
  for (int64_t j = 0; c < visible; ++c, ++j) most[j] = larger(most[j], scale * x[c]);
  float top = most[0];
  for (int64_t j = 1; j < kRowLanes; ++j) top = larger(top, most[j]);
  float sum[kRowLanes] = {};
  for (c = 0; c + kRowLanes <= visible; c += kRowLanes) {
    for (int64_t j = 0; j < kRowLanes; ++j) {
      const float e = exp_approx(scale * x[c + j] - top);
      y[c + j] = e;
      sum[j] += e;
    }
  }
  for (int64_t j = 0; c < visible; ++c, ++j) {
    const float e = exp_approx(scale * x[c] - top);
    y[c] = e;
    sum[j] += e;
  }
  const float inv = visible > 0 ? 1.0f / (((sum[0] + sum[1]) + (sum[2] + sum[3])) +
                                          ((sum[4] + sum[5]) + (sum[6] + sum[7])))
                                : 0.0f;
  for (c = 0; c < visible; ++c) y[c] *= inv;
  for (c = visible; c < n; ++c) y[c] = 0.0f;
}

// Over the whole row: the masked keys have s = 0, so they add nothing to the sum and get 0.
TESSEL_VECTOR_CLONES void softmax_grad_range(const float* __restrict s, const float* __restrict g,
                                             float* __restrict dx, int64_t n, float scale) {
  const float inner = lane_sum(
      n, [&](int64_t c) { return load(g + c) * load(s + c); },
      [&](int64_t c) { return g[c] * s[c]; });
  const Lanes vi = splat(inner), vs = splat(scale);
  lane_map(
      dx, n, [&](int64_t c) { return vs * load(s + c) * (load(g + c) - vi); },
      [&](int64_t c) { return scale * s[c] * (g[c] - inner); });
}

// Eight 64-bit lanes per step where the clone has AVX-512 (vpmullq): the hashes' multiplies.
TESSEL_VECTOR_CLONES void dropout_factors_range(float* __restrict z, int64_t n, uint64_t stream,
                                                uint64_t first, uint64_t threshold,
                                                float keep_scale) {
  for (int64_t j = 0; j < n; ++j) {
    const uint64_t bits = mix64(stream + (first + static_cast<uint64_t>(j)) * kCounterGolden);
    z[j] = (bits >> 11) >= threshold ? keep_scale : 0.0f;
  }
}

TESSEL_VECTOR_CLONES void dropout_row_range(const float* __restrict x, float* __restrict y,
                                            int64_t n, uint64_t stream, uint64_t first,
                                            uint64_t threshold, float keep_scale) {
  for (int64_t j = 0; j < n; ++j) {
    const uint64_t bits = mix64(stream + (first + static_cast<uint64_t>(j)) * kCounterGolden);
    const float kept = x[j] * keep_scale;
    y[j] = (bits >> 11) >= threshold ? kept : 0.0f;
  }
}

}  // namespace

void layer_norm_rows(const float* x, const float* w, const float* b, float* y, int64_t rows,
                     int64_t n, double epsilon, bool centered) {
  layer_norm_range(x, w, b, y, rows, n, epsilon, centered);
}

void layer_norm_stats_rows(const float* x, double* stats, int64_t rows, int64_t n, double epsilon,
                           bool centered) {
  layer_norm_stats_range(x, stats, rows, n, epsilon, centered);
}

void layer_norm_grad_rows(const float* x, const float* w, const float* g, const double* stats,
                          float* dx, int64_t rows, int64_t n, bool centered) {
  layer_norm_grad_range(x, w, g, stats, dx, rows, n, centered);
}

void layer_norm_weight_grad_rows(const float* x, const float* g, const double* stats, double* acc,
                                 int64_t rows, int64_t n) {
  layer_norm_weight_grad_range(x, g, stats, acc, rows, n);
}

void causal_softmax_row(const float* x, float* y, int64_t n, int64_t visible, float scale) {
  causal_softmax_range(x, y, n, visible < 0 ? 0 : (visible > n ? n : visible), scale);
}

void softmax_grad_row(const float* s, const float* g, float* dx, int64_t n, float scale) {
  softmax_grad_range(s, g, dx, n, scale);
}

void dropout_factors(float* z, int64_t n, uint64_t stream, uint64_t first, uint64_t threshold,
                     float keep_scale) {
  dropout_factors_range(z, n, stream, first, threshold, keep_scale);
}

void dropout_row(const float* x, float* y, int64_t n, uint64_t stream, uint64_t first,
                 uint64_t threshold, float keep_scale) {
  dropout_row_range(x, y, n, stream, first, threshold, keep_scale);
}

}  // namespace tessel::detail::vec
