// The optimizer op family: Adam's update as three one-pass kernels instead of ten elementwise
// ops (each a pass over memory and an allocation), the way fused optimizers (apex FusedAdam,
// optax) do it:
//   "ema"         (m, g)    -> beta * m + (1 - beta) * g          (OpAttrs::scalar = beta)
//   "ema_square"  (v, g)    -> beta * v + (1 - beta) * g * g      (OpAttrs::scalar = beta)
//   "adam_apply"  (p, m, v) -> p - lr_t * m / (sqrt(v) + eps)     (scalar = lr_t, scalar2 = eps)
// Sharding rule: every input in the first input's layout (the parameter's), no Partial: the
// update runs where the parameter lives. No VJP (optimizer state is not differentiated).
#include <cmath>

#include "dtensor/op_families.h"
#include "dtensor/op_util.h"

namespace tessel::detail {
namespace {

TensorSpec same_as_first(const std::vector<TensorSpec>& in, std::string_view op) {
  for (size_t i = 1; i < in.size(); ++i) {
    if (!(in[i].shape == in[0].shape) || in[i].dtype != in[0].dtype) {
      throw_invalid(op, "input {} is {} {}, input 0 is {} {}", i, in[i].shape.to_string(),
                    dtype_name(in[i].dtype), in[0].shape.to_string(), dtype_name(in[0].dtype));
    }
  }
  return in[0];
}

ShardingDecision follow_first(const std::vector<TensorSpec>& in) {
  const Layout layout = in[0].layout.without_partial();
  return {std::vector<Layout>(in.size(), layout), layout};
}

// Registers an op of `n` inputs whose kernel applies `f(attrs, inputs...)` element by element.
template <int N, typename F>
void add_fused(OpRegistry& registry, const char* name, F f) {
  OpDef def;
  def.name = name;
  def.num_inputs = N;
  def.infer = [name](const std::vector<TensorSpec>& in, const OpAttrs&) {
    return same_as_first(in, name);
  };
  def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
    return follow_first(in);
  };
  def.kernel = [name, f](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                         const LocalContext&) {
    dispatch_float(out.dtype(), name, [&]<typename T>() {
      T* o = out.data<T>();
      const T* a = in[0].data<T>();
      const T* b = in[1].data<T>();
      const T* c = N > 2 ? in[2].data<T>() : nullptr;
      const T s1 = static_cast<T>(attrs.scalar), s2 = static_cast<T>(attrs.scalar2);
      const int64_t n = out.num_elements();
      if (c != nullptr) {
        for (int64_t i = 0; i < n; ++i) o[i] = f(s1, s2, a[i], b[i], c[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) o[i] = f(s1, s2, a[i], b[i], T(0));
      }
    });
  };
  registry.add(std::move(def));
}

}  // namespace

void register_optimizer_ops(OpRegistry& registry) {
  add_fused<2>(registry, "ema", [](auto beta, auto, auto m, auto g, auto) {
    return beta * m + (1 - beta) * g;
  });
  add_fused<2>(registry, "ema_square", [](auto beta, auto, auto v, auto g, auto) {
    return beta * v + (1 - beta) * g * g;
  });
  add_fused<3>(registry, "adam_apply", [](auto lr, auto eps, auto p, auto m, auto v) {
    return p - lr * m / (std::sqrt(v) + eps);
  });
}

}  // namespace tessel::detail
