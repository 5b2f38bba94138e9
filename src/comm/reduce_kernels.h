// Internal: untyped reduction kernels (a dtype tag instead of templates in the algorithms).
//
// bf16 and f16 accumulate in f32 and round once on store; kMean is a sum divided by `divisor`
// when stored (integers truncate). bool: sum/max are logical or, prod/min logical and.
#pragma once

#include <cstdint>

#include "tessel/core/dtype.h"
#include "tessel/core/reduce_op.h"

namespace tessel::detail {

// For elements [begin, end): result = op over inputs[0..num_inputs) (then / divisor for kMean),
// written to every outputs[0..num_outputs). Outputs may alias inputs element for element.
// `streaming`: write the outputs with non-temporal (cache-bypassing) stores, for buffers too
// large to stay in cache: this saves reading every output line before overwriting it (a third
// of the memory traffic of an out-of-place all-reduce). The stores are fenced before return, so
// the usual release/acquire of a later rendezvous publishes them.
void reduce_buffers(DType dtype, ReduceOp op, const void* const* inputs, int num_inputs,
                    void* const* outputs, int num_outputs, int64_t begin, int64_t end,
                    int64_t divisor, bool streaming = false);

// Size of the last-level cache: sysfs (cpu0's index3), else sysconf, else 32 MiB.
size_t last_level_cache_bytes();

// inout[i] = op(inout[i], in[i]) for i < count (no mean division: see finish_mean).
void accumulate(DType dtype, ReduceOp op, void* inout, const void* in, int64_t count);

// For kMean: buffer[i] /= divisor. No-op for other ops.
void finish_mean(DType dtype, ReduceOp op, void* buffer, int64_t count, int64_t divisor);

// kInvalidArgument for combinations without a meaning (mean of bool).
void check_reducible(DType dtype, ReduceOp op);

}  // namespace tessel::detail
