// Communicator: one participant's handle on a group of N ranks that run collectives together.
//
// Calls are rank-local: every rank calls the same collectives in the same order, each with its
// own buffers, from its own thread (in-process) or process (MPI). A call returns when this
// rank's part is done and its buffers may be reused.
//
//   auto comms = make_in_process_communicators(4);          // ranks 0..3 of one group
//   // on rank r's thread:
//   Tensor x = Tensor::full({1024}, DType::kF32, r);
//   comms[r]->all_reduce(x, x, ReduceOp::kSum);              // in place: x = 0+1+2+3 everywhere
//
// Semantics shared by every collective:
// - Every wait has a deadline (CollectiveOptions::timeout). On expiry the call throws
//   kDeadlineExceeded naming the ranks that did not arrive, the collective's sequence number and
//   its signature (op, dtype, count, group), and aborts the group.
// - A rank that fails (bad arguments, a kernel error) aborts the group; the others' calls throw
//   kAborted naming that rank and its error, at once — nobody waits out a deadline for it.
//   An aborted group stays aborted: every later call throws kAborted.
// - Ranks calling different collectives (or different dtypes/counts) at the same sequence
//   number all throw kFailedPrecondition naming both signatures.
// - Tensors in device memory (a GPU's or a simulated GPU's) take the transport's device
//   collectives (NCCL) or else stage through host copies; either way the results are in the
//   memory of the rank's input (scatter on a non-root: of its ignored input; host memory for a
//   null one). Strided views are refused (kInvalidArgument) in device memory as on the host.
// - bf16 and f16 are reduced in f32 and rounded once; kMean divides the sum by N (integers:
//   truncating); bool sum/max are logical or, prod/min logical and, mean is kInvalidArgument.
//
// Thread safety: one thread at a time per Communicator object (each rank has its own).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/comm/collective_options.h"
#include "tessel/core/allocator.h"
#include "tessel/core/box.h"
#include "tessel/core/reduce_op.h"
#include "tessel/core/tensor.h"

namespace tessel {

namespace detail {
class Transport;
}

class Communicator {
 public:
  // Wraps a transport endpoint (see make_in_process_communicators).
  explicit Communicator(std::shared_ptr<detail::Transport> transport);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  // Names of the participants in rank order (device names for mesh groups).
  const std::vector<std::string>& members() const;
  // Number of collectives this rank has started.
  uint64_t sequence_number() const { return sequence_; }

  // output = op over ranks of input. Shapes and dtypes equal on every rank; output may be the
  // same tensor as input (in place). Contiguous tensors only.
  void all_reduce(const Tensor& input, Tensor& output, ReduceOp op,
                  const CollectiveOptions& options = {});
  // Like all_reduce, but only `root` receives the result in `output` (ignored elsewhere).
  void reduce(const Tensor& input, Tensor& output, ReduceOp op, int root,
              const CollectiveOptions& options = {});
  // `tensor` on every rank becomes root's `tensor`.
  void broadcast(Tensor& tensor, int root, const CollectiveOptions& options = {});
  // Concatenation of every rank's input along `axis`, in rank order. Sizes along `axis` may
  // differ between ranks; every other dimension must agree (kFailedPrecondition naming both
  // ranks' calls).
  Tensor all_gather(const Tensor& input, int axis = 0, const CollectiveOptions& options = {});
  // Reduces the inputs, then rank r keeps block r along axis 0: by default chunk semantics
  // (shard_range.h), or `counts[r]` rows when counts is given (sum must equal input rows).
  Tensor reduce_scatter(const Tensor& input, ReduceOp op, const std::vector<int64_t>& counts = {},
                        const CollectiveOptions& options = {});
  // Rank r sends rows [offset_j, offset_j + send_counts[j]) of its input (axis 0) to rank j and
  // receives the blocks other ranks send it, concatenated in rank order. Empty send_counts:
  // equal splits (input rows must divide by N).
  Tensor all_to_all(const Tensor& input, const std::vector<int64_t>& send_counts = {},
                    const CollectiveOptions& options = {});
  // Block collectives over one global row-major array (MPI_Alltoallw with subarray types): the
  // building blocks of relayout (dtensor). Every rank passes the same `transfers`: transfer t
  // moves the global region t.box from rank t.from's `input` (which holds the block starting
  // at input_origins[t.from]) into rank t.to's `output` (the block starting at
  // output_origins[t.to]). from == to is a local copy. A rank without an input or an output
  // passes a null Tensor. `label` names the collective in signatures and errors ("all_gather",
  // "all_to_all", "send_recv"). Regions outside the holding blocks, or origins of the wrong
  // count or rank: kInvalidArgument. Shared memory: each receiver copies its regions straight
  // from the senders' inputs (one copy per byte); otherwise the sender packs each region and
  // sends it (buffered point to point), the receiver unpacks it.
  struct BoxTransfer {
    int from = 0;
    int to = 0;
    Box box;
  };
  void transfer_boxes(const Tensor& input, const std::vector<std::vector<int64_t>>& input_origins,
                      Tensor& output, const std::vector<std::vector<int64_t>>& output_origins,
                      const std::vector<BoxTransfer>& transfers, std::string_view label,
                      const CollectiveOptions& options = {});
  // Reduce-scatter of boxes: every rank's `input` holds the same block (starting at
  // `input_origin`, equal on every rank) of N partial arrays; rank r's `output` receives op over
  // the ranks of the region `output_boxes[r]` (inside the input block; boxes may be empty).
  // Shared memory: every rank reduces its own box reading all inputs (no temporary memory);
  // otherwise inputs are packed box by box and reduce_scatter runs with those counts.
  void reduce_scatter_boxes(const Tensor& input, const std::vector<int64_t>& input_origin,
                            Tensor& output, const std::vector<Box>& output_boxes, ReduceOp op,
                            const CollectiveOptions& options = {});
  // all_gather delivered to `root` only; other ranks get a null Tensor.
  Tensor gather(const Tensor& input, int root, int axis = 0, const CollectiveOptions& options = {});
  // Root's input split along axis 0 (chunk semantics, or `counts`); rank r receives block r.
  // Non-root ranks pass a null Tensor or anything (ignored) and must give the same `counts`.
  Tensor scatter(const Tensor& input, int root, const std::vector<int64_t>& counts = {},
                 const CollectiveOptions& options = {});
  // Point to point: `tensor`'s bytes to `peer` under `tag` (>= 0). send is buffered and returns
  // at once; recv waits for the next message from `peer` under `tag` and fills `tensor`, whose
  // byte count must equal the message's (else kInvalidArgument at the receiver).
  void send(const Tensor& tensor, int peer, int tag = 0, const CollectiveOptions& options = {});
  void recv(Tensor& tensor, int peer, int tag = 0, const CollectiveOptions& options = {});
  // Returns once every rank has called barrier.
  void barrier(const CollectiveOptions& options = {});

  // Aborts the group: every rank's current and later calls throw kAborted with `reason`.
  void abort(const std::string& reason);

  // Where this rank's temporaries and collective outputs come from (a device's accounting
  // allocator, so that its memory statistics include them); null: the host allocator. An
  // all-reduce allocates no temporary memory with the direct algorithm and one segment with
  // ring, halving_doubling, reduce_to_one and hierarchical (the in-process transport also keeps
  // messages in flight between send and recv, outside any device's accounting).
  // An allocator of device memory (a GPU device's) is not used: the host algorithms need host
  // memory, and NCCL collectives allocate their outputs from their inputs' allocators.
  void set_scratch_allocator(Allocator* allocator) { scratch_ = allocator; }
  Allocator* scratch_allocator() const { return scratch_; }

  // ---- internal ---------------------------------------------------------------------------
  detail::Transport& transport() { return *transport_; }
  const std::shared_ptr<detail::Transport>& shared_transport() const { return transport_; }
  // A communicator taking over another's transport continues its sequence (the ranks' numbers
  // must keep agreeing).
  void continue_sequence_from(const Communicator& other) { sequence_ = other.sequence_; }

 private:
  // gather and all_gather (all: every rank receives; root unused).
  Tensor gather_impl(const Tensor& input, int root, bool all, int axis,
                     const CollectiveOptions& options);

  // scratch_ when it allocates host memory, else null (the host allocator).
  Allocator* host_scratch() const {
    return scratch_ != nullptr && scratch_->memory_space().is_host() ? scratch_ : nullptr;
  }

  std::shared_ptr<detail::Transport> transport_;
  uint64_t sequence_ = 0;       // collectives started by this rank
  Allocator* scratch_ = nullptr;  // temporaries and outputs; null: host allocator
};

// One group of `size` in-process participants; element r is rank r's handle. `names` label the
// ranks in errors (default "rank 0", "rank 1", ...).
std::vector<std::unique_ptr<Communicator>> make_in_process_communicators(
    int size, std::vector<std::string> names = {});

}  // namespace tessel
