// The GPU kernels without the CUDA backend: there are no GPU devices, so no GPU kernels; the
// elementwise ops' gpu_kernel factories (gpu_elementwise.h) give null kernels.
#include "dtensor/ops/cuda/gpu_elementwise.h"
#include "dtensor/ops/op_families.h"

namespace tessel::detail {

void register_gpu_kernels(OpRegistry&) {}

OpDef::Kernel gpu_unary_kernel(const char*, int) { return nullptr; }
OpDef::Kernel gpu_add_scalar_kernel() { return nullptr; }
OpDef::Kernel gpu_binary_kernel(const char*, int) { return nullptr; }

}  // namespace tessel::detail
