// The elementwise ops' CUDA kernels (gpu_launch.h): one grid-stride kernel per functor of
// elementwise_math.h (the math the CPU kernels run, compiled here for the device) and dtype, for
// the unary and scalar ops and the broadcasting binary ops; the launchers pick the kernel by the
// functor's index in UnaryOps / BinaryOps, so a functor added there has its kernel without a
// line here. And one kernel for the optimizer's fused updates, the update chosen by a switch that
// is the same for every thread.
#include <array>
#include <type_traits>

#include "dtensor/ops/cuda/gpu_launch.h"
#include "dtensor/ops/cuda/gpu_math.cuh"
#include "dtensor/ops/elementwise_math.h"

namespace tessel::detail::gpu {
namespace {

namespace ew = elementwise;

// ops_optimizer.cpp's lambdas, each product rounded before the sum as there (no FMA).
template <typename T>
__device__ T apply_update(FusedUpdate update, T a, T b, T c, T s0, T s1, T s2) {
  switch (update) {
    case FusedUpdate::kEma:  // (m, g)
      return mul_rounded(s0, a) + mul_rounded(T(1) - s0, b);
    case FusedUpdate::kEmaSquare:  // (v, g)
      return mul_rounded(s0, a) + mul_rounded(mul_rounded(T(1) - s0, b), b);
    case FusedUpdate::kAdamApply:  // (p, m, v)
      return mul_rounded(s2, a) - mul_rounded(s0, b) / (sqrt_of(c) + s1);
  }
  return a;
}

template <typename T>
__global__ void fused_update_kernel(FusedUpdate update, const T* a, const T* b, const T* c, T* out,
                                    int64_t n, T s0, T s1, T s2) {
  for (int64_t i = thread_index(); i < n; i += thread_count())
    out[i] = apply_update(update, a[i], b[i], c == nullptr ? T(0) : c[i], s0, s1, s2);
}

template <typename Op, typename T>
__global__ void unary_kernel(Op op, const T* x, T* out, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) out[i] = op(x[i]);
}

template <typename Op, typename T>
__global__ void binary_kernel(Op op, const T* a, const T* b, T* out, int64_t n,
                              BroadcastIndex index) {
  const bool same = index.dims == 1 && index.a_stride[0] == 1 && index.b_stride[0] == 1;
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    if (same) {
      out[i] = op(a[i], b[i]);
      continue;
    }
    int64_t rest = i, at = 0, bt = 0;
    for (int d = index.dims - 1; d >= 0; --d) {
      const int64_t k = rest % index.extent[d];
      rest /= index.extent[d];
      at += k * index.a_stride[d];
      bt += k * index.b_stride[d];
    }
    out[i] = op(a[at], b[bt]);
  }
}

// The functor Op, with the host scalar of the ops that take one (AddScalar, MultiplyScalar).
template <typename Op, typename = void>
struct WithOperand {
  static Op make(double) { return Op{}; }
};
template <typename Op>
struct WithOperand<Op, std::void_t<decltype(Op::operand)>> {
  static Op make(double operand) { return Op{operand}; }
};

template <typename Op, typename T>
cudaError_t launch_unary_with(const T* x, T* out, int64_t n, double operand, cudaStream_t stream) {
  return launch_over(n, stream, unary_kernel<Op, T>, WithOperand<Op>::make(operand), x, out, n);
}

template <typename Op, typename T>
cudaError_t launch_binary_with(const T* a, const T* b, T* out, int64_t n,
                               const BroadcastIndex& index, cudaStream_t stream) {
  return launch_over(n, stream, binary_kernel<Op, T>, Op{}, a, b, out, n, index);
}

// The launcher of each functor of a list, by its index.
template <typename T, typename... Ops>
constexpr auto unary_launchers(ew::OpList<Ops...>) {
  using Launch = cudaError_t (*)(const T*, T*, int64_t, double, cudaStream_t);
  return std::array<Launch, sizeof...(Ops)>{&launch_unary_with<Ops, T>...};
}
template <typename T, typename... Ops>
constexpr auto binary_launchers(ew::OpList<Ops...>) {
  using Launch = cudaError_t (*)(const T*, const T*, T*, int64_t, const BroadcastIndex&,
                                 cudaStream_t);
  return std::array<Launch, sizeof...(Ops)>{&launch_binary_with<Ops, T>...};
}

}  // namespace

template <typename T>
cudaError_t launch_unary(int op, const T* x, T* out, int64_t n, double operand,
                         cudaStream_t stream) {
  constexpr auto kLaunchers = unary_launchers<T>(ew::UnaryOps{});
  if (op < 0 || op >= static_cast<int>(kLaunchers.size())) return cudaErrorInvalidValue;
  return kLaunchers[static_cast<size_t>(op)](x, out, n, operand, stream);
}

template <typename T>
cudaError_t launch_binary(int op, const T* a, const T* b, T* out, int64_t n,
                          const BroadcastIndex& index, cudaStream_t stream) {
  constexpr auto kLaunchers = binary_launchers<T>(ew::BinaryOps{});
  if (op < 0 || op >= static_cast<int>(kLaunchers.size())) return cudaErrorInvalidValue;
  return kLaunchers[static_cast<size_t>(op)](a, b, out, n, index, stream);
}

template <typename T>
cudaError_t launch_fused_update(FusedUpdate update, const T* a, const T* b, const T* c, T* out,
                                int64_t n, double s0, double s1, double s2,
                                cudaStream_t stream) {
  return launch_over(n, stream, fused_update_kernel<T>, update, a, b, c, out, n,
                     static_cast<T>(s0), static_cast<T>(s1), static_cast<T>(s2));
}

template cudaError_t launch_unary<float>(int, const float*, float*, int64_t, double,
                                         cudaStream_t);
template cudaError_t launch_unary<double>(int, const double*, double*, int64_t, double,
                                          cudaStream_t);
template cudaError_t launch_binary<float>(int, const float*, const float*, float*, int64_t,
                                          const BroadcastIndex&, cudaStream_t);
template cudaError_t launch_binary<double>(int, const double*, const double*, double*, int64_t,
                                           const BroadcastIndex&, cudaStream_t);

template cudaError_t launch_fused_update<float>(FusedUpdate, const float*, const float*,
                                                const float*, float*, int64_t, double, double,
                                                double, cudaStream_t);
template cudaError_t launch_fused_update<double>(FusedUpdate, const double*, const double*,
                                                 const double*, double*, int64_t, double, double,
                                                 double, cudaStream_t);

}  // namespace tessel::detail::gpu
