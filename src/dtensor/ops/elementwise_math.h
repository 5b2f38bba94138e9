// Internal: the math of the elementwise ops, once, for the CPU kernels (ops_unary.cpp,
// ops_elementwise.cpp, through elementwise_loops.h) and the CUDA kernels (cuda/gpu_elementwise.cu,
// and the row kernels through cuda/gpu_math.cuh). Both compilers read this header: nvcc (C++17)
// compiles every function for the host and the device (TESSEL_HOST_DEVICE), the host compiler
// for the host only, so it includes nothing of tessel and nothing but <cmath> and <cstddef>.
//
// One functor per op, templated on the element type (float, double): a unary op's maps x, a
// binary op's maps (a, b); the derivative ops (*Grad) map (grad, v) to grad * f'(...), where v is
// the op's input x or, where the derivative is cheaper from it, its output y (the functor says
// which); the comparisons (Less, ...) map (a, b) to bool, outside the GPU's tables (their ops
// run host-staged on GPU devices). The kernels are loops over contiguous arrays calling one
// functor, chosen outside the loop: the CPU's are elementwise_loops.h's, the GPU's
// gpu_elementwise.cu's (one kernel per functor and dtype, picked by the functor's index in
// UnaryOps / BinaryOps).
//
// A new elementwise op: its functor here, in UnaryOps or BinaryOps (the GPU then has its kernel),
// and its registration in its family file (docs/architecture.md, "Where things go").
#pragma once

#include <cmath>
#include <cstddef>

#if defined(__CUDACC__)
#define TESSEL_HOST_DEVICE __host__ __device__
#else
#define TESSEL_HOST_DEVICE
#endif

namespace tessel::detail {

// The C library's functions by argument type (expf for float, exp for double: the same functions
// <cmath>'s std:: overloads call on the host; CUDA's IEEE-accurate ones on the device, where the
// build never uses fast math).
TESSEL_HOST_DEVICE inline float exp_of(float x) { return ::expf(x); }
TESSEL_HOST_DEVICE inline double exp_of(double x) { return ::exp(x); }
TESSEL_HOST_DEVICE inline float log_of(float x) { return ::logf(x); }
TESSEL_HOST_DEVICE inline double log_of(double x) { return ::log(x); }
TESSEL_HOST_DEVICE inline float sqrt_of(float x) { return ::sqrtf(x); }
TESSEL_HOST_DEVICE inline double sqrt_of(double x) { return ::sqrt(x); }
TESSEL_HOST_DEVICE inline float tanh_of(float x) { return ::tanhf(x); }
TESSEL_HOST_DEVICE inline double tanh_of(double x) { return ::tanh(x); }
TESSEL_HOST_DEVICE inline float erf_of(float x) { return ::erff(x); }
TESSEL_HOST_DEVICE inline double erf_of(double x) { return ::erf(x); }
TESSEL_HOST_DEVICE inline float abs_of(float x) { return ::fabsf(x); }
TESSEL_HOST_DEVICE inline double abs_of(double x) { return ::fabs(x); }
TESSEL_HOST_DEVICE inline float sin_of(float x) { return ::sinf(x); }
TESSEL_HOST_DEVICE inline double sin_of(double x) { return ::sin(x); }
TESSEL_HOST_DEVICE inline float cos_of(float x) { return ::cosf(x); }
TESSEL_HOST_DEVICE inline double cos_of(double x) { return ::cos(x); }
TESSEL_HOST_DEVICE inline float pow_of(float x, float y) { return ::powf(x, y); }
TESSEL_HOST_DEVICE inline double pow_of(double x, double y) { return ::pow(x, y); }

namespace elementwise {

constexpr double kGeluC = 0.7978845608028654;         // sqrt(2 / pi)
constexpr double kGeluK = 0.044715;                   // the tanh approximation's cubic term
constexpr double kSqrtHalf = 0.70710678118654752440;  // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.3989422804014327;    // 1 / sqrt(2 pi)

// The functors whose body is one expression: `Name`'s operator() of x (unary) or of the two named
// arguments (binary) returns the expression, for T = float and double.
#define TESSEL_UNARY_FUNCTOR(Name, ...)          \
  struct Name {                                  \
    template <typename T>                        \
    TESSEL_HOST_DEVICE T operator()(T x) const { \
      return __VA_ARGS__;                        \
    }                                            \
  }
#define TESSEL_BINARY_FUNCTOR(Name, a, b, ...)        \
  struct Name {                                       \
    template <typename T>                             \
    TESSEL_HOST_DEVICE T operator()(T a, T b) const { \
      return __VA_ARGS__;                             \
    }                                                 \
  }

// ---- unary ops ---------------------------------------------------------------------------------

TESSEL_UNARY_FUNCTOR(Negative, -x);
TESSEL_UNARY_FUNCTOR(Exp, exp_of(x));
TESSEL_UNARY_FUNCTOR(Log, log_of(x));
TESSEL_UNARY_FUNCTOR(Sqrt, sqrt_of(x));
TESSEL_UNARY_FUNCTOR(Rsqrt, T(1) / sqrt_of(x));
TESSEL_UNARY_FUNCTOR(Tanh, tanh_of(x));
// NaN propagates
TESSEL_UNARY_FUNCTOR(Relu, x < T(0) ? T(0) : x);
struct Gelu {  // the tanh approximation
  template <typename T>
  TESSEL_HOST_DEVICE T operator()(T x) const {
    return T(0.5) * x * (T(1) + tanh_of(T(kGeluC) * (x + T(kGeluK) * x * x * x)));
  }
};
struct GeluErf {  // exact: x * Phi(x)
  template <typename T>
  TESSEL_HOST_DEVICE T operator()(T x) const {
    return T(0.5) * x * (T(1) + erf_of(x * T(kSqrtHalf)));
  }
};
// 1 / (1 + e^-x): 0 and 1 at the far ends (e^-x overflows to inf, not NaN)
TESSEL_UNARY_FUNCTOR(Sigmoid, T(1) / (T(1) + exp_of(-x)));
TESSEL_UNARY_FUNCTOR(Square, x* x);
TESSEL_UNARY_FUNCTOR(Abs, abs_of(x));
TESSEL_UNARY_FUNCTOR(Sin, sin_of(x));
TESSEL_UNARY_FUNCTOR(Cos, cos_of(x));
// x * sigmoid(x) = x / (1 + e^-x)
TESSEL_UNARY_FUNCTOR(Silu, x / (T(1) + exp_of(-x)));
// The host-scalar ops: x + operand, x * operand (the scalar rounded to T once, as the CPU kernel
// of ops_unary.cpp always did).
struct AddScalar {
  double operand = 0;
  template <typename T>
  TESSEL_HOST_DEVICE T operator()(T x) const {
    return x + static_cast<T>(operand);
  }
};
struct MultiplyScalar {
  double operand = 0;
  template <typename T>
  TESSEL_HOST_DEVICE T operator()(T x) const {
    return x * static_cast<T>(operand);
  }
};
struct PowScalar {  // x ** operand
  double operand = 0;
  template <typename T>
  TESSEL_HOST_DEVICE T operator()(T x) const {
    return pow_of(x, static_cast<T>(operand));
  }
};

// ---- binary ops --------------------------------------------------------------------------------

TESSEL_BINARY_FUNCTOR(Add, a, b, a + b);
TESSEL_BINARY_FUNCTOR(Subtract, a, b, a - b);
TESSEL_BINARY_FUNCTOR(Multiply, a, b, a* b);
TESSEL_BINARY_FUNCTOR(Divide, a, b, a / b);
// NaN propagates; ties give a
TESSEL_BINARY_FUNCTOR(Maximum, a, b, a >= b || a != a ? a : b);
TESSEL_BINARY_FUNCTOR(Minimum, a, b, a <= b || a != a ? a : b);
// C's pow: NaN for a negative base and a non-integer exponent, as numpy's
TESSEL_BINARY_FUNCTOR(Pow, a, b, pow_of(a, b));
TESSEL_BINARY_FUNCTOR(MaskGreater, a, b, a > b ? T(1) : T(0));
TESSEL_BINARY_FUNCTOR(MaskGreaterEqual, a, b, a >= b ? T(1) : T(0));

// ---- derivatives: (grad, x) or (grad, y) -> grad * f' ------------------------------------------

// (grad, x)
TESSEL_BINARY_FUNCTOR(ReluGrad, g, x, x > T(0) ? g : T(0));
// (grad, y = tanh(x))
TESSEL_BINARY_FUNCTOR(TanhGrad, g, y, g*(T(1) - y * y));
struct GeluGrad {  // (grad, x)
  template <typename T>
  TESSEL_HOST_DEVICE T operator()(T g, T x) const {
    const T x2 = x * x;
    const T t = tanh_of(T(kGeluC) * (x + T(kGeluK) * x2 * x));
    const T d =
        T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * T(kGeluC) * (T(1) + T(3 * kGeluK) * x2);
    return g * d;
  }
};
struct GeluErfGrad {  // (grad, x): d x*Phi(x) = Phi(x) + x * phi(x)
  template <typename T>
  TESSEL_HOST_DEVICE T operator()(T g, T x) const {
    const T cdf = T(0.5) * (T(1) + erf_of(x * T(kSqrtHalf)));
    const T pdf = exp_of(T(-0.5) * x * x) * T(kInvSqrt2Pi);
    return g * (cdf + x * pdf);
  }
};
// (grad, y = sigmoid(x)): y (1 - y)
TESSEL_BINARY_FUNCTOR(SigmoidGrad, g, y, g*(y*(T(1) - y)));

struct AbsGrad {  // (grad, x): sign(x), 0 at 0 (as numpy's sign and JAX's abs gradient)
  template <typename T>
  TESSEL_HOST_DEVICE T operator()(T g, T x) const {
    return x > T(0) ? g : (x < T(0) ? -g : T(0));
  }
};
struct SiluGrad {  // (grad, x): s (1 + x (1 - s)) with s = sigmoid(x)
  template <typename T>
  TESSEL_HOST_DEVICE T operator()(T g, T x) const {
    const T s = T(1) / (T(1) + exp_of(-x));
    return g * (s * (T(1) + x * (T(1) - s)));
  }
};

// ---- comparisons: (a, b) -> bool (CPU only: the GPU tables map T to T) ---------------------

struct Less {
  template <typename T>
  TESSEL_HOST_DEVICE bool operator()(T a, T b) const {
    return a < b;
  }
};
struct LessEqual {
  template <typename T>
  TESSEL_HOST_DEVICE bool operator()(T a, T b) const {
    return a <= b;
  }
};
struct Greater {
  template <typename T>
  TESSEL_HOST_DEVICE bool operator()(T a, T b) const {
    return a > b;
  }
};
struct GreaterEqual {
  template <typename T>
  TESSEL_HOST_DEVICE bool operator()(T a, T b) const {
    return a >= b;
  }
};
struct Equal {
  template <typename T>
  TESSEL_HOST_DEVICE bool operator()(T a, T b) const {
    return a == b;
  }
};
struct NotEqual {  // true for NaN against anything, as IEEE and numpy
  template <typename T>
  TESSEL_HOST_DEVICE bool operator()(T a, T b) const {
    return a != b;
  }
};

// ---- the GPU's tables ----------------------------------------------------------------------

// A list of functor types; an op's GPU kernel is named by its functor's index in its list.
template <typename... Ops>
struct OpList {};

using UnaryOps = OpList<Negative, Exp, Log, Sqrt, Rsqrt, Tanh, Relu, Gelu, GeluErf, Sigmoid,
                        AddScalar, MultiplyScalar, Square, Abs, Sin, Cos, Silu, PowScalar>;
using BinaryOps =
    OpList<Add, Subtract, Multiply, Divide, Maximum, Minimum, MaskGreater, MaskGreaterEqual,
           ReluGrad, TanhGrad, GeluGrad, GeluErfGrad, SigmoidGrad, Pow, AbsGrad, SiluGrad>;

// The index of Op in List (a compile error when it is not there).
template <typename Op, typename List>
struct IndexIn;
template <typename Op, typename... Rest>
struct IndexIn<Op, OpList<Op, Rest...>> {
  static constexpr int value = 0;
};
template <typename Op, typename First, typename... Rest>
struct IndexIn<Op, OpList<First, Rest...>> {
  static constexpr int value = 1 + IndexIn<Op, OpList<Rest...>>::value;
};
template <typename Op, typename List>
constexpr int index_in = IndexIn<Op, List>::value;

#undef TESSEL_UNARY_FUNCTOR
#undef TESSEL_BINARY_FUNCTOR

}  // namespace elementwise
}  // namespace tessel::detail
