// Internal: runs one device's block of an op in the memory it lives in: the CPU kernel on host
// memory, the op's gpu_kernel on a GPU's memory, or, for an op without one, the CPU kernel
// host-staged (inputs copied to the host, output copied back; counted per op, see
// host_staged_kernel_calls in op_registry.h).
#pragma once

#include <vector>

#include "tessel/dtensor/op_registry.h"

namespace tessel::detail {

void run_kernel(const OpDef& op, const std::vector<Tensor>& inputs, Tensor& output,
                const OpAttrs& attrs, const LocalContext& context);

// The CPU kernel on host copies of a GPU block's inputs, the result copied back (counted): what
// run_kernel does for ops without a GPU kernel, and what a GPU kernel does for the cases it does
// not cover.
void run_host_staged(const OpDef& op, const std::vector<Tensor>& inputs, Tensor& output,
                     const OpAttrs& attrs, const LocalContext& context);

}  // namespace tessel::detail
