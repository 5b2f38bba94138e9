// Internal: the float32 row loops of layer norm (and RMS norm) and the softmaxes, written for the
// vector units.
//
// A row's sums (mean, variance, the gradients' dot products, the softmax's maximum and total)
// run in float32 vector lanes (16, one AVX-512 register; compiled per vector ISA,
// cpu_vector_approx.h), two accumulators deep, not in one chain of dependent additions; the
// lanes are then added in a fixed order, so that a row's result depends only on the row (not on
// the thread count or the mesh). The other dtypes' kernels keep their scalar double sums. Each
// function handles the rows it is given on the calling thread: the kernels split rows over the
// intra-op threads.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace tessel::detail::vec {

// The layer norm's loops; with centered false, RMS normalisation's: the mean is taken as 0 (rstd
// = 1 / sqrt(mean(x^2) + epsilon), xhat = x * rstd) and drops out of the gradient.
// y = (x - mean) * rstd * w (+ b where b is not null) for each row of n.
void layer_norm_rows(const float* x, const float* w, const float* b, float* y, int64_t rows,
                     int64_t n, double epsilon, bool centered = true);
// stats[2r], stats[2r + 1] = row r's mean and rstd, exactly as layer_norm_rows computes them
// (in float32: the backward loops below read them back as the forward pass used them).
void layer_norm_stats_rows(const float* x, double* stats, int64_t rows, int64_t n, double epsilon,
                           bool centered = true);
// dx = rstd * (g*w - mean(g*w) - xhat * mean(g*w * xhat)) for each row of n, with each row's
// mean and rstd from layer_norm_stats_rows (not centered: without the mean(g*w) term).
void layer_norm_grad_rows(const float* x, const float* w, const float* g, const double* stats,
                          float* dx, int64_t rows, int64_t n, bool centered = true);
// acc[c] += sum over the rows of g * xhat (the weight's gradient), acc of n doubles.
void layer_norm_weight_grad_rows(const float* x, const float* g, const double* stats, double* acc,
                                 int64_t rows, int64_t n);

// y[0, visible) = softmax(scale * x[0, visible)), y[visible, n) = 0: one row of a causal softmax.
void causal_softmax_row(const float* x, float* y, int64_t n, int64_t visible, float scale);
// The same for f32 (the loop above) and f64 (scalar, double sums): causal_softmax's and
// causal_attention's rows.
template <typename T>
void causal_softmax_row_of(const T* x, T* y, int64_t n, int64_t visible, T scale) {
  if constexpr (std::is_same_v<T, float>) {
    causal_softmax_row(x, y, n, visible, scale);
  } else {
    visible = std::clamp<int64_t>(visible, 0, n);
    T most = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < visible; ++j) most = std::max(most, scale * x[j]);
    T total = 0;
    for (int64_t j = 0; j < visible; ++j) total += (y[j] = std::exp(scale * x[j] - most));
    const T inv = visible > 0 ? T(1) / total : T(0);
    for (int64_t j = 0; j < visible; ++j) y[j] *= inv;
    std::fill(y + visible, y + n, T(0));
  }
}
// dx = scale * s * (g - sum(g * s)): one row of a (causal) softmax's gradient from its output s
// (a masked key has s = 0, so its gradient is 0).
void softmax_grad_row(const float* s, const float* g, float* dx, int64_t n, float scale);

// Dropout's factors for n consecutive elements: z[j] = keep_scale where element first + j is kept,
// else 0; kept means (mix64(stream + (first + j) * kCounterGolden) >> 11) >= threshold
// (counter_random.h: stream = counter_stream(seed), threshold = keep_threshold(rate)), which is
// Tensor::random_uniform(seed)'s value there >= rate: the composed dropout op's mask.
void dropout_factors(float* z, int64_t n, uint64_t stream, uint64_t first, uint64_t threshold,
                     float keep_scale);
// Dropout applied to n consecutive elements with that mask: y[j] = x[j] * keep_scale where
// element first + j is kept, else 0 (a dropped NaN too); x and y do not overlap.
void dropout_row(const float* x, float* y, int64_t n, uint64_t stream, uint64_t first,
                 uint64_t threshold, float keep_scale);

}  // namespace tessel::detail::vec
