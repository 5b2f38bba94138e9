// The dropout op family (registered by register_dropout_ops): dropout keyed by global element
// index, and stop_gradient.
//   "dropout"(x) -> x / (1 - rate) where u >= rate, else 0; u is element i's value of
//   Tensor::random_uniform(x's global shape, seed): the same mask for every layout, mesh and
//   device count (a sharded run drops exactly the elements a single device drops). rate in
//   OpAttrs::rate, [0, 1); the seed in OpAttrs::seed (a training loop derives one per step and
//   layer). TF's stateless_dropout(x, rate, seed), with tessel's own generator.
//   "stop_gradient"(x) -> x, with no gradient (TF's stop_gradient).
//
// Sharding rule: the output has the input's layout; a Partial input is reduced first (the mask
// is per element of the whole tensor). VJP of dropout: dropout(g) with the same rate and seed (the
// same mask, whatever g's layout).
#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/counter_random.h"
#include "dtensor/framework/op_util.h"
#include "dtensor/ops/cpu_row_math.h"
#include "dtensor/ops/cpu_vector_math.h"
#include "dtensor/ops/op_families.h"
#include "tessel/core/parallel.h"
#include "tessel/dtensor/ops.h"

namespace tessel {
namespace detail {
namespace {

constexpr std::string_view kDropout = "dropout";
constexpr std::string_view kStopGradient = "stop_gradient";

TensorSpec same_spec(const std::vector<TensorSpec>& in, std::string_view op, bool floats_only) {
  if (floats_only) require_float(in[0].dtype, op, "dtype");
  return {in[0].shape, in[0].dtype, {}};
}

ShardingDecision without_partial(const std::vector<TensorSpec>& in) {
  const Layout l = in[0].layout.without_partial();
  return {{l}, l};
}

void dropout_kernel(const Tensor& x, Tensor& out, const OpAttrs& attrs,
                    const LocalContext& context) {
  if (out.num_elements() == 0) return;
  const Box& block = context.output_block;
  const double rate = attrs.rate.value_or(0.0);
  const uint64_t seed = attrs.seed.value_or(0);
  // Row by row along the last axis: a row's elements are consecutive global indices.
  const int rank = out.rank();
  const int64_t row_length = rank > 0 ? out.shape()[rank - 1] : 1;
  const int64_t rows = out.num_elements() / row_length;
  const std::vector<int64_t> global_strides = context.output_shape.strides();
  const auto first_index = [&](int64_t row) {  // the global flat index of the row's first element
    int64_t index = rank > 0 ? block.offsets[static_cast<size_t>(rank - 1)] : 0;
    for (int d = rank - 2; d >= 0; --d) {
      const int64_t extent = out.shape()[d];
      index += (block.offsets[static_cast<size_t>(d)] + row % extent) *
               global_strides[static_cast<size_t>(d)];
      row /= extent;
    }
    return static_cast<uint64_t>(index);
  };
  dispatch_float(out.dtype(), kDropout, [&]<typename T>() {
    const T* px = x.data<T>();
    T* po = out.data<T>();
    const T scale = static_cast<T>(1.0 / (1.0 - rate));
    parallel_for(rows, vec::rows_per_range(row_length), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const uint64_t first = first_index(r);
        const T* xr = px + r * row_length;
        T* yr = po + r * row_length;
        if constexpr (std::is_same_v<T, float>) {  // the same test in vector lanes
          vec::dropout_row(xr, yr, row_length, counter_stream(seed), first, keep_threshold(rate),
                           scale);
        } else {
          for (int64_t j = 0; j < row_length; ++j) {
            yr[j] =
                uniform_at(seed, first + static_cast<uint64_t>(j)) >= rate ? xr[j] * scale : T(0);
          }
        }
      }
    });
  });
}

}  // namespace

void register_dropout_ops(OpRegistry& registry) {
  OpDef dropout;
  dropout.name = std::string(kDropout);
  dropout.num_inputs = 1;
  dropout.infer = [](const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
    const double rate = attrs.rate.value_or(0.0);
    if (!(rate >= 0.0 && rate < 1.0)) {
      throw_invalid(kDropout, "rate must be in [0, 1), got {}", rate);
    }
    return same_spec(in, kDropout, /*floats_only=*/true);
  };
  dropout.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
    return without_partial(in);
  };
  dropout.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                      const LocalContext& context) { dropout_kernel(in[0], out, attrs, context); };
  dropout.vjp = [](const VjpArgs& a) {
    return std::vector<DTensor>{call_op(kDropout, {a.grad}, *a.attrs)};
  };
  dropout.saves = VjpSaves::nothing();  // the mask is made again from the seed
  registry.add(std::move(dropout));

  OpDef stop;
  stop.name = std::string(kStopGradient);
  stop.num_inputs = 1;
  stop.infer = [](const std::vector<TensorSpec>& in, const OpAttrs&) {
    return same_spec(in, kStopGradient, /*floats_only=*/false);
  };
  stop.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
    return ShardingDecision{{in[0].layout}, in[0].layout};  // Partial stays pending
  };
  stop.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs&,
                   const LocalContext&) {
    if (out.num_elements() > 0) out.copy_from(in[0]);
  };
  stop.vjp = [](const VjpArgs&) { return std::vector<DTensor>{DTensor()}; };
  stop.saves = VjpSaves::nothing();
  registry.add(std::move(stop));
}

}  // namespace detail

DTensor dropout(const DTensor& x, double rate, uint64_t seed) {
  if (rate == 0.0) return x;
  OpAttrs attrs;
  attrs.rate = rate;
  attrs.seed = seed;
  return call_op(detail::kDropout, {x}, attrs);
}

DTensor stop_gradient(const DTensor& x) { return call_op(detail::kStopGradient, {x}); }

}  // namespace tessel
