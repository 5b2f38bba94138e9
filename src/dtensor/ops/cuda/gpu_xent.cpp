// The GPU kernels of the vocabulary-parallel cross entropy's stages (gpu_xent.cu), for
// contiguous f32 / f64 logits and parts with i32 / i64 labels:
//   xent_parts and xent_parts_grad on the logits' class shards (their classes' global offset
//     from the logits block, as ops_parallel_xent.cpp's class_block);
//   sparse_softmax_cross_entropy_with_logits.vocab_parallel (the last stage) and
//     xent_finish_grad. The last stage checks every label on the device; the block then waits
//     for its stream to read the check back and throws the CPU kernel's kInvalidArgument for the
//     first bad row's label (so each such block synchronises its stream, once a step);
//   sparse_softmax_cross_entropy_with_logits and sparse_softmax_cross_entropy_grad, the
//     unsharded cross entropy (the class axis whole in the block): a warp per row, the labels
//     checked on the device and reported as by the last stage.
#include <functional>

#include "core/errors.h"
#include "dtensor/framework/op_util.h"
#include "dtensor/ops/cuda/gpu_kernels.h"
#include "dtensor/ops/cuda/gpu_launch.h"
#include "dtensor/ops/xent_names.h"
#include "runtime/cuda/cuda_check.h"

namespace tessel::detail {
namespace {

// The logits block (input 1) as rows of `local` classes, the first of them global class `offset`.
struct ClassBlock {
  int64_t rows, local, offset;
};
ClassBlock class_block(const Tensor& logits, const LocalContext& context) {
  ClassBlock b;
  b.local = logits.shape()[logits.rank() - 1];
  b.rows = b.local == 0 ? 0 : logits.num_elements() / b.local;
  b.offset = context.input_blocks[1].offsets.back();
  return b;
}

// True when the blocks are contiguous and every input but the labels (input `labels`) has the
// output's dtype.
bool covered(const std::vector<Tensor>& in, const Tensor& out, size_t labels) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (i != labels && in[i].dtype() != out.dtype()) return false;
  }
  return contiguous_blocks(in, out);
}

// xent_parts(labels, logits, m) -> [rows, 2].
void parts_kernel(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                  const LocalContext& context) {
  run_gpu_kernel(
      std::string(kXentParts), covered(in, out, 0), in, out, attrs, context,
      [&](cudaStream_t stream) {
        const ClassBlock b = class_block(in[1], context);
        const int64_t rows = out.num_elements() / 2;
        return by_value_and_index(
            out.dtype(), in[0].dtype(), [&]<typename T, typename L>() -> GpuLaunch {
              return gpu::launch_xent_parts<T, L>(
                  static_cast<const L*>(in[0].data_ptr()), device_data<T>(in[1]),
                  device_data<T>(in[2]), device_data<T>(out), rows, b.local, b.offset, stream);
            });
      });
}

// xent_parts_grad(labels, logits, m, g) -> the logits' block.
void parts_grad_kernel(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                       const LocalContext& context) {
  run_gpu_kernel(std::string(kXentPartsGrad), covered(in, out, 0), in, out, attrs, context,
                 [&](cudaStream_t stream) {
                   const ClassBlock b = class_block(in[1], context);
                   return by_value_and_index(
                       out.dtype(), in[0].dtype(), [&]<typename T, typename L>() -> GpuLaunch {
                         return gpu::launch_xent_parts_grad<T, L>(
                             static_cast<const L*>(in[0].data_ptr()), device_data<T>(in[1]),
                             device_data<T>(in[2]), device_data<T>(in[3]), device_data<T>(out),
                             b.rows, b.local, b.offset, stream);
                       });
                 });
}

// Runs a kernel that checks its labels against `classes`, `launch(bad)`, waits for its report
// and throws op's kInvalidArgument with the CPU kernels' message for the first bad row's label.
template <typename L>
GpuLaunch with_label_check(std::string_view op, const L* labels, int64_t classes,
                           cudaStream_t stream,
                           const std::function<cudaError_t(gpu::BadLabel*)>& launch) {
  gpu::BadLabel report{};
  const cudaError_t status =
      launch_with_report(&report, sizeof(report), 0xff, stream,
                         [&](void* bad) { return launch(static_cast<gpu::BadLabel*>(bad)); });
  if (status != cudaSuccess || report.row == gpu::BadLabel::kNoRow) return status;
  L label{};
  check_cuda(
      cudaMemcpyAsync(&label, labels + report.row, sizeof(L), cudaMemcpyDeviceToHost, stream), op,
      "bad label read-back");
  check_cuda(cudaStreamSynchronize(stream), op, "bad label read-back");
  throw_invalid(op, "Received a label value of {} which is outside the valid range of [0, {})",
                static_cast<int64_t>(label), classes);
}

// Runs op's kernel with its labels (input `labels_at`) checked against `classes`:
// launch.template operator()<T, L>(labels, bad, stream) for the logits' dtype T and the labels'
// L, as with_label_check says.
template <typename Launch>
void run_with_label_check(std::string_view op, size_t labels_at, int64_t classes,
                          const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                          const LocalContext& context, const Launch& launch) {
  run_gpu_kernel(
      std::string(op), covered(in, out, labels_at), in, out, attrs, context,
      [&](cudaStream_t stream) {
        return by_value_and_index(
            out.dtype(), in[labels_at].dtype(), [&]<typename T, typename L>() -> GpuLaunch {
              const L* labels = static_cast<const L*>(in[labels_at].data_ptr());
              return with_label_check(op, labels, classes, stream, [&](gpu::BadLabel* bad) {
                return launch.template operator()<T, L>(labels, bad, stream);
              });
            });
      });
}

// The last stage (parts, labels) -> loss.
void finish_kernel(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                   const LocalContext& context) {
  const int64_t classes = attrs.vocab_size.value_or(0);
  run_with_label_check(
      kXentFinish, 1, classes, in, out, attrs, context,
      [&]<typename T, typename L>(const L* labels, gpu::BadLabel* bad, cudaStream_t stream) {
        return gpu::launch_xent_finish<T, L>(device_data<T>(in[0]), labels, device_data<T>(out),
                                             out.num_elements(), classes, bad, stream);
      });
}

// xent_finish_grad(parts, g) -> [rows, 2].
OpDef::Kernel finish_grad_kernel() {
  return float_gpu_kernel(std::string(kXentFinishGrad),
                          []<typename T>(const std::vector<Tensor>& in, Tensor& out, const OpAttrs&,
                                         const LocalContext&, cudaStream_t stream) -> GpuLaunch {
                            return gpu::launch_xent_finish_grad<T>(
                                device_data<T>(in[0]), device_data<T>(in[1]), device_data<T>(out),
                                in[1].num_elements(), stream);
                          });
}

// sparse_softmax_cross_entropy_with_logits(labels, logits) -> loss, the class axis whole.
void xent_kernel(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                 const LocalContext& context) {
  const int64_t classes = in[1].shape()[in[1].rank() - 1];
  run_with_label_check(
      kXent, 0, classes, in, out, attrs, context,
      [&]<typename T, typename L>(const L* labels, gpu::BadLabel* bad, cudaStream_t stream) {
        return gpu::launch_xent_rows<T, L>(labels, device_data<T>(in[1]), device_data<T>(out),
                                           out.num_elements(), classes, bad, stream);
      });
}

// sparse_softmax_cross_entropy_grad(labels, logits, g) -> the logits' block.
void xent_grad_kernel(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                      const LocalContext& context) {
  const int64_t classes = out.shape()[out.rank() - 1];
  const int64_t rows = classes == 0 ? 0 : out.num_elements() / classes;
  run_with_label_check(
      kXentGrad, 0, classes, in, out, attrs, context,
      [&]<typename T, typename L>(const L* labels, gpu::BadLabel* bad, cudaStream_t stream) {
        return gpu::launch_xent_grad_rows<T, L>(labels, device_data<T>(in[1]),
                                                device_data<T>(in[2]), device_data<T>(out), rows,
                                                classes, bad, stream);
      });
}

}  // namespace

void register_gpu_xent_kernels(OpRegistry& registry) {
  registry.set_gpu_kernel(kXentParts, parts_kernel);
  registry.set_gpu_kernel(kXentPartsGrad, parts_grad_kernel);
  registry.set_gpu_kernel(kXentFinish, finish_kernel);
  registry.set_gpu_kernel(kXentFinishGrad, finish_grad_kernel());
  registry.set_gpu_kernel(kXent, xent_kernel);
  registry.set_gpu_kernel(kXentGrad, xent_grad_kernel);
}

}  // namespace tessel::detail
