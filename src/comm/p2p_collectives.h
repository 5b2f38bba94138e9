// Internal: the point-to-point versions of the collectives other than all-reduce, for transports
// whose ranks do not share memory (MPI processes, hierarchical groups across processes). The
// Communicator runs these when Transport::shares_memory() is false, the direct versions
// (direct_collectives.h) otherwise; the signatures mirror those.
//
// Each begins with the group's rendezvous (barrier or exchange: the ranks' signatures are
// compared and missing ranks are named, as send/recv compare nothing), then moves data only with
// buffered send/recv under kAlgorithmTag, in messages of at most one segment
// (CollectiveOptions::segment_bytes, default kDefaultSegmentBytes). Per pair of ranks the
// messages and their order follow from arguments every rank knows (counts travel in the
// rendezvous or in a header message first), so zero-size blocks send nothing. Sends never wait
// for their receiver, and a rank only waits for messages whose sender needs nothing from it
// first: no order of arrival can deadlock, and as no rank reads another's buffers there is no
// closing barrier. Every wait takes the call's deadline.
// Reductions combine the n contributions of every element in rank order with reduce_buffers
// (kMean divided by n on store), exactly as the direct versions do: the results are equal bit
// for bit.
#pragma once

#include <vector>

#include "comm/direct_collectives.h"

namespace tessel::detail {

// Binomial tree from the root while the tensor fits one message (ceil(lg N) hops); larger
// tensors go down a chain in segments, each forwarded as soon as it arrives (every rank sends
// and receives the tensor once).
void p2p_broadcast(Transport& t, Tensor& tensor, int root, const CallContext& c);
// Rank k reduces chunk k (shard_range of the elements) of every rank's input, then sends it to
// the root: every rank sends about the tensor's size and receives (N-1)/N of it (the root twice
// that), instead of the root receiving N-1 whole tensors.
void p2p_reduce(Transport& t, const Tensor& input, Tensor& output, ReduceOp op, int root,
                const CallContext& c);
// Every rank sends its input to every other rank (or only to `root` when root >= 0); the
// receivers place the blocks along `axis`. The sizes along `axis` travel in the rendezvous.
Tensor p2p_all_gather(Transport& t, const Tensor& input, int axis, int root,
                      const CallContext& c);
// Every rank sends each peer that peer's rows; each rank reduces the N slices it holds, one
// segment at a time (temporary memory: one segment per peer).
Tensor p2p_reduce_scatter(Transport& t, const Tensor& input, ReduceOp op,
                          const std::vector<int64_t>& counts, const CallContext& c);
// Pairwise: to each peer a header with the row count, then the rows; the output is allocated
// once every header has arrived.
Tensor p2p_all_to_all(Transport& t, const Tensor& input, const std::vector<int64_t>& send_counts,
                      const CallContext& c);
// scatter's first phase (its rendezvous): every rank returns the root's `description`; the
// rendezvous carries its length, the root sends the values.
std::vector<int64_t> p2p_root_description(Transport& t, const std::vector<int64_t>& description,
                                          int root, const CallContext& c);
// The root sends every rank its rows. Runs after p2p_root_description of the same call, which
// was its rendezvous.
Tensor p2p_scatter(Transport& t, const Tensor& input, int root, const std::vector<int64_t>& counts,
                   const Shape& row_shape, DType dtype, const CallContext& c);

}  // namespace tessel::detail
