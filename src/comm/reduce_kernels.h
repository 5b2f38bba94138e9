// Internal: untyped reduction kernels (a dtype tag instead of templates in the algorithms).
//
// bf16 and f16 accumulate in f32 and round once on store; kMean is a sum divided by `divisor`
// when stored (integers truncate). bool: sum/max are logical or, prod/min logical and.
#pragma once

#include <cstdint>

#include "tessel/dtype.h"
#include "tessel/reduce_op.h"

namespace tessel::detail {

// For elements [begin, end): result = op over inputs[0..num_inputs) (then / divisor for kMean),
// written to every outputs[0..num_outputs). Outputs may alias inputs element for element.
void reduce_buffers(DType dtype, ReduceOp op, const void* const* inputs, int num_inputs,
                    void* const* outputs, int num_outputs, int64_t begin, int64_t end,
                    int64_t divisor);

// inout[i] = op(inout[i], in[i]) for i < count (no mean division: see finish_mean).
void accumulate(DType dtype, ReduceOp op, void* inout, const void* in, int64_t count);

// For kMean: buffer[i] /= divisor. No-op for other ops.
void finish_mean(DType dtype, ReduceOp op, void* buffer, int64_t count, int64_t divisor);

// kInvalidArgument for combinations without a meaning (mean of bool).
void check_reducible(DType dtype, ReduceOp op);

}  // namespace tessel::detail
