// Internal: what the elementwise family's files share (ops_elementwise.cpp: the binary ops;
// ops_unary.cpp: the unary ops and their derivative ops; ops_compare.cpp: the comparisons and
// where): the CPU loops every elementwise kernel runs, the registration of an op with its CPU
// kernel and, beside it, its GPU kernel, and the broadcasting helpers of the rules and VJPs.
//
// The loops are plain loops over contiguous arrays calling one functor of elementwise_math.h,
// the functor chosen outside the loop (a template argument), so that the compiler inlines it and
// can vectorize: map_unary for the unary ops, map_binary for the binary ops' equal and scalar
// blocks, and binary_loop's odometer over coalesced dimensions for the other broadcasts.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dtensor/framework/op_util.h"
#include "dtensor/ops/cpu_vector_math.h"
#include "dtensor/ops/cuda/gpu_elementwise.h"
#include "dtensor/ops/elementwise_math.h"
#include "tessel/core/parallel.h"
#include "tessel/dtensor/op_registry.h"

namespace tessel::detail {

using VjpFn = std::function<std::vector<DTensor>(const VjpArgs&)>;

// ---- CPU loops ---------------------------------------------------------------------------------

// out[i] = f(x[i]) for i < n.
template <typename T, typename F>
void map_unary(const T* x, T* out, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) out[i] = f(x[i]);
}

// out[i] = f(a[i], b[i]) for i < n; a or b of stride 0 repeat their first element. R, the
// result's type, is T's but for the comparisons' bool.
template <typename T, typename R, typename F>
void map_binary(const T* a, const T* b, R* out, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
}
template <typename T, typename R, typename F>
void map_binary_scalar_a(T a, const T* b, R* out, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) out[i] = f(a, b[i]);
}
template <typename T, typename R, typename F>
void map_binary_scalar_b(const T* a, T b, R* out, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b);
}

// Elements one intra-op thread (core/parallel.h) takes at the least: below this a split costs
// more than it saves.
constexpr int64_t kElementwiseGrain = int64_t{1} << 15;

// out = f(x) elementwise over contiguous blocks of one shape, split over the intra-op threads;
// float32 GELU (exact) and SiLU run cpu_vector_math.h's vectorised loops instead of libm's scalar
// erf and exp.
template <typename T, typename F>
void unary_loop(const Tensor& x, Tensor& out, F f) {
  const int64_t n = out.num_elements();
  if (n == 0) return;
  const T* px = x.data<T>();
  T* po = out.data<T>();
  if constexpr (std::is_same_v<T, float> && std::is_same_v<F, elementwise::GeluErf>) {
    vec::gelu_erf(px, po, n);
  } else if constexpr (std::is_same_v<T, float> && std::is_same_v<F, elementwise::Silu>) {
    vec::silu(px, po, n);
  } else {
    tessel::parallel_for(n, kElementwiseGrain,
                         [&](int64_t b, int64_t e) { map_unary(px + b, po + b, e - b, f); });
  }
}

// out = f(a, b) elementwise, a and b broadcast (numpy) to out's block (contiguous blocks); out's
// elements are R (T, or bool for a comparison).
template <typename T, typename R = T, typename F>
void binary_loop(const Tensor& a, const Tensor& b, Tensor& out, F f) {
  const int64_t n = out.num_elements();
  if (n == 0) return;
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  R* po = out.data<R>();
  const int64_t na = a.num_elements();
  const int64_t nb = b.num_elements();
  if (na == n && nb == n) {
    if constexpr (std::is_same_v<T, float> && std::is_same_v<F, elementwise::GeluErfGrad>) {
      return vec::gelu_erf_grad(pa, pb, po, n);  // (grad, x), vectorised
    }
    if constexpr (std::is_same_v<T, float> && std::is_same_v<F, elementwise::SiluGrad>) {
      return vec::silu_grad(pa, pb, po, n);  // (grad, x), vectorised
    }
    return tessel::parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
      map_binary(pa + b, pb + b, po + b, e - b, f);
    });
  }
  if (na == 1 && nb == n) {
    return tessel::parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
      map_binary_scalar_a(pa[0], pb + b, po + b, e - b, f);
    });
  }
  if (nb == 1 && na == n) {
    return tessel::parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
      map_binary_scalar_b(pa + b, pb[0], po + b, e - b, f);
    });
  }
  // General broadcast: the outer dims as an odometer, the innermost run as a loop.
  const BroadcastDims loop = broadcast_dims(a, b, out.shape());
  const std::vector<int64_t>& ext = loop.extent;
  const std::vector<int64_t>& sa = loop.a_stride;
  const std::vector<int64_t>& sb = loop.b_stride;
  const size_t dims = ext.size();  // >= 1: n > 1 here
  const int64_t inner = ext[dims - 1];
  const int64_t ia_step = sa[dims - 1];
  const int64_t ib_step = sb[dims - 1];
  std::vector<int64_t> counter(dims, 0);
  int64_t oa = 0, ob = 0;
  for (int64_t o = 0; o < n; o += inner) {
    R* dst = po + o;
    const T* xa = pa + oa;
    const T* xb = pb + ob;
    if (ia_step == 1 && ib_step == 1) {
      map_binary(xa, xb, dst, inner, f);
    } else if (ia_step == 0 && ib_step == 1) {
      map_binary_scalar_a(xa[0], xb, dst, inner, f);
    } else if (ia_step == 1 && ib_step == 0) {
      map_binary_scalar_b(xa, xb[0], dst, inner, f);
    } else {
      for (int64_t i = 0; i < inner; ++i) dst[i] = f(xa[i * ia_step], xb[i * ib_step]);
    }
    // Advance the outer dims (odometer).
    for (size_t d = dims - 1; d-- > 0;) {
      oa += sa[d];
      ob += sb[d];
      if (++counter[d] < ext[d]) break;
      oa -= sa[d] * ext[d];
      ob -= sb[d] * ext[d];
      counter[d] = 0;
    }
  }
}

// ---- registration ------------------------------------------------------------------------------

// Op `name`'s CPU kernel: the functor F on the block's dtype (f32, f64).
template <typename F>
OpDef::Kernel unary_cpu_kernel(std::string name) {
  return [name = std::move(name)](const std::vector<Tensor>& in, Tensor& out, const OpAttrs&,
                                  const LocalContext&) {
    dispatch_float(out.dtype(), name, [&]<typename T>() { unary_loop<T>(in[0], out, F{}); });
  };
}
template <typename F>
OpDef::Kernel binary_cpu_kernel(std::string name) {
  return [name = std::move(name)](const std::vector<Tensor>& in, Tensor& out, const OpAttrs&,
                                  const LocalContext&) {
    dispatch_float(out.dtype(), name,
                   [&]<typename T>() { binary_loop<T>(in[0], in[1], out, F{}); });
  };
}

template <typename F, typename... Ops>
constexpr bool is_one_of(elementwise::OpList<Ops...>) {
  return (std::is_same_v<F, Ops> || ...);
}

// Registers `def` (name, arity, shape inference, sharding rule) with the functor F, one of
// elementwise_math.h's UnaryOps or BinaryOps, as its CPU and GPU kernel, and `vjp`, which reads
// `saves` of a call (OpDef::saves).
template <typename F>
void add_elementwise(OpRegistry& registry, OpDef def, VjpSaves saves, VjpFn vjp) {
  namespace ew = elementwise;
  if constexpr (is_one_of<F>(ew::UnaryOps{})) {
    def.kernel = unary_cpu_kernel<F>(def.name);
    def.gpu_kernel = gpu_unary_kernel(def.name.c_str(), ew::index_in<F, ew::UnaryOps>);
  } else {
    static_assert(is_one_of<F>(ew::BinaryOps{}), "F must be in UnaryOps or BinaryOps");
    def.kernel = binary_cpu_kernel<F>(def.name);
    def.gpu_kernel = gpu_binary_kernel(def.name.c_str(), ew::index_in<F, ew::BinaryOps>);
  }
  def.vjp = std::move(vjp);
  def.saves = saves;
  registry.add(std::move(def));
}

// Which inputs of a binary op may stay Partial (ops_elementwise.cpp's file comment).
enum class BinaryPartial { kNone, kBoth, kLarger, kFirst };

// A binary op's name, arity, shape inference (numpy broadcasting, one float dtype) and sharding
// rule (ops_elementwise.cpp); the caller adds the kernels and the VJP.
OpDef binary_def(const char* name, BinaryPartial rule);

// `g` (a binary op's output shape) summed over the dims an input of shape `shape` was broadcast
// along, to `shape` (the gradient of a broadcast input).
DTensor sum_to(const DTensor& g, const Shape& shape);

// The layout a binary or ternary op demands of an operand of shape `operand` for an output of
// shape `out` sharded as `out_specs`: the output's spec on each dim it does not broadcast (numpy
// alignment: trailing dims), unsharded on those it does (a size-1 dim), Partial over `partial`.
Layout operand_layout(const std::vector<ShardingSpec>& out_specs, const Shape& operand,
                      const Shape& out, const Mesh& mesh, std::vector<PartialDim> partial = {});

// A host scalar as a replicated rank-0 DTensor of `like`'s dtype on its mesh and runtime (a
// broadcast operand).
DTensor scalar_like(double value, const DTensor& like);

// Registers binary op `name`: binary_def and add_elementwise.
template <typename F>
void add_binary(OpRegistry& registry, const char* name, BinaryPartial rule, VjpSaves saves,
                VjpFn vjp) {
  add_elementwise<F>(registry, binary_def(name, rule), saves, std::move(vjp));
}

}  // namespace tessel::detail
