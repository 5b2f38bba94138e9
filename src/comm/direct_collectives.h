// Internal: the in-process (shared-memory) versions of the collectives other than all-reduce.
// Each exchanges buffer pointers, copies or reduces straight between ranks' buffers, and ends
// with a barrier so that no rank frees a buffer another is still reading.
#pragma once

#include <vector>

#include "comm/transport.h"
#include "tessel/allocator.h"
#include "tessel/reduce_op.h"
#include "tessel/tensor.h"

namespace tessel::detail {

struct CallContext {
  const Signature* signature = nullptr;
  Deadline deadline;
  Allocator* allocator = nullptr;  // outputs (null: the host allocator)
};

void direct_broadcast(Transport& t, Tensor& tensor, int root, const CallContext& c);
void direct_reduce(Transport& t, const Tensor& input, Tensor& output, ReduceOp op, int root,
                   const CallContext& c);
// Gathers along `axis` into a new tensor on every rank (or only on `root` when root >= 0).
Tensor direct_all_gather(Transport& t, const Tensor& input, int axis, int root,
                         const CallContext& c);
// counts: rows of axis 0 per rank (already validated to sum to input rows).
Tensor direct_reduce_scatter(Transport& t, const Tensor& input, ReduceOp op,
                             const std::vector<int64_t>& counts, const CallContext& c);
// send_counts: rows of axis 0 this rank sends to each rank.
Tensor direct_all_to_all(Transport& t, const Tensor& input, const std::vector<int64_t>& send_counts,
                         const CallContext& c);
// counts: rows of root's axis 0 per rank; `row_shape` is the shape of one row.
Tensor direct_scatter(Transport& t, const Tensor& input, int root, const std::vector<int64_t>& counts,
                      const Shape& row_shape, DType dtype, const CallContext& c);

}  // namespace tessel::detail
