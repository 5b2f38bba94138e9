// DLPack exchange: a Tensor shared with numpy, PyTorch or JAX without copying, both ways.
//
//   DLManagedTensor* m = to_dlpack(t);   // a view of t's storage, alive until m->deleter(m)
//   Tensor u = from_dlpack(m);           // u views m's memory; m->deleter runs when u's last
//                                        // view goes (here: t's storage is released then)
//
// The struct is DLPack 0.6's DLManagedTensor (<dlpack/dlpack.h>, Debian's libdlpack-dev), the
// version numpy 1.x speaks; only host memory (kDLCPU) is exchanged. Python: Tensor.__dlpack__,
// Tensor.__dlpack_device__ and tessel.from_dlpack.
#pragma once

#include "tessel/core/tensor.h"

struct DLManagedTensor;  // <dlpack/dlpack.h>; only users of the struct's fields need the header

namespace tessel {

// A DLManagedTensor viewing `t` (its shape, element strides and first element); it holds a
// reference to t's storage until the consumer calls its deleter. A null tensor:
// kFailedPrecondition; kBool: kUnimplemented (DLPack 0.6 has no bool type).
DLManagedTensor* to_dlpack(const Tensor& t);

// A Tensor viewing `managed`'s memory. Takes ownership of `managed`, also when it fails: the
// deleter runs when the tensor's last view goes, or before the error is thrown. kInvalidArgument
// naming the offending field: not host memory (kDLCPU), a dtype tessel lacks (lanes != 1, or a
// code/bits pair other than float 16/32/64, bfloat 16, int 32/64, uint 8), a negative dimension,
// or a layout other than row-major contiguous (strides null or row-major; tessel views are
// row-major slices), or a data pointer not aligned to the element size.
Tensor from_dlpack(DLManagedTensor* managed);

}  // namespace tessel
