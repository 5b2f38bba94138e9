// The optimizer op family: Adam's update as three one-pass kernels instead of ten elementwise
// ops (each a pass over memory and an allocation), the way fused optimizers (apex FusedAdam,
// optax) do it:
//   "ema"         (m, g)    -> beta * m + (1 - beta) * g          (OpAttrs::beta)
//   "ema_square"  (v, g)    -> beta * v + (1 - beta) * g * g      (OpAttrs::beta)
//   "adam_apply"  (p, m, v) -> decay * p - lr_t * m / (sqrt(v) + eps)
//                                 (OpAttrs::learning_rate = lr_t, OpAttrs::epsilon = eps,
//                                  OpAttrs::scale = decay: AdamW's decoupled weight decay
//                                  1 - lr * weight_decay; unset: 1)
// Sharding rule: every input in the first input's layout (the parameter's), no Partial: the
// update runs where the parameter lives. No VJP (optimizer state is not differentiated).
#include <cmath>
#include <optional>
#include <tuple>
#include <type_traits>

#include "dtensor/ops/op_families.h"
#include "dtensor/framework/op_util.h"
#include "tessel/core/parallel.h"

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

// Elements one intra-op thread takes at the least.
constexpr int64_t kGrain = int64_t{1} << 15;

// An attribute a fused kernel reads, and its value where the call leaves it unset.
struct ScalarAttr {
  std::optional<double> OpAttrs::*field;
  double unset = 0.0;
};

// Registers an op of N inputs whose kernel computes f(scalars..., inputs...) element by element,
// the scalars being the call's attributes `scalars` in order.
template <int N, typename F, typename... Scalars>
void add_fused(OpRegistry& registry, const char* name, F f, Scalars... scalars) {
  static_assert(N == 2 || N == 3);
  static_assert((std::is_same_v<Scalars, ScalarAttr> && ...));
  OpDef def;
  def.name = name;
  def.num_inputs = N;
  def.infer = [name](const std::vector<TensorSpec>& in, const OpAttrs&) {
    return same_as_first(in, name);
  };
  def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
    return follow_first(in);
  };
  def.kernel = [name, f, scalars...](const std::vector<Tensor>& in, Tensor& out,
                                     const OpAttrs& attrs, const LocalContext&) {
    dispatch_float(out.dtype(), name, [&]<typename T>() {
      const std::tuple s{static_cast<T>((attrs.*scalars.field).value_or(scalars.unset))...};
      const auto element = [&](auto... x) {
        return std::apply([&](auto... v) { return f(v..., x...); }, s);
      };
      T* o = out.data<T>();
      const T* a = in[0].data<T>();
      const T* b = in[1].data<T>();
      const T* c = N == 3 ? in[2].data<T>() : nullptr;
      parallel_for(out.num_elements(), kGrain, [&](int64_t first, int64_t last) {
        if constexpr (N == 3) {
          for (int64_t i = first; i < last; ++i) o[i] = element(a[i], b[i], c[i]);
        } else {
          for (int64_t i = first; i < last; ++i) o[i] = element(a[i], b[i]);
        }
      });
    });
  };
  registry.add(std::move(def));
}

}  // namespace

void register_optimizer_ops(OpRegistry& registry) {
  add_fused<2>(
      registry, "ema", [](auto beta, auto m, auto g) { return beta * m + (1 - beta) * g; },
      ScalarAttr{&OpAttrs::beta});
  add_fused<2>(
      registry, "ema_square",
      [](auto beta, auto v, auto g) { return beta * v + (1 - beta) * g * g; },
      ScalarAttr{&OpAttrs::beta});
  add_fused<3>(
      registry, "adam_apply",
      [](auto lr, auto eps, auto decay, auto p, auto m, auto v) {
        return decay * p - lr * m / (std::sqrt(v) + eps);
      },
      ScalarAttr{&OpAttrs::learning_rate}, ScalarAttr{&OpAttrs::epsilon},
      ScalarAttr{&OpAttrs::scale, 1.0});
}

}  // namespace tessel::detail
