// Internal: the GPU kernels of the built-in ops, one registration function per family (one file
// each), called by register_gpu_kernels (gpu_kernels.cpp).
#pragma once

#include "tessel/dtensor/op_registry.h"

namespace tessel::detail {

void register_gpu_matmul_kernels(OpRegistry& registry);  // gpu_matmul.cpp: cuBLAS

}  // namespace tessel::detail
