// register_gpu_kernels with the CUDA backend: every family's GPU kernels.
#include "dtensor/cuda/gpu_kernels.h"

#include "dtensor/op_families.h"

namespace tessel::detail {

void register_gpu_kernels(OpRegistry& registry) { register_gpu_matmul_kernels(registry); }

}  // namespace tessel::detail
