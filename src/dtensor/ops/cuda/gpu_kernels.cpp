// register_gpu_kernels with the CUDA backend: every family's GPU kernels; and the glue the
// CUDA-kernel families share (gpu_kernels.h).
#include "dtensor/ops/cuda/gpu_kernels.h"

#include "dtensor/framework/kernel_runner.h"
#include "dtensor/ops/op_families.h"
#include "runtime/cuda/cuda_check.h"

namespace tessel::detail {

void register_gpu_kernels(OpRegistry& registry) {
  register_gpu_matmul_kernels(registry);
  register_gpu_elementwise_kernels(registry);
  register_gpu_row_kernels(registry);
  register_gpu_move_kernels(registry);
  register_gpu_xent_kernels(registry);
  register_gpu_attention_kernels(registry);
}

bool contiguous_blocks(const std::vector<Tensor>& inputs, const Tensor& output) {
  if (!output.is_contiguous()) return false;
  for (const Tensor& t : inputs) {
    if (t.defined() && !t.is_contiguous()) return false;
  }
  return true;
}

bool contiguous_float_blocks(const std::vector<Tensor>& inputs, const Tensor& output) {
  const DType dtype = output.dtype();
  if (dtype != DType::kF32 && dtype != DType::kF64) return false;
  for (const Tensor& t : inputs) {
    if (t.defined() && t.dtype() != dtype) return false;
  }
  return contiguous_blocks(inputs, output);
}

void run_gpu_kernel(const std::string& name, bool covered, const std::vector<Tensor>& in,
                    Tensor& out, const OpAttrs& attrs, const LocalContext& context,
                    const std::function<GpuLaunch(cudaStream_t)>& launch) {
  if (covered) {
    ScopedCudaDevice on(out.memory_space().device_ordinal);
    const GpuLaunch status = launch(static_cast<cudaStream_t>(context.cuda_stream));
    if (status) {
      check_cuda(*status, name, "kernel launch");
      return;
    }
  }
  run_host_staged(OpRegistry::global().get(name), in, out, attrs, context);
}

void run_float_gpu_kernel(const std::string& name, const std::vector<Tensor>& in, Tensor& out,
                          const OpAttrs& attrs, const LocalContext& context,
                          const std::function<GpuLaunch(cudaStream_t, bool f64)>& launch) {
  run_gpu_kernel(name, contiguous_float_blocks(in, out), in, out, attrs, context,
                 [&](cudaStream_t stream) { return launch(stream, out.dtype() == DType::kF64); });
}

cudaError_t launch_with_report(void* report, size_t bytes, int fill, cudaStream_t stream,
                               const std::function<cudaError_t(void*)>& launch) {
  void* scratch = nullptr;
  cudaError_t status = cudaMallocAsync(&scratch, bytes, stream);
  if (status != cudaSuccess) return status;
  status = cudaMemsetAsync(scratch, fill, bytes, stream);
  if (status == cudaSuccess) status = launch(scratch);
  if (status == cudaSuccess)
    status = cudaMemcpyAsync(report, scratch, bytes, cudaMemcpyDeviceToHost, stream);
  if (status == cudaSuccess) status = cudaStreamSynchronize(stream);
  const cudaError_t freed = cudaFreeAsync(scratch, stream);
  return status != cudaSuccess ? status : freed;
}

}  // namespace tessel::detail
