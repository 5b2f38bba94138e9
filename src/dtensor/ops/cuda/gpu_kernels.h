// Internal: the GPU kernels of the built-in ops, one registration function per family (one file
// each), called by register_gpu_kernels (gpu_kernels.cpp), and the glue the CUDA-kernel families
// share (float_gpu_kernel). The elementwise ops' kernels are registered by their family files
// instead, beside their CPU kernels (gpu_elementwise.h).
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessel/dtensor/op_registry.h"

namespace tessel::detail {

void register_gpu_matmul_kernels(OpRegistry& registry);       // gpu_matmul.cpp: cuBLAS
void register_gpu_elementwise_kernels(OpRegistry& registry);  // gpu_elementwise.cpp: the
                                                              // optimizer's fused updates
void register_gpu_row_kernels(OpRegistry& registry);          // gpu_rows.cpp: reductions,
                                                              // softmax, layer norm
void register_gpu_move_kernels(OpRegistry& registry);         // gpu_move.cpp: shape, creation
                                                              // and embedding ops,
                                                              // reduce_sum_grad
void register_gpu_xent_kernels(OpRegistry& registry);         // gpu_xent.cpp: the
                                                              // vocabulary-parallel cross
                                                              // entropy
void register_gpu_attention_kernels(OpRegistry& registry);    // gpu_attention.cpp: the fused
                                                              // causal attention

// True when the output and every defined input are contiguous blocks of one dtype, f32 or f64:
// what the kernels of gpu_launch.h read.
bool contiguous_float_blocks(const std::vector<Tensor>& inputs, const Tensor& output);

// True when the output and every defined input are contiguous blocks (of any dtype).
bool contiguous_blocks(const std::vector<Tensor>& inputs, const Tensor& output);

// What a family's launch function returns: the launch's status, or nullopt when it does not
// cover this block (the block then runs host-staged).
using GpuLaunch = std::optional<cudaError_t>;

// Runs `launch(stream)` on the output's GPU when `covered`, throwing a failed launch as
// kInternal naming the op; blocks that are not `covered`, and those `launch` declines, run op
// `name`'s CPU kernel host-staged.
void run_gpu_kernel(const std::string& name, bool covered, const std::vector<Tensor>& in,
                    Tensor& out, const OpAttrs& attrs, const LocalContext& context,
                    const std::function<GpuLaunch(cudaStream_t)>& launch);

// Runs `launch(in, out, attrs, context, stream)` with T = float or double (the output's dtype)
// on the output's GPU, throwing a failed launch as kInternal naming the op; blocks that are not
// contiguous f32 / f64, and those `launch` declines, run op `name`'s CPU kernel host-staged.
void run_float_gpu_kernel(const std::string& name, const std::vector<Tensor>& in, Tensor& out,
                          const OpAttrs& attrs, const LocalContext& context,
                          const std::function<GpuLaunch(cudaStream_t, bool f64)>& launch);

// The OpDef::Kernel of op `name` that runs `launch`, a generic lambda
// [](const std::vector<Tensor>&, Tensor&, const OpAttrs&, const LocalContext&, cudaStream_t)
// -> GpuLaunch templated on the element type T, as run_float_gpu_kernel says.
template <typename Launch>
OpDef::Kernel float_gpu_kernel(std::string name, Launch launch) {
  return [name = std::move(name), launch](const std::vector<Tensor>& in, Tensor& out,
                                          const OpAttrs& attrs, const LocalContext& context) {
    run_float_gpu_kernel(name, in, out, attrs, context, [&](cudaStream_t stream, bool f64) {
      return f64 ? launch.template operator()<double>(in, out, attrs, context, stream)
                 : launch.template operator()<float>(in, out, attrs, context, stream);
    });
  };
}

// Calls f.template operator()<T, I>() for the float dtype `value` (T = float, double) and the
// index dtype `index` (I = int32_t, int64_t); nullopt (host-staged) for other dtypes.
template <typename F>
GpuLaunch by_value_and_index(DType value, DType index, F&& f) {
  const auto with_index = [&]<typename T>() -> GpuLaunch {
    if (index == DType::kI32) return f.template operator()<T, int32_t>();
    if (index == DType::kI64) return f.template operator()<T, int64_t>();
    return std::nullopt;
  };
  if (value == DType::kF32) return with_index.template operator()<float>();
  if (value == DType::kF64) return with_index.template operator()<double>();
  return std::nullopt;
}

// How the kernels that check their inputs (embedding ids, labels) report a bad one: runs
// `launch(scratch)` with `bytes` of stream-ordered scratch memory whose every byte is `fill`,
// copies the scratch back into `report` and waits for the stream. Returns the first failed
// status (the caller throws it).
cudaError_t launch_with_report(void* report, size_t bytes, int fill, cudaStream_t stream,
                               const std::function<cudaError_t(void*)>& launch);

// A block's device address as T (the kernels' pointer type).
template <typename T>
const T* device_data(const Tensor& t) {
  return static_cast<const T*>(t.data_ptr());
}
template <typename T>
T* device_data(Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

}  // namespace tessel::detail
