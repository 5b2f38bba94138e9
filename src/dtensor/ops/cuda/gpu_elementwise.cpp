// The GPU kernels of the elementwise ops (gpu_elementwise.cu): the unary ops, add_scalar,
// multiply_scalar, the binary ops with numpy broadcasting, and the optimizer's fused updates
// (ema, ema_square, adam_apply), for contiguous f32 / f64 blocks.
// Other blocks, and broadcasts that keep more than BroadcastIndex::kMaxDims dimensions after
// merging, run host-staged. cast has no GPU kernel.
#include "dtensor/ops/cuda/gpu_kernels.h"
#include "dtensor/ops/cuda/gpu_launch.h"
#include "dtensor/framework/op_util.h"

namespace tessel::detail {
namespace {

using gpu::BinaryOp;
using gpu::FusedUpdate;
using gpu::UnaryOp;

OpDef::Kernel unary_kernel(const char* name, UnaryOp op) {
  return float_gpu_kernel(
      name,
      [op]<typename T>(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                       const LocalContext&, cudaStream_t stream) -> GpuLaunch {
        return gpu::launch_unary<T>(op, device_data<T>(in[0]), device_data<T>(out),
                                    out.num_elements(), attrs.operand.value_or(0.0), stream);
      });
}

// add_scalar adds on the first device of each Partial(sum) group only (ops_unary.cpp); the
// others copy their block.
OpDef::Kernel add_scalar_kernel() {
  return float_gpu_kernel(
      "add_scalar",
      []<typename T>(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                     const LocalContext& context, cudaStream_t stream) -> GpuLaunch {
        if (!first_in_sum_groups(*context.output_layout, context.mesh_offset)) {
          return cudaMemcpyAsync(out.data_ptr(), in[0].data_ptr(), out.nbytes(),
                                 cudaMemcpyDeviceToDevice, stream);
        }
        return gpu::launch_unary<T>(UnaryOp::kAddScalar, device_data<T>(in[0]), device_data<T>(out),
                                    out.num_elements(), attrs.operand.value_or(0.0), stream);
      });
}

OpDef::Kernel binary_kernel(const char* name, BinaryOp op) {
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
        return gpu::launch_fused_update<T>(update, device_data<T>(in[0]), device_data<T>(in[1]),
                                           adam ? device_data<T>(in[2]) : nullptr,
                                           device_data<T>(out), out.num_elements(), s0, s1, stream);
      });
}

}  // namespace

void register_gpu_elementwise_kernels(OpRegistry& registry) {
  const std::pair<const char*, UnaryOp> unary[] = {
      {"negative", UnaryOp::kNegative}, {"exp", UnaryOp::kExp},
      {"log", UnaryOp::kLog},           {"sqrt", UnaryOp::kSqrt},
      {"rsqrt", UnaryOp::kRsqrt},       {"tanh", UnaryOp::kTanh},
      {"relu", UnaryOp::kRelu},         {"gelu", UnaryOp::kGelu},
      {"gelu_erf", UnaryOp::kGeluErf},  {"multiply_scalar", UnaryOp::kMultiplyScalar}};
  for (const auto& [name, op] : unary) registry.set_gpu_kernel(name, unary_kernel(name, op));
  registry.set_gpu_kernel("add_scalar", add_scalar_kernel());
  const std::pair<const char*, BinaryOp> binary[] = {
      {"add", BinaryOp::kAdd},
      {"subtract", BinaryOp::kSubtract},
      {"multiply", BinaryOp::kMultiply},
      {"divide", BinaryOp::kDivide},
      {"maximum", BinaryOp::kMaximum},
      {"minimum", BinaryOp::kMinimum},
      {"mask_greater", BinaryOp::kMaskGreater},
      {"mask_greater_equal", BinaryOp::kMaskGreaterEqual},
      {"relu_grad", BinaryOp::kReluGrad},
      {"tanh_grad", BinaryOp::kTanhGrad},
      {"gelu_grad", BinaryOp::kGeluGrad},
      {"gelu_erf_grad", BinaryOp::kGeluErfGrad}};
  for (const auto& [name, op] : binary) registry.set_gpu_kernel(name, binary_kernel(name, op));
  const std::pair<const char*, FusedUpdate> updates[] = {{"ema", FusedUpdate::kEma},
                                                         {"ema_square", FusedUpdate::kEmaSquare},
                                                         {"adam_apply", FusedUpdate::kAdamApply}};
  for (const auto& [name, update] : updates)
    registry.set_gpu_kernel(name, fused_update_kernel(name, update));
}

}  // namespace tessel::detail
