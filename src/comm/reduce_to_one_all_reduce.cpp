// Reduce to one device, then broadcast (TF's ReductionToOneDevice): every rank streams its
// buffer to rank 0 segment by segment; rank 0 combines and streams the result back. Simple and
// root-bound: 2·(N-1)·S bytes pass through rank 0.
#include <cstring>

#include "comm/algorithms.h"
#include "comm/reduce_kernels.h"
#include "comm/segments.h"

namespace tessel::detail {

void reduce_to_one_all_reduce(Transport& t, const AllReduceArgs& a) {
  const int n = t.size();
  if (a.output != a.input && a.count > 0) {
    std::memcpy(a.output, a.input, a.count * dtype_size(a.dtype));
  }
  SegmentedLink link(t, a);
  if (t.rank() != 0) {
    link.send(0, a.output, 0, a.count);
    link.recv(0, a.output, 0, a.count);
    return;
  }
  for (int peer = 1; peer < n; ++peer) link.recv_reduce(peer, a.output, 0, a.count);
  finish_mean(a.dtype, a.op, a.output, a.count, n);
  for (int peer = 1; peer < n; ++peer) link.send(peer, a.output, 0, a.count);
}

}  // namespace tessel::detail
