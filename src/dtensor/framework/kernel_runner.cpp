// run_kernel: the CPU kernel, the GPU kernel, or the CPU kernel host-staged.
#include "dtensor/framework/kernel_runner.h"

#include <mutex>

namespace tessel {
namespace {

std::mutex& staged_mutex() {
  static std::mutex mu;
  return mu;
}
std::map<std::string, int64_t>& staged_counts() {
  static auto* counts = new std::map<std::string, int64_t>();  // never destroyed: used at exit
  return *counts;
}

void count_staged(const std::string& op) {
  std::lock_guard<std::mutex> lock(staged_mutex());
  ++staged_counts()[op];
}

}  // namespace

std::map<std::string, int64_t> host_staged_kernel_calls() {
  std::lock_guard<std::mutex> lock(staged_mutex());
  return staged_counts();
}

bool has_gpu_kernel(std::string_view name) {
  return OpRegistry::global().get(name).gpu_kernel != nullptr;
}

void detail::run_kernel(const OpDef& op, const std::vector<Tensor>& inputs, Tensor& output,
                        const OpAttrs& attrs, const LocalContext& context) {
  if (context.cuda_stream == nullptr) {
    if (output.memory_space().is_host()) {  // a CPU device: host memory throughout
      op.kernel(inputs, output, attrs, context);
    } else {  // a simulated GPU: no GPU kernel can run there
      run_host_staged(op, inputs, output, attrs, context);
    }
    return;
  }
  if (op.gpu_kernel) {
    op.gpu_kernel(inputs, output, attrs, context);
    return;
  }
  run_host_staged(op, inputs, output, attrs, context);
}

void detail::run_host_staged(const OpDef& op, const std::vector<Tensor>& inputs, Tensor& output,
                             const OpAttrs& attrs, const LocalContext& context) {
  std::vector<Tensor> host_inputs;
  host_inputs.reserve(inputs.size());
  for (const Tensor& t : inputs) host_inputs.push_back(t.defined() ? t.to_host() : t);
  Tensor host_output = Tensor::empty(output.shape(), output.dtype(), nullptr, /*zero_fill=*/false);
  op.kernel(host_inputs, host_output, attrs, context);
  output.copy_from(host_output);
  count_staged(op.name);
}

}  // namespace tessel
