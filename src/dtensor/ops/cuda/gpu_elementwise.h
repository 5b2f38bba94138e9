// Internal: the GPU kernels of the elementwise ops, for the family files (ops_unary.cpp,
// ops_elementwise.cpp, through elementwise.h) to register beside each op's CPU kernel. With the
// CUDA backend they are gpu_elementwise.cpp's (launching gpu_elementwise.cu's kernels); without
// it, gpu_kernels_stub.cpp's, which are null (there are no GPU devices, and a null gpu_kernel
// means host staging), so no caller needs an #ifdef. A plain C++ header: no CUDA include.
#pragma once

#include "tessel/dtensor/op_registry.h"

namespace tessel::detail {

// Op `name`'s GPU kernel: the functor at index `op` of elementwise_math.h's UnaryOps on
// contiguous f32 / f64 blocks, with OpAttrs::operand as the scalar of AddScalar /
// MultiplyScalar; other blocks run host-staged.
OpDef::Kernel gpu_unary_kernel(const char* name, int op);

// add_scalar's: adds on the first device of each Partial(sum) group only (ops_unary.cpp), the
// others copy their block.
OpDef::Kernel gpu_add_scalar_kernel();

// Op `name`'s GPU kernel: the functor at index `op` of elementwise_math.h's BinaryOps with numpy
// broadcasting, on contiguous f32 / f64 blocks; other blocks, and broadcasts that keep more
// than gpu_launch.h's BroadcastIndex::kMaxDims dimensions after merging, run host-staged.
OpDef::Kernel gpu_binary_kernel(const char* name, int op);

}  // namespace tessel::detail
