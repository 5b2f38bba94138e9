// Communicator::transfer_boxes and reduce_scatter_boxes: block collectives over one global
// row-major array, the building blocks of relayout.
//
// Every rank checks the whole transfer list (so list errors are thrown identically everywhere)
// and its own part of it (its input and output blocks). The agreed signature carries a digest
// of the list and the origins, so ranks passing different lists fail with kFailedPrecondition.
// Each rank also posts its dtype; ranks that disagree all throw kFailedPrecondition.
#include <cstring>

#include "comm/algorithms.h"
#include "comm/communicator_internal.h"
#include "comm/device_path.h"
#include "comm/p2p_collectives.h"
#include "comm/reduce_kernels.h"
#include "tessel/comm/communicator.h"

namespace tessel {
namespace {

using detail::kComm;

// FNV-1a over int64 values: the transfer list's fingerprint in the agreed signature.
class Digest {
 public:
  void add(int64_t v) {
    for (int i = 0; i < 8; ++i) {
      hash_ = (hash_ ^ static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i))) * 1099511628211ull;
    }
  }
  void add(const std::vector<int64_t>& values) {
    add(static_cast<int64_t>(values.size()));
    for (int64_t v : values) add(v);
  }
  void add(const Box& box) {
    add(box.offsets);
    add(box.extents);
  }
  std::string hex() const { return fmt::format("{:016x}", hash_); }

 private:
  uint64_t hash_ = 14695981039346656037ull;
};

// kInvalidArgument unless `box` has one extent per offset, none negative, and rank `rank`.
void check_box(std::string_view op, const Box& box, int rank, std::string_view what) {
  if (box.extents.size() != box.offsets.size()) {
    detail::throw_invalid(kComm, "{}: {} has {} offsets but {} extents", op, what,
                          box.offsets.size(), box.extents.size());
  }
  for (int64_t e : box.extents) {
    if (e < 0) detail::throw_invalid(kComm, "{}: {} {} has a negative extent", op, what, box.to_string());
  }
  if (box.rank() != rank) {
    detail::throw_invalid(kComm, "{}: {} {} has rank {}, expected {}", op, what, box.to_string(),
                          box.rank(), rank);
  }
}

// The dtype a rank posts (-1: it passes no tensor), so that every rank can compare them all.
int64_t dtype_code(const Tensor& input, const Tensor& output) {
  if (output.defined()) return static_cast<int64_t>(output.dtype());
  return input.defined() ? static_cast<int64_t>(input.dtype()) : -1;
}

// kFailedPrecondition on every rank when two ranks pass tensors of different dtypes.
void check_dtypes_agree(std::string_view op, const std::vector<detail::Post>& posts) {
  int first = -1;
  for (int k = 0; k < static_cast<int>(posts.size()); ++k) {
    if (posts[k].aux < 0) continue;
    if (first < 0) {
      first = k;
    } else if (posts[k].aux != posts[first].aux) {
      detail::throw_error(ErrorCode::kFailedPrecondition, kComm,
                          "{}: rank {} passes {} tensors but rank {} passes {}", op, first,
                          dtype_name(static_cast<DType>(posts[first].aux)), k,
                          dtype_name(static_cast<DType>(posts[k].aux)));
    }
  }
}

void check_not_aliased(std::string_view op, const Tensor& input, const Tensor& output) {
  if (input.defined() && output.defined() && input.shares_storage_with(output)) {
    detail::throw_invalid(kComm, "{}: output shares storage with input; pass a separate output", op);
  }
}

// Checks of the list itself, equal on every rank. Returns the rank of the array (0 without
// transfers).
int check_transfer_list(std::string_view op, int n, const std::vector<std::vector<int64_t>>& input_origins,
                        const std::vector<std::vector<int64_t>>& output_origins,
                        const std::vector<Communicator::BoxTransfer>& transfers) {
  if (static_cast<int>(input_origins.size()) != n || static_cast<int>(output_origins.size()) != n) {
    detail::throw_invalid(kComm, "{}: {} input origins and {} output origins given for a group of {}",
                          op, input_origins.size(), output_origins.size(), n);
  }
  const int rank = transfers.empty() ? 0 : transfers[0].box.rank();
  for (size_t i = 0; i < transfers.size(); ++i) {
    const Communicator::BoxTransfer& t = transfers[i];
    const std::string what = fmt::format("transfer {} (rank {} -> rank {})", i, t.from, t.to);
    if (t.from < 0 || t.from >= n || t.to < 0 || t.to >= n) {
      detail::throw_invalid(kComm, "{}: {} names a rank outside the group of {}", op, what, n);
    }
    check_box(op, t.box, rank, what + " box");
    const std::vector<int64_t>& in = input_origins[t.from];
    const std::vector<int64_t>& out = output_origins[t.to];
    if (static_cast<int>(in.size()) != rank || static_cast<int>(out.size()) != rank) {
      detail::throw_invalid(kComm,
                            "{}: {} has a box of rank {} but input origin [{}] of rank {} and "
                            "output origin [{}] of rank {}",
                            op, what, rank, fmt::join(in, ","), t.from, fmt::join(out, ","), t.to);
    }
  }
  return rank;
}

// This rank's part: it holds every region it sends (input) and receives (output). Empty boxes
// move nothing and need no tensor.
void check_my_blocks(std::string_view op, int me, int rank, const Tensor& input,
                     const std::vector<int64_t>& input_origin, const Tensor& output,
                     const std::vector<int64_t>& output_origin,
                     const std::vector<Communicator::BoxTransfer>& transfers) {
  for (size_t i = 0; i < transfers.size(); ++i) {
    const Communicator::BoxTransfer& t = transfers[i];
    if (t.box.empty()) continue;
    for (const bool sending : {true, false}) {
      if ((sending ? t.from : t.to) != me) continue;
      const Tensor& held = sending ? input : output;
      const std::string what = fmt::format("transfer {} (rank {} -> rank {}): rank {}'s {}", i,
                                           t.from, t.to, me, sending ? "input" : "output");
      detail::require_tensor(held, op, what);
      const Box block{sending ? input_origin : output_origin, held.shape().dims()};
      if (held.rank() != rank || !block.contains(t.box)) {
        detail::throw_invalid(kComm, "{}: {} holds block {}, which does not contain box {}", op,
                              what, block.to_string(), t.box.to_string());
      }
    }
  }
  if (input.defined() && output.defined() && input.dtype() != output.dtype()) {
    detail::throw_invalid(kComm, "{}: rank {}'s input is {} but its output is {}", op, me,
                          dtype_name(input.dtype()), dtype_name(output.dtype()));
  }
  check_not_aliased(op, input, output);
}

// Calls f(block_offset, box_offset, length) for each contiguous run of `box` inside a row-major
// block of extents `dims` starting at `origin`: block_offset counts elements of the block,
// box_offset elements of the box in row-major order. Trailing dimensions the box spans in full
// merge into one run.
template <typename F>
void for_each_run(const Box& box, const std::vector<int64_t>& origin, const std::vector<int64_t>& dims,
                  F&& f) {
  const int rank = box.rank();
  if (box.empty()) return;
  if (rank == 0) return f(int64_t{0}, int64_t{0}, int64_t{1});
  int inner = rank - 1;
  int64_t run = box.extents[inner];
  while (inner > 0 && box.extents[inner] == dims[inner]) run *= box.extents[--inner];
  std::vector<int64_t> stride(rank, 1);
  for (int d = rank - 2; d >= 0; --d) stride[d] = stride[d + 1] * dims[d + 1];
  int64_t base = 0;
  for (int d = 0; d < rank; ++d) base += (box.offsets[d] - origin[d]) * stride[d];
  std::vector<int64_t> index(inner, 0);
  for (int64_t done = 0;; done += run) {
    int64_t offset = base;
    for (int d = 0; d < inner; ++d) offset += index[d] * stride[d];
    f(offset, done, run);
    int d = inner - 1;
    while (d >= 0 && ++index[d] == box.extents[d]) index[d--] = 0;
    if (d < 0) return;
  }
}

}  // namespace

void Communicator::transfer_boxes(const Tensor& input,
                                  const std::vector<std::vector<int64_t>>& input_origins,
                                  Tensor& output,
                                  const std::vector<std::vector<int64_t>>& output_origins,
                                  const std::vector<BoxTransfer>& transfers, std::string_view label,
                                  const CollectiveOptions& options) {
  // GPU memory (no NCCL version of the block collectives yet) goes through host copies; the
  // output's copy carries its current values, which the boxes sent elsewhere leave in place.
  if (detail::stages_through_host(*transport_, input, false) ||
      detail::stages_through_host(*transport_, output, false)) {
    Tensor out = detail::host_copy(output);
    transfer_boxes(detail::host_copy(input), input_origins, out, output_origins, transfers, label,
                   options);
    if (output.defined()) output.copy_from(out);
    return;
  }
  const detail::Deadline deadline = detail::deadline_of(options);
  const int me = rank();
  Digest digest;
  for (const auto& origin : input_origins) digest.add(origin);
  for (const auto& origin : output_origins) digest.add(origin);
  int64_t received = 0;
  for (const BoxTransfer& t : transfers) {
    digest.add(t.from);
    digest.add(t.to);
    digest.add(t.box);
    if (t.to == me) received += t.box.num_elements();
  }
  const std::string dtype = output.defined()  ? std::string(dtype_name(output.dtype()))
                            : input.defined() ? std::string(dtype_name(input.dtype()))
                                              : "null";
  const std::string agreed =
      fmt::format("{}({} transfers, digest {})", label, transfers.size(), digest.hex());
  const std::string mine = fmt::format("{}({}, {} transfers, {} elements to rank {})", label, dtype,
                                       transfers.size(), received, me);
  const detail::Signature sig = detail::make_signature(++sequence_, agreed, mine);
  detail::guarded(*transport_, sig, [&] {
    const int array_rank = check_transfer_list(label, size(), input_origins, output_origins, transfers);
    check_my_blocks(label, me, array_rank, input, input_origins[me], output, output_origins[me],
                    transfers);
    detail::Post post;
    post.aux = dtype_code(input, output);
    if (transport_->shares_memory()) {
      // Each receiver reads straight from the senders' inputs: every rank posts the address of
      // its input handle (data, extents and dtype), valid until the closing barrier.
      post.send = input.defined() ? &input : nullptr;
      const std::vector<detail::Post> posts = transport_->share(sig, post, deadline);
      check_dtypes_agree(label, posts);
      for (const BoxTransfer& t : transfers) {
        if (t.to != me || t.box.empty()) continue;
        const Tensor& src = t.from == me ? input : *static_cast<const Tensor*>(posts[t.from].send);
        copy_box(src, input_origins[t.from], output, output_origins[me], t.box);
      }
      transport_->barrier(sig, deadline);
      return;
    }
    // Point to point: the rendezvous compares signatures and dtypes (send/recv compare none).
    // Every message uses kAlgorithmTag; per pair of ranks, messages arrive in transfer order.
    check_dtypes_agree(label, transport_->exchange(sig, post, deadline));
    for (const BoxTransfer& t : transfers) {
      if (t.from != me || t.box.empty()) continue;
      if (t.to == me) {
        copy_box(input, input_origins[me], output, output_origins[me], t.box);
        continue;
      }
      Tensor packed = Tensor::empty(Shape(t.box.extents), input.dtype(), host_scratch(), false);
      copy_box(input, input_origins[me], packed, t.box.offsets, t.box);
      transport_->send(t.to, detail::kAlgorithmTag, packed.data(), packed.nbytes(), sig, deadline);
    }
    for (const BoxTransfer& t : transfers) {
      if (t.to != me || t.from == me || t.box.empty()) continue;
      Tensor packed = Tensor::empty(Shape(t.box.extents), output.dtype(), host_scratch(), false);
      transport_->recv(t.from, detail::kAlgorithmTag, packed.data(), packed.nbytes(), sig, deadline);
      copy_box(packed, t.box.offsets, output, output_origins[me], t.box);
    }
  });
}

void Communicator::reduce_scatter_boxes(const Tensor& input, const std::vector<int64_t>& input_origin,
                                        Tensor& output, const std::vector<Box>& output_boxes,
                                        ReduceOp op, const CollectiveOptions& options) {
  if (detail::stages_through_host(*transport_, input, false) ||
      detail::stages_through_host(*transport_, output, false)) {
    Tensor out = detail::host_copy(output);
    reduce_scatter_boxes(detail::host_copy(input), input_origin, out, output_boxes, op, options);
    if (output.defined()) output.copy_from(out);
    return;
  }
  constexpr std::string_view kOp = "reduce_scatter_boxes";
  const detail::Deadline deadline = detail::deadline_of(options);
  const int me = rank();
  Digest digest;
  digest.add(input_origin);
  for (const Box& box : output_boxes) digest.add(box);
  const std::string dtype = input.defined() ? std::string(dtype_name(input.dtype())) : "null";
  const std::string shape = input.defined() ? input.shape().to_string() : "[]";
  const std::string agreed = fmt::format("{}({}, {}, {}, {} boxes, digest {})", kOp, dtype, shape,
                                         reduce_op_name(op), output_boxes.size(), digest.hex());
  const std::string mine =
      fmt::format("{}({}, {}, {}, box {} to rank {})", kOp, dtype, shape, reduce_op_name(op),
                  me < static_cast<int>(output_boxes.size()) ? output_boxes[me].to_string() : "none", me);
  const detail::Signature sig = detail::make_signature(++sequence_, agreed, mine);
  detail::guarded(*transport_, sig, [&] {
    const int n = size();
    detail::require_tensor(input, kOp, "input");
    if (static_cast<int>(input_origin.size()) != input.rank()) {
      detail::throw_invalid(kComm, "{}: input origin [{}] has {} entries for an input of rank {}", kOp,
                            fmt::join(input_origin, ","), input_origin.size(), input.rank());
    }
    if (static_cast<int>(output_boxes.size()) != n) {
      detail::throw_invalid(kComm, "{}: {} output boxes given for a group of {}", kOp,
                            output_boxes.size(), n);
    }
    const Box block{input_origin, input.shape().dims()};
    for (int r = 0; r < n; ++r) {
      const std::string what = fmt::format("output box of rank {}", r);
      check_box(kOp, output_boxes[r], input.rank(), what);
      if (!block.contains(output_boxes[r])) {
        detail::throw_invalid(kComm, "{}: {} {} is not inside the input block {}", kOp, what,
                              output_boxes[r].to_string(), block.to_string());
      }
    }
    detail::check_reducible(input.dtype(), op);
    const Box& mine_box = output_boxes[me];
    if (output.defined() || !mine_box.empty()) {
      detail::require_tensor(output, kOp, "output");
      if (output.dtype() != input.dtype() || !(output.shape() == Shape(mine_box.extents))) {
        detail::throw_invalid(kComm, "{}: rank {}'s output {} {} does not match its box {} ({} {})",
                              kOp, me, dtype_name(output.dtype()), output.shape().to_string(),
                              mine_box.to_string(), dtype_name(input.dtype()),
                              Shape(mine_box.extents).to_string());
      }
    }
    check_not_aliased(kOp, input, output);
    const size_t item = dtype_size(input.dtype());
    if (transport_->shares_memory()) {
      // Every rank reduces its own box run by run, reading all inputs in place.
      const std::vector<detail::Post> posts = transport_->share(sig, detail::Post{input.data()}, deadline);
      std::vector<const void*> inputs(n);
      auto* out = mine_box.empty() ? nullptr : static_cast<uint8_t*>(output.data());
      for_each_run(mine_box, input_origin, input.shape().dims(), [&](int64_t in, int64_t at, int64_t len) {
        for (int k = 0; k < n; ++k) inputs[k] = static_cast<const uint8_t*>(posts[k].send) + in * item;
        void* dst = out + at * item;
        detail::reduce_buffers(input.dtype(), op, inputs.data(), n, &dst, 1, 0, len, n);
      });
      transport_->barrier(sig, deadline);
      return;
    }
    // Pack the boxes in rank order and run reduce_scatter's point-to-point algorithm on them
    // (under this call's signature: one sequence number per call).
    std::vector<int64_t> counts(n);
    int64_t total = 0;
    for (int r = 0; r < n; ++r) total += counts[r] = output_boxes[r].num_elements();
    Tensor packed = Tensor::empty(Shape{total}, input.dtype(), host_scratch(), false);
    auto* dst = static_cast<uint8_t*>(packed.data());
    for (const Box& box : output_boxes) {
      for_each_run(box, input_origin, input.shape().dims(), [&](int64_t in, int64_t at, int64_t len) {
        std::memcpy(dst + at * item, static_cast<const uint8_t*>(input.data()) + in * item, len * item);
      });
      dst += box.num_elements() * item;
    }
    const Tensor reduced = detail::p2p_reduce_scatter(*transport_, packed, op, counts,
                                                      {&sig, deadline, host_scratch(), options.segment_bytes});
    if (reduced.nbytes() > 0) std::memcpy(output.data(), reduced.data(), reduced.nbytes());
  });
}

}  // namespace tessel
