// The elementwise ops' CUDA kernels (gpu_launch.h): one grid-stride kernel for the unary and
// scalar ops, one for the broadcasting binary ops and one for the optimizer's fused updates, the op
// chosen by a switch that is the same for every thread (so one kernel per dtype instead of one per
// op and dtype: small compile time, no divergence). Each op's formula is its CPU functor's
// (ops_unary.cpp, ops_elementwise.cpp, ops_optimizer.cpp) written out again for the device.
#include "dtensor/ops/cuda/gpu_launch.h"
#include "dtensor/ops/cuda/gpu_math.cuh"

namespace tessel::detail::gpu {
namespace {

constexpr double kGeluC = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluK = 0.044715;
constexpr double kSqrtHalf = 0.70710678118654752440;  // M_SQRT1_2
constexpr double kInvSqrt2Pi = 0.3989422804014327;    // 1 / sqrt(2 pi)

template <typename T>
__device__ T apply_unary(UnaryOp op, T x, T operand) {
  switch (op) {
    case UnaryOp::kNegative:
      return -x;
    case UnaryOp::kExp:
      return exp_of(x);
    case UnaryOp::kLog:
      return log_of(x);
    case UnaryOp::kSqrt:
      return sqrt_of(x);
    case UnaryOp::kRsqrt:
      return T(1) / sqrt_of(x);
    case UnaryOp::kTanh:
      return tanh_of(x);
    case UnaryOp::kRelu:
      return x < T(0) ? T(0) : x;  // NaN propagates
    case UnaryOp::kGelu:
      return T(0.5) * x * (T(1) + tanh_of(T(kGeluC) * (x + T(kGeluK) * x * x * x)));
    case UnaryOp::kGeluErf:
      return T(0.5) * x * (T(1) + erf_of(x * T(kSqrtHalf)));
    case UnaryOp::kAddScalar:
      return x + operand;
    case UnaryOp::kMultiplyScalar:
      return x * operand;
  }
  return x;
}

template <typename T>
__device__ T apply_binary(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::kAdd:
      return a + b;
    case BinaryOp::kSubtract:
      return a - b;
    case BinaryOp::kMultiply:
      return a * b;
    case BinaryOp::kDivide:
      return a / b;
    case BinaryOp::kMaximum:
      return a >= b || a != a ? a : b;  // NaN propagates; ties give a
    case BinaryOp::kMinimum:
      return a <= b || a != a ? a : b;
    case BinaryOp::kMaskGreater:
      return a > b ? T(1) : T(0);
    case BinaryOp::kMaskGreaterEqual:
      return a >= b ? T(1) : T(0);
    case BinaryOp::kReluGrad:
      return b > T(0) ? a : T(0);  // (grad, x)
    case BinaryOp::kTanhGrad:
      return a * (T(1) - b * b);  // (grad, tanh(x))
    case BinaryOp::kGeluGrad: {   // (grad, x)
      const T x2 = b * b;
      const T t = tanh_of(T(kGeluC) * (b + T(kGeluK) * x2 * b));
      const T d = T(0.5) * (T(1) + t) +
                  T(0.5) * b * (T(1) - t * t) * T(kGeluC) * (T(1) + T(3 * kGeluK) * x2);
      return a * d;
    }
    case BinaryOp::kGeluErfGrad: {  // (grad, x): Phi(x) + x * phi(x)
      const T cdf = T(0.5) * (T(1) + erf_of(b * T(kSqrtHalf)));
      const T pdf = exp_of(T(-0.5) * b * b) * T(kInvSqrt2Pi);
      return a * (cdf + b * pdf);
    }
  }
  return a;
}

// ops_optimizer.cpp's lambdas, each product rounded before the sum as there (no FMA).
template <typename T>
__device__ T apply_update(FusedUpdate update, T a, T b, T c, T s0, T s1) {
  switch (update) {
    case FusedUpdate::kEma:  // (m, g)
      return mul_rounded(s0, a) + mul_rounded(T(1) - s0, b);
    case FusedUpdate::kEmaSquare:  // (v, g)
      return mul_rounded(s0, a) + mul_rounded(mul_rounded(T(1) - s0, b), b);
    case FusedUpdate::kAdamApply:  // (p, m, v)
      return a - mul_rounded(s0, b) / (sqrt_of(c) + s1);
  }
  return a;
}

template <typename T>
__global__ void fused_update_kernel(FusedUpdate update, const T* a, const T* b, const T* c, T* out,
                                    int64_t n, T s0, T s1) {
  for (int64_t i = thread_index(); i < n; i += thread_count())
    out[i] = apply_update(update, a[i], b[i], c == nullptr ? T(0) : c[i], s0, s1);
}

template <typename T>
__global__ void unary_kernel(UnaryOp op, const T* x, T* out, int64_t n, T operand) {
  for (int64_t i = thread_index(); i < n; i += thread_count())
    out[i] = apply_unary(op, x[i], operand);
}

template <typename T>
__global__ void binary_kernel(BinaryOp op, const T* a, const T* b, T* out, int64_t n,
                              BroadcastIndex index) {
  const bool same = index.dims == 1 && index.a_stride[0] == 1 && index.b_stride[0] == 1;
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    if (same) {
      out[i] = apply_binary(op, a[i], b[i]);
      continue;
    }
    int64_t rest = i, at = 0, bt = 0;
    for (int d = index.dims - 1; d >= 0; --d) {
      const int64_t k = rest % index.extent[d];
      rest /= index.extent[d];
      at += k * index.a_stride[d];
      bt += k * index.b_stride[d];
    }
    out[i] = apply_binary(op, a[at], b[bt]);
  }
}

}  // namespace

template <typename T>
cudaError_t launch_unary(UnaryOp op, const T* x, T* out, int64_t n, double operand,
                         cudaStream_t stream) {
  return launch_over(n, stream, unary_kernel<T>, op, x, out, n, static_cast<T>(operand));
}

template <typename T>
cudaError_t launch_binary(BinaryOp op, const T* a, const T* b, T* out, int64_t n,
                          const BroadcastIndex& index, cudaStream_t stream) {
  return launch_over(n, stream, binary_kernel<T>, op, a, b, out, n, index);
}

template <typename T>
cudaError_t launch_fused_update(FusedUpdate update, const T* a, const T* b, const T* c, T* out,
                                int64_t n, double s0, double s1, cudaStream_t stream) {
  return launch_over(n, stream, fused_update_kernel<T>, update, a, b, c, out, n,
                     static_cast<T>(s0), static_cast<T>(s1));
}

template cudaError_t launch_unary<float>(UnaryOp, const float*, float*, int64_t, double,
                                         cudaStream_t);
template cudaError_t launch_unary<double>(UnaryOp, const double*, double*, int64_t, double,
                                          cudaStream_t);
template cudaError_t launch_binary<float>(BinaryOp, const float*, const float*, float*, int64_t,
                                          const BroadcastIndex&, cudaStream_t);
template cudaError_t launch_binary<double>(BinaryOp, const double*, const double*, double*, int64_t,
                                           const BroadcastIndex&, cudaStream_t);

template cudaError_t launch_fused_update<float>(FusedUpdate, const float*, const float*,
                                                const float*, float*, int64_t, double, double,
                                                cudaStream_t);
template cudaError_t launch_fused_update<double>(FusedUpdate, const double*, const double*,
                                                 const double*, double*, int64_t, double, double,
                                                 cudaStream_t);

}  // namespace tessel::detail::gpu
