// Internal: the in-process (shared-memory) versions of the collectives other than all-reduce.
// Each exchanges buffer pointers, copies or reduces straight between ranks' buffers, and ends
// with a barrier so that no rank frees a buffer another is still reading. Also the call context
// and the row and gather geometry that the point-to-point versions (p2p_collectives.h) share.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/transport.h"
#include "tessel/core/allocator.h"
#include "tessel/core/reduce_op.h"
#include "tessel/core/tensor.h"

namespace tessel::detail {

struct CallContext {
  const Signature* signature = nullptr;
  Deadline deadline;
  Allocator* allocator = nullptr;  // outputs (null: the host allocator)
  size_t segment_bytes = 0;        // message size of the point-to-point versions (0: the default)
};

// Elements of one index along axis 0 (the product of the other extents).
int64_t row_elements(const Shape& s);
// `s` with `rows` indices along axis 0.
Shape with_rows(const Shape& s, int64_t rows);

// all_gather's geometry: a tensor viewed as [outer, count, inner] around the gathered axis.
struct GatherGeometry {
  GatherGeometry(const Shape& s, int axis);
  // The gathered tensor: `total` indices along the axis, uninitialised.
  Tensor allocate(int64_t total, DType dtype, Allocator* allocator) const;
  // Copies one rank's block (`count` indices along the axis: outer runs of count * inner
  // contiguous elements) into `out`, viewed as [outer, total, inner], at index `offset`.
  void place(void* out, int64_t total, int64_t offset, const void* block, int64_t count,
             size_t item) const;

  std::vector<int64_t> dims;  // the input's
  int axis = 0;
  int64_t outer = 1;
  int64_t inner = 1;
};

// scatter's first phase: every rank returns the root's `description` (int64 values whose
// number only the root knows), after the rendezvous that compares the ranks' signatures.
std::vector<int64_t> direct_root_description(Transport& t, const std::vector<int64_t>& description,
                                             int root, const CallContext& c);

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
