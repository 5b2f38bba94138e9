// Internal: the float32 loops of the CPU kernels that libm would otherwise run one element at a
// time (erf, exp): written as plain loops over polynomial approximations that the compiler
// vectorises, compiled for AVX-512, AVX2 and baseline x86-64 (target clones: the loader picks the
// widest this CPU has), and split over the intra-op threads (core/parallel.h) when large.
//
// Accuracy (bench-checked against double libm over [-10, 10], and in cpu_vector_math_test):
//   erf: absolute error <= 4e-7 (rational approximation of degree 13/8 in x, fitted here; |x| >= 4
//        gives +-1, as in float32);
//   exp: relative error <= 1e-7 for x in [-87, 88] (range reduction by ln 2, degree-7 Taylor
//        polynomial); 0 below -87 (where float32 turns subnormal), exp(88) above 88 (the
//        kernels call it on x - max <= 0); NaN stays NaN;
//   gelu (exact form x * Phi(x)), silu (x * sigmoid(x)) and their derivatives follow from the
//   two (silu of x < -88: x * 0, so -inf gives NaN as libm's x / (1 + exp(-x)) does).
// Other dtypes keep their libm loops (the kernels choose).
#pragma once

#include <algorithm>
#include <cstdint>

namespace tessel::detail::vec {

// Rows of `row_elements` each that one intra-op thread takes at the least (about 16 K elements,
// below which a split costs more than it saves): the grain of the row kernels' parallel_for.
inline int64_t rows_per_range(int64_t row_elements) {
  return row_elements > 0 ? std::max<int64_t>(1, (int64_t{1} << 14) / row_elements) : 1;
}

// y[i] = x[i] * Phi(x[i]) = 0.5 x (1 + erf(x / sqrt 2)).
void gelu_erf(const float* x, float* y, int64_t n);
// dx[i] = dy[i] * (Phi(x) + x phi(x)): gelu_erf's derivative times the incoming gradient.
void gelu_erf_grad(const float* dy, const float* x, float* dx, int64_t n);
// y[i] = x[i] * sigmoid(x[i]) = x[i] / (1 + exp(-x[i])).
void silu(const float* x, float* y, int64_t n);
// dx[i] = dy[i] * s (1 + x (1 - s)), s = sigmoid(x[i]): silu's derivative times the gradient.
void silu_grad(const float* dy, const float* x, float* dx, int64_t n);
// y[i] = exp(x[i]).
void exp(const float* x, float* y, int64_t n);
// y[i] = erf(x[i]).
void erf(const float* x, float* y, int64_t n);

}  // namespace tessel::detail::vec
