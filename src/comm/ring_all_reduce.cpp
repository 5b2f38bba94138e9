// Ring all-reduce: N-1 reduce-scatter steps, then N-1 all-gather steps; at every step each rank
// sends one chunk to its right neighbour and receives one from its left. Chunks move in
// segments of `segment_bytes`, so the temporary memory is one segment. Cost
// 2(N-1)·alpha + 2·(N-1)/N·S·beta (reference §B.3).
#include <cstring>
#include <vector>

#include "comm/algorithms.h"
#include "comm/reduce_kernels.h"
#include "comm/scratch.h"
#include "tessel/comm/collective_options.h"
#include "tessel/mesh/shard_range.h"

namespace tessel::detail {

void ring_all_reduce(Transport& t, const AllReduceArgs& a) {
  const int n = t.size();
  const int r = t.rank();
  const size_t item = dtype_size(a.dtype);
  if (a.output != a.input && a.count > 0) std::memcpy(a.output, a.input, a.count * item);
  if (n == 1) {
    finish_mean(a.dtype, a.op, a.output, a.count, 1);
    return;
  }
  auto* out = static_cast<uint8_t*>(a.output);
  const size_t segment_bytes = a.segment_bytes ? a.segment_bytes : kDefaultSegmentBytes;
  const int64_t segment = std::max<int64_t>(1, static_cast<int64_t>(segment_bytes / item));
  ScratchBuffer incoming(a.scratch, static_cast<size_t>(segment) * item);  // one segment
  const int right = (r + 1) % n;
  const int left = (r + n - 1) % n;

  // Reduce-scatter: after step s, chunk (r - s - 1) mod n holds s + 2 contributions.
  for (int s = 0; s < n - 1; ++s) {
    const ShardRange send = shard_range(a.count, n, (r - s + n) % n);
    const ShardRange recv = shard_range(a.count, n, (r - s - 1 + 2 * n) % n);
    const int64_t steps = std::max((send.extent + segment - 1) / segment, (recv.extent + segment - 1) / segment);
    for (int64_t k = 0; k < steps; ++k) {
      const int64_t so = k * segment, ro = k * segment;
      if (so < send.extent) {
        const int64_t len = std::min(segment, send.extent - so);
        t.send(right, kAlgorithmTag, out + (send.offset + so) * item, len * item, *a.signature, a.deadline);
      }
      if (ro < recv.extent) {
        const int64_t len = std::min(segment, recv.extent - ro);
        t.recv(left, kAlgorithmTag, incoming.data(), len * item, *a.signature, a.deadline);
        accumulate(a.dtype, a.op, out + (recv.offset + ro) * item, incoming.data(), len);
      }
    }
  }
  // Rank r now owns the fully reduced chunk (r + 1) mod n.
  const ShardRange owned = shard_range(a.count, n, (r + 1) % n);
  finish_mean(a.dtype, a.op, out + owned.offset * item, owned.extent, n);

  // All-gather: pass the finished chunks around the ring.
  for (int s = 0; s < n - 1; ++s) {
    const ShardRange send = shard_range(a.count, n, (r + 1 - s + n) % n);
    const ShardRange recv = shard_range(a.count, n, (r - s + n) % n);
    const int64_t steps = std::max((send.extent + segment - 1) / segment, (recv.extent + segment - 1) / segment);
    for (int64_t k = 0; k < steps; ++k) {
      const int64_t o = k * segment;
      if (o < send.extent) {
        t.send(right, kAlgorithmTag, out + (send.offset + o) * item,
               std::min(segment, send.extent - o) * item, *a.signature, a.deadline);
      }
      if (o < recv.extent) {
        t.recv(left, kAlgorithmTag, out + (recv.offset + o) * item,
               std::min(segment, recv.extent - o) * item, *a.signature, a.deadline);
      }
    }
  }
}

}  // namespace tessel::detail
