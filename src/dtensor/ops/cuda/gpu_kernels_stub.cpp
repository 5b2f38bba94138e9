// register_gpu_kernels without the CUDA backend: there are no GPU devices, so no GPU kernels.
#include "dtensor/ops/op_families.h"

namespace tessel::detail {

void register_gpu_kernels(OpRegistry&) {}

}  // namespace tessel::detail
