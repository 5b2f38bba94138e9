// The GPU kernels of the fused causal attention (gpu_attention.cu) for contiguous f32 / f64
// [B, T, H, D] blocks of head width 32 or 64 (f32 also 128): causal_attention, and
// causal_attention_grad writing dq, dk and dv into its [3, B, T, H, D] output. Other widths,
// and more (b, h) pairs in a block than a grid's second dimension holds, run host-staged.
#include "dtensor/ops/attention_geometry.h"
#include "dtensor/ops/cuda/gpu_kernels.h"
#include "dtensor/ops/cuda/gpu_launch.h"

namespace tessel::detail {
namespace {

constexpr int64_t kMaxPairs = 65535;  // a CUDA grid's y extent

// The kernels' view of a call, or nullopt when they do not cover it.
template <typename T>
std::optional<gpu::AttentionShape> kernel_shape(const Shape& local, const Box& block,
                                                const Shape& global, const OpAttrs& attrs) {
  const AttentionGeometry g = attention_geometry(local, block, global, attrs);
  if (!gpu::attention_head_width_compiled<T>(g.d) || g.pairs > kMaxPairs) return std::nullopt;
  return gpu::AttentionShape{g.pairs, g.local_heads, g.t,           g.d,     g.row_stride,
                             g.heads, g.first_batch, g.first_head, g.scale, g.rate,
                             g.seed};
}

OpDef::Kernel causal_attention_kernel() {
  return float_gpu_kernel(
      "causal_attention",
      []<typename T>(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                     const LocalContext& context, cudaStream_t stream) -> GpuLaunch {
        const auto shape =
            kernel_shape<T>(out.shape(), context.output_block, context.output_shape, attrs);
        if (!shape) return std::nullopt;
        return gpu::launch_causal_attention<T>(*shape, device_data<T>(in[0]),
                                               device_data<T>(in[1]), device_data<T>(in[2]),
                                               device_data<T>(out), stream);
      });
}

OpDef::Kernel causal_attention_grad_kernel() {
  return float_gpu_kernel(
      "causal_attention_grad",
      []<typename T>(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                     const LocalContext& context, cudaStream_t stream) -> GpuLaunch {
        const auto shape = kernel_shape<T>(in[0].shape(), context.input_blocks[0],
                                           context.input_shapes[0], attrs);
        if (!shape) return std::nullopt;
        const int64_t n = in[0].num_elements();
        T* d = device_data<T>(out);
        return gpu::launch_causal_attention_grad<T>(
            *shape, device_data<T>(in[0]), device_data<T>(in[1]), device_data<T>(in[2]),
            device_data<T>(in[3]), device_data<T>(in[4]), d, d + n, d + 2 * n, stream);
      });
}

}  // namespace

void register_gpu_attention_kernels(OpRegistry& registry) {
  registry.set_gpu_kernel("causal_attention", causal_attention_kernel());
  registry.set_gpu_kernel("causal_attention_grad", causal_attention_grad_kernel());
}

}  // namespace tessel::detail
