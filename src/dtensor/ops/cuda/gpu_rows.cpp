// The GPU kernels of the row-wise ops (gpu_rows.cu) for contiguous f32 / f64 blocks:
//   reduce_sum / reduce_mean / reduce_max whose reduced axes are adjacent once size-1 axes are
//     dropped (the block seen as [outer, reduced, inner]); other axis sets run host-staged;
//   softmax and log_softmax over the last axis;
//   causal_softmax and causal_softmax_grad (their rows' global query positions from the block's
//     offset);
//   layer_norm, layer_norm_with_bias, layer_norm_stats, layer_norm_grad and
//   layer_norm_weight_grad over the last axis (the gradients from the statistics, f64), and
//   rms_norm's four alike (the same kernels, the mean taken as 0).
// The reductions' gradient ops have no GPU kernel yet.
#include "dtensor/framework/op_util.h"
#include "dtensor/ops/cuda/gpu_kernels.h"
#include "dtensor/ops/cuda/gpu_launch.h"

namespace tessel::detail {
namespace {

// A reduced block as [outer, reduced, inner], when its reduced axes are adjacent.
struct ReduceShape {
  int64_t outer = 1;
  int64_t reduced = 1;
  int64_t inner = 1;
};

// Size-1 axes are dropped (reduced or not, they add nothing); what remains must be kept axes,
// then reduced axes, then kept axes (each group possibly empty).
std::optional<ReduceShape> reduce_shape(const Shape& shape, const std::vector<bool>& mask) {
  ReduceShape r;
  int group = 0;  // 0: before the reduced axes, 1: among them, 2: after them
  for (int d = 0; d < shape.rank(); ++d) {
    const int64_t e = shape[d];
    if (e == 1) continue;
    const bool reduced = mask[static_cast<size_t>(d)];
    if (reduced && group == 2) return std::nullopt;  // a second run of reduced axes
    if (reduced) group = 1;
    if (!reduced && group == 1) group = 2;
    (group == 0 ? r.outer : group == 1 ? r.reduced : r.inner) *= e;
  }
  return r;
}

OpDef::Kernel reduce_kernel(const char* name, gpu::Reduction kind, bool mean) {
  return float_gpu_kernel(
      name,
      [name, kind, mean]<typename T>(const std::vector<Tensor>& in, Tensor& out,
                                     const OpAttrs& attrs, const LocalContext& context,
                                     cudaStream_t stream) -> GpuLaunch {
        const std::vector<bool> mask = reduced_mask(attrs.axes, context.input_shapes[0], name);
        const std::optional<ReduceShape> s = reduce_shape(in[0].shape(), mask);
        if (!s) return std::nullopt;
        T divisor = 1;
        if (mean) {  // the GLOBAL count of reduced elements (ops_reduction.cpp)
          int64_t count = 1;
          for (int d = 0; d < context.input_shapes[0].rank(); ++d) {
            if (mask[static_cast<size_t>(d)]) count *= context.input_shapes[0][d];
          }
          divisor = static_cast<T>(count);
        }
        return gpu::launch_reduce<T>(kind, device_data<T>(in[0]), device_data<T>(out), s->outer,
                                     s->reduced, s->inner, divisor, stream);
      });
}

// The last axis's extent and the number of rows of a block ([rows, last] once flattened).
std::pair<int64_t, int64_t> rows_of(const Tensor& t) {
  const int64_t last = t.shape()[t.rank() - 1];
  return {last == 0 ? 0 : t.num_elements() / last, last};
}

OpDef::Kernel softmax_kernel(const char* name, bool log) {
  return float_gpu_kernel(
      name,
      [log]<typename T>(const std::vector<Tensor>& in, Tensor& out, const OpAttrs&,
                        const LocalContext&, cudaStream_t stream) -> GpuLaunch {
        const auto [rows, classes] = rows_of(out);
        return gpu::launch_softmax<T>(device_data<T>(in[0]), device_data<T>(out), rows, classes,
                                      log, stream);
      });
}

// The first block row's visible key count: query i of the block (global first_query + i)
// sees keys j <= first_query + i + keys - queries.
int64_t first_visible(const Tensor& out, const LocalContext& context) {
  const int rank = out.rank();
  const int64_t keys = out.shape()[rank - 1];
  const int64_t queries = context.output_shape[rank - 2];
  const int64_t first_query = context.output_block.offsets[static_cast<size_t>(rank - 2)];
  return first_query + (keys - queries) + 1;
}

OpDef::Kernel causal_softmax_kernel() {
  return float_gpu_kernel(
      "causal_softmax",
      []<typename T>(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                     const LocalContext& context, cudaStream_t stream) -> GpuLaunch {
        const auto [rows, keys] = rows_of(out);
        return gpu::launch_causal_softmax<T>(
            device_data<T>(in[0]), device_data<T>(out), rows, out.shape()[out.rank() - 2], keys,
            first_visible(out, context), static_cast<T>(attrs.scale.value_or(1.0)), stream);
      });
}

OpDef::Kernel causal_softmax_grad_kernel() {
  return float_gpu_kernel(
      "causal_softmax_grad",
      []<typename T>(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                     const LocalContext& context, cudaStream_t stream) -> GpuLaunch {
        const auto [rows, keys] = rows_of(out);
        return gpu::launch_causal_softmax_grad<T>(
            device_data<T>(in[0]), device_data<T>(in[1]), device_data<T>(out), rows,
            out.shape()[out.rank() - 2], keys, first_visible(out, context),
            static_cast<T>(attrs.scale.value_or(1.0)), stream);
      });
}

// layer_norm (x, weight), layer_norm_with_bias (x, weight, bias) and, not centered, rms_norm.
OpDef::Kernel layer_norm_kernel(const char* name, bool centered) {
  return float_gpu_kernel(
      name,
      [centered]<typename T>(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                             const LocalContext&, cudaStream_t stream) -> GpuLaunch {
        const auto [rows, n] = rows_of(out);
        const T* bias = in.size() > 2 ? device_data<T>(in[2]) : nullptr;
        return gpu::launch_layer_norm<T>(device_data<T>(in[0]), device_data<T>(in[1]), bias,
                                         device_data<T>(out), rows, n, attrs.epsilon.value_or(0.0),
                                         centered, stream);
      });
}

// The layer norm ops that read or write x's f64 statistics: covered when `stats` is a contiguous
// f64 block and `values` (x first, the float output last where there is one) are contiguous
// blocks of one float dtype.
bool norm_blocks_covered(const std::vector<Tensor>& values, const Tensor& stats) {
  return stats.dtype() == DType::kF64 && contiguous_blocks({}, stats) &&
         contiguous_float_blocks({values.begin(), values.end() - 1}, values.back());
}

// layer_norm_stats (x) -> [rows, 2] f64, T being x's element type; not centered: rms_norm_stats.
template <bool centered>
void layer_norm_stats_kernel(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                             const LocalContext& context) {
  run_gpu_kernel(centered ? "layer_norm_stats" : "rms_norm_stats",
                 norm_blocks_covered({in[0]}, out), in, out, attrs, context,
                 [&](cudaStream_t stream) -> GpuLaunch {
                   const int64_t n = in[0].shape()[in[0].rank() - 1];
                   const int64_t rows = n == 0 ? 0 : in[0].num_elements() / n;
                   const double epsilon = attrs.epsilon.value_or(0.0);
                   if (in[0].dtype() == DType::kF64) {
                     return gpu::launch_layer_norm_stats<double>(device_data<double>(in[0]),
                                                                 device_data<double>(out), rows, n,
                                                                 epsilon, centered, stream);
                   }
                   return gpu::launch_layer_norm_stats<float>(device_data<float>(in[0]),
                                                              device_data<double>(out), rows, n,
                                                              epsilon, centered, stream);
                 });
}

// layer_norm_grad (x, weight, g, stats): T is the output's; not centered: rms_norm_grad.
template <bool centered>
void layer_norm_grad_kernel(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                            const LocalContext& context) {
  run_gpu_kernel(centered ? "layer_norm_grad" : "rms_norm_grad",
                 norm_blocks_covered({in[0], in[1], in[2], out}, in[3]), in, out, attrs, context,
                 [&](cudaStream_t stream) -> GpuLaunch {
                   const auto [rows, n] = rows_of(out);
                   const auto launch = [&]<typename T>() {
                     return gpu::launch_layer_norm_grad<T>(
                         device_data<T>(in[0]), device_data<T>(in[1]), device_data<T>(in[2]),
                         device_data<double>(in[3]), device_data<T>(out), rows, n, centered,
                         stream);
                   };
                   return out.dtype() == DType::kF64 ? launch.template operator()<double>()
                                                     : launch.template operator()<float>();
                 });
}

// layer_norm_weight_grad (x, g, stats): T is the output's. rms_norm_weight_grad is the same
// kernel (its statistics' means are 0).
template <bool centered>
void layer_norm_weight_grad_kernel(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                                   const LocalContext& context) {
  run_gpu_kernel(centered ? "layer_norm_weight_grad" : "rms_norm_weight_grad",
                 norm_blocks_covered({in[0], in[1], out}, in[2]), in, out, attrs, context,
                 [&](cudaStream_t stream) -> GpuLaunch {
                   const int64_t n = out.num_elements();
                   const int64_t rows = n == 0 ? 0 : in[0].num_elements() / n;
                   const auto launch = [&]<typename T>() {
                     return gpu::launch_layer_norm_weight_grad<T>(
                         device_data<T>(in[0]), device_data<T>(in[1]), device_data<double>(in[2]),
                         device_data<T>(out), rows, n, stream);
                   };
                   return out.dtype() == DType::kF64 ? launch.template operator()<double>()
                                                     : launch.template operator()<float>();
                 });
}

}  // namespace

void register_gpu_row_kernels(OpRegistry& registry) {
  registry.set_gpu_kernel("reduce_sum", reduce_kernel("reduce_sum", gpu::Reduction::kSum, false));
  registry.set_gpu_kernel("reduce_mean", reduce_kernel("reduce_mean", gpu::Reduction::kSum, true));
  registry.set_gpu_kernel("reduce_max", reduce_kernel("reduce_max", gpu::Reduction::kMax, false));
  registry.set_gpu_kernel("softmax", softmax_kernel("softmax", false));
  registry.set_gpu_kernel("log_softmax", softmax_kernel("log_softmax", true));
  registry.set_gpu_kernel("causal_softmax", causal_softmax_kernel());
  registry.set_gpu_kernel("causal_softmax_grad", causal_softmax_grad_kernel());
  registry.set_gpu_kernel("layer_norm", layer_norm_kernel("layer_norm", true));
  registry.set_gpu_kernel("layer_norm_with_bias", layer_norm_kernel("layer_norm_with_bias", true));
  registry.set_gpu_kernel("layer_norm_stats", layer_norm_stats_kernel<true>);
  registry.set_gpu_kernel("layer_norm_grad", layer_norm_grad_kernel<true>);
  registry.set_gpu_kernel("layer_norm_weight_grad", layer_norm_weight_grad_kernel<true>);
  registry.set_gpu_kernel("rms_norm", layer_norm_kernel("rms_norm", false));
  registry.set_gpu_kernel("rms_norm_stats", layer_norm_stats_kernel<false>);
  registry.set_gpu_kernel("rms_norm_grad", layer_norm_grad_kernel<false>);
  registry.set_gpu_kernel("rms_norm_weight_grad", layer_norm_weight_grad_kernel<false>);
}

}  // namespace tessel::detail
