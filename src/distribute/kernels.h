// Internal: the local computations of cross-device ops (run inside stream tasks).
//
// Every function allocates its result from `device` (so the device's memory accounting sees
// it) and leaves its inputs untouched. Inputs may be strided views.
#pragma once

#include <cstdint>
#include <vector>

#include "tessel/core/reduce_op.h"
#include "tessel/distribute/distributed_values.h"
#include "tessel/runtime/device.h"

namespace tessel::detail {

// A contiguous copy of `t` on `device`.
Tensor copy_to(Device& device, const Tensor& t);
// The same value (dense or sparse) copied to `device`.
Value copy_value(Device& device, const Value& v);

// op over `inputs` elementwise (equal shapes and dtypes); kMean divides the sum by `divisor`.
Tensor reduce_tensors(Device& device, const std::vector<Tensor>& inputs, ReduceOp op,
                      int64_t divisor);
// t /= divisor in place (contiguous t; integers truncate).
void divide_in_place(Tensor& t, int64_t divisor);
// The inputs concatenated along `axis` (non-negative; other dimensions equal).
Tensor concat(Device& device, const std::vector<Tensor>& inputs, int axis);

// TF's sparse aggregation: the concatenation of every component; MEAN divides the values.
IndexedSlices reduce_indexed_slices(Device& device, const std::vector<IndexedSlices>& inputs,
                                    ReduceOp op, int64_t divisor);

// Contiguous 1-D views of `flat`'s pieces: element counts `sizes`, in order.
std::vector<Tensor> split_flat(const Tensor& flat, const std::vector<int64_t>& sizes);

}  // namespace tessel::detail
