// The GPU kernels of the elementwise ops (gpu_elementwise.cu), for contiguous f32 / f64 blocks:
// the unary ops, add_scalar, multiply_scalar and the binary ops with numpy broadcasting, which
// their family files register beside their CPU kernels (gpu_elementwise.h), and the optimizer's
// fused updates (ema, ema_square, adam_apply), registered here. cast has no GPU kernel.
#include "dtensor/ops/cuda/gpu_elementwise.h"

#include "dtensor/framework/op_util.h"
#include "dtensor/ops/cuda/gpu_kernels.h"
#include "dtensor/ops/cuda/gpu_launch.h"
#include "dtensor/ops/elementwise_math.h"

namespace tessel::detail {
namespace {

using gpu::FusedUpdate;

// ema / ema_square (m or v, g) with OpAttrs::beta; adam_apply (p, m, v) with learning_rate and
// epsilon (ops_optimizer.cpp).
OpDef::Kernel fused_update_kernel(const char* name, FusedUpdate update) {
  return float_gpu_kernel(
      name,
      [update]<typename T>(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                           const LocalContext&, cudaStream_t stream) -> GpuLaunch {
        const bool adam = update == FusedUpdate::kAdamApply;
        const double s0 = (adam ? attrs.learning_rate : attrs.beta).value_or(0.0);
        const double s1 = adam ? attrs.epsilon.value_or(0.0) : 0.0;
        const double s2 = adam ? attrs.scale.value_or(1.0) : 0.0;  // ops_optimizer.cpp's decay
        return gpu::launch_fused_update<T>(update, device_data<T>(in[0]), device_data<T>(in[1]),
                                           adam ? device_data<T>(in[2]) : nullptr,
                                           device_data<T>(out), out.num_elements(), s0, s1, s2,
                                           stream);
      });
}

}  // namespace

OpDef::Kernel gpu_unary_kernel(const char* name, int op) {
  return float_gpu_kernel(
      name,
      [op]<typename T>(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                       const LocalContext&, cudaStream_t stream) -> GpuLaunch {
        return gpu::launch_unary<T>(op, device_data<T>(in[0]), device_data<T>(out),
                                    out.num_elements(), attrs.operand.value_or(0.0), stream);
      });
}

OpDef::Kernel gpu_add_scalar_kernel() {
  return float_gpu_kernel(
      "add_scalar",
      []<typename T>(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                     const LocalContext& context, cudaStream_t stream) -> GpuLaunch {
        if (!first_in_sum_groups(*context.output_layout, context.mesh_offset)) {
          return cudaMemcpyAsync(out.data_ptr(), in[0].data_ptr(), out.nbytes(),
                                 cudaMemcpyDeviceToDevice, stream);
        }
        constexpr int kAddScalar =
            elementwise::index_in<elementwise::AddScalar, elementwise::UnaryOps>;
        return gpu::launch_unary<T>(kAddScalar, device_data<T>(in[0]), device_data<T>(out),
                                    out.num_elements(), attrs.operand.value_or(0.0), stream);
      });
}

OpDef::Kernel gpu_binary_kernel(const char* name, int op) {
  return float_gpu_kernel(
      name,
      [op]<typename T>(const std::vector<Tensor>& in, Tensor& out, const OpAttrs&,
                       const LocalContext&, cudaStream_t stream) -> GpuLaunch {
        const BroadcastDims dims = broadcast_dims(in[0], in[1], out.shape());
        if (dims.extent.size() > static_cast<size_t>(gpu::BroadcastIndex::kMaxDims))
          return std::nullopt;
        gpu::BroadcastIndex index;
        index.dims = static_cast<int>(dims.extent.size());
        for (size_t d = 0; d < dims.extent.size(); ++d) {
          index.extent[d] = dims.extent[d];
          index.a_stride[d] = dims.a_stride[d];
          index.b_stride[d] = dims.b_stride[d];
        }
        return gpu::launch_binary<T>(op, device_data<T>(in[0]), device_data<T>(in[1]),
                                     device_data<T>(out), out.num_elements(), index, stream);
      });
}

void register_gpu_elementwise_kernels(OpRegistry& registry) {
  const std::pair<const char*, FusedUpdate> updates[] = {{"ema", FusedUpdate::kEma},
                                                         {"ema_square", FusedUpdate::kEmaSquare},
                                                         {"adam_apply", FusedUpdate::kAdamApply}};
  for (const auto& [name, update] : updates)
    registry.set_gpu_kernel(name, fused_update_kernel(name, update));
}

}  // namespace tessel::detail
