// The point-to-point collectives (p2p_collectives.h describes the protocol they share).
#include "comm/p2p_collectives.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "comm/algorithms.h"
#include "comm/reduce_kernels.h"
#include "comm/scratch.h"
#include "tessel/comm/collective_options.h"
#include "tessel/mesh/shard_range.h"

namespace tessel::detail {
namespace {

// One call's traffic in items of `item` bytes: a range goes in messages of one segment
// (CallContext::segment_bytes, default kDefaultSegmentBytes; the last one shorter), which sender
// and receiver cut alike. Nothing is sent for an empty range.
class Messages {
 public:
  Messages(Transport& t, const CallContext& c, size_t item)
      : t_(t), c_(c), item_(item),
        segment_(std::max<int64_t>(
            1, static_cast<int64_t>((c.segment_bytes ? c.segment_bytes : kDefaultSegmentBytes) / item))) {}

  int64_t segment() const { return segment_; }
  size_t item() const { return item_; }

  void send(int peer, const void* data, int64_t count) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (int64_t o = 0; o < count; o += segment_) {
      t_.send(peer, kAlgorithmTag, p + o * item_, bytes(std::min(segment_, count - o)), *c_.signature,
              c_.deadline);
    }
  }
  void recv(int peer, void* data, int64_t count) {
    auto* p = static_cast<uint8_t*>(data);
    for (int64_t o = 0; o < count; o += segment_) {
      t_.recv(peer, kAlgorithmTag, p + o * item_, bytes(std::min(segment_, count - o)), *c_.signature,
              c_.deadline);
    }
  }

 private:
  size_t bytes(int64_t count) const { return static_cast<size_t>(count) * item_; }

  Transport& t_;
  const CallContext& c_;
  const size_t item_;
  const int64_t segment_;
};

const uint8_t* at(const void* base, int64_t index, size_t item) {
  return static_cast<const uint8_t*>(base) + index * static_cast<int64_t>(item);
}
uint8_t* at(void* base, int64_t index, size_t item) {
  return static_cast<uint8_t*>(base) + index * static_cast<int64_t>(item);
}

// Rank r's peers in the order it sends to them: r+1, r+2, ... (mod n). It receives from r-1,
// r-2, ..., so that at step s every rank sends to a different rank.
int send_peer(int r, int step, int n) { return (r + step) % n; }
int recv_peer(int r, int step, int n) { return (r - step + n) % n; }

// Prefix sums: offsets[k] = counts[0] + ... + counts[k-1].
std::vector<int64_t> offsets_of(const std::vector<int64_t>& counts) {
  std::vector<int64_t> offsets(counts.size(), 0);
  std::exclusive_scan(counts.begin(), counts.end(), offsets.begin(), int64_t{0});
  return offsets;
}

// Every rank sends ranges[k] (elements) of its input to rank k; this rank receives ranges[r]
// from every peer and reduces the n contributions into `dst` (ranges[r].extent elements), one
// segment at a time.
void reduce_own_range(Transport& t, const void* input, DType dtype, ReduceOp op,
                      const std::vector<ShardRange>& ranges, void* dst, const CallContext& c) {
  const int n = t.size();
  const int r = t.rank();
  const size_t item = dtype_size(dtype);
  Messages m(t, c, item);
  for (int s = 1; s < n; ++s) {
    const int peer = send_peer(r, s, n);
    m.send(peer, at(input, ranges[peer].offset, item), ranges[peer].extent);
  }
  const ShardRange mine = ranges[r];
  if (mine.extent == 0) return;
  const int64_t segment = std::min(m.segment(), mine.extent);
  ScratchBuffer incoming(c.allocator, static_cast<size_t>(n - 1) * segment * item);
  std::vector<const void*> inputs(n);
  for (int64_t o = 0; o < mine.extent; o += segment) {
    const int64_t len = std::min(segment, mine.extent - o);
    uint8_t* slot = incoming.data();
    for (int k = 0; k < n; ++k) {
      if (k == r) {
        inputs[k] = at(input, mine.offset + o, item);
        continue;
      }
      m.recv(k, slot, len);
      inputs[k] = slot;
      slot += segment * item;
    }
    void* out = at(dst, o, item);
    reduce_buffers(dtype, op, inputs.data(), n, &out, 1, 0, len, n);
  }
}

}  // namespace

void p2p_broadcast(Transport& t, Tensor& tensor, int root, const CallContext& c) {
  t.barrier(*c.signature, c.deadline);
  const int n = t.size();
  const int64_t count = tensor.num_elements();
  if (n == 1 || count == 0) return;
  Messages m(t, c, dtype_size(tensor.dtype()));
  const int v = (t.rank() - root + n) % n;  // rank relative to the root
  auto rank_of = [&](int relative) { return (relative + root) % n; };
  void* data = tensor.data();
  if (count <= m.segment()) {
    // Binomial tree: receive from the parent (v without its lowest set bit), then send to the
    // children v + 2^j for the 2^j below that bit, farthest first.
    int mask = 1;
    for (; mask < n; mask <<= 1) {
      if (v & mask) {
        m.recv(rank_of(v - mask), data, count);
        break;
      }
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
      if (v + mask < n) m.send(rank_of(v + mask), data, count);
    }
    return;
  }
  // Chain root -> root+1 -> ... -> root+n-1, segment by segment.
  for (int64_t o = 0; o < count; o += m.segment()) {
    const int64_t len = std::min(m.segment(), count - o);
    uint8_t* segment = at(data, o, m.item());
    if (v > 0) m.recv(rank_of(v - 1), segment, len);
    if (v < n - 1) m.send(rank_of(v + 1), segment, len);
  }
}

void p2p_reduce(Transport& t, const Tensor& input, Tensor& output, ReduceOp op, int root,
                const CallContext& c) {
  t.barrier(*c.signature, c.deadline);
  const int n = t.size();
  const int r = t.rank();
  const size_t item = dtype_size(input.dtype());
  std::vector<ShardRange> chunks(n);
  for (int k = 0; k < n; ++k) chunks[k] = shard_range(input.num_elements(), n, k);
  Messages m(t, c, item);
  if (r != root) {
    ScratchBuffer reduced(c.allocator, static_cast<size_t>(chunks[r].extent) * item);
    reduce_own_range(t, input.data(), input.dtype(), op, chunks, reduced.data(), c);
    m.send(root, reduced.data(), chunks[r].extent);
    return;
  }
  // The root's own chunk goes straight into its output (which may be its input: each element
  // is read before it is written, and the other chunks were sent before any is received).
  reduce_own_range(t, input.data(), input.dtype(), op, chunks, at(output.data(), chunks[r].offset, item), c);
  for (int s = 1; s < n; ++s) {
    const int k = recv_peer(r, s, n);
    m.recv(k, at(output.data(), chunks[k].offset, item), chunks[k].extent);
  }
}

Tensor p2p_all_gather(Transport& t, const Tensor& input, int axis, int root,
                      const CallContext& c) {
  const auto posts = t.exchange(*c.signature, Post{nullptr, nullptr, input.shape()[axis]}, c.deadline);
  const int n = t.size();
  const int r = t.rank();
  const size_t item = dtype_size(input.dtype());
  Messages m(t, c, item);
  if (root < 0) {
    for (int s = 1; s < n; ++s) m.send(send_peer(r, s, n), input.data(), input.num_elements());
  } else if (r != root) {
    m.send(root, input.data(), input.num_elements());
    return Tensor();
  }
  std::vector<int64_t> counts(n);
  for (int k = 0; k < n; ++k) counts[k] = posts[k].count;
  const std::vector<int64_t> offsets = offsets_of(counts);
  const int64_t total = offsets[n - 1] + counts[n - 1];
  const GatherGeometry geometry(input.shape(), axis);
  Tensor out = geometry.allocate(total, input.dtype(), c.allocator);
  geometry.place(out.data(), total, offsets[r], input.data(), counts[r], item);
  // Blocks land in place when the axis is outermost; otherwise through one block of scratch.
  const int64_t largest = *std::max_element(counts.begin(), counts.end()) * geometry.inner;
  ScratchBuffer staged(c.allocator, geometry.outer > 1 ? static_cast<size_t>(largest * geometry.outer) * item : 0);
  for (int s = 1; s < n; ++s) {
    const int k = recv_peer(r, s, n);
    const int64_t elements = geometry.outer * counts[k] * geometry.inner;
    if (geometry.outer == 1) {
      m.recv(k, at(out.data(), offsets[k] * geometry.inner, item), elements);
    } else {
      m.recv(k, staged.data(), elements);
      geometry.place(out.data(), total, offsets[k], staged.data(), counts[k], item);
    }
  }
  return out;
}

Tensor p2p_reduce_scatter(Transport& t, const Tensor& input, ReduceOp op,
                          const std::vector<int64_t>& counts, const CallContext& c) {
  t.barrier(*c.signature, c.deadline);
  const int n = t.size();
  const int64_t row = row_elements(input.shape());
  const std::vector<int64_t> first_rows = offsets_of(counts);
  std::vector<ShardRange> slices(n);
  for (int k = 0; k < n; ++k) slices[k] = {first_rows[k] * row, counts[k] * row};
  Tensor out = Tensor::empty(with_rows(input.shape(), counts[t.rank()]), input.dtype(), c.allocator, false);
  reduce_own_range(t, input.data(), input.dtype(), op, slices, out.data(), c);
  return out;
}

Tensor p2p_all_to_all(Transport& t, const Tensor& input, const std::vector<int64_t>& send_counts,
                      const CallContext& c) {
  t.barrier(*c.signature, c.deadline);
  const int n = t.size();
  const int r = t.rank();
  const int64_t row = row_elements(input.shape());
  const size_t item = dtype_size(input.dtype());
  Messages rows(t, c, item);
  Messages headers(t, c, sizeof(int64_t));
  const std::vector<int64_t> send_offsets = offsets_of(send_counts);
  for (int s = 1; s < n; ++s) {
    const int peer = send_peer(r, s, n);
    headers.send(peer, &send_counts[peer], 1);
    rows.send(peer, at(input.data(), send_offsets[peer] * row, item), send_counts[peer] * row);
  }
  std::vector<int64_t> recv_counts(n);
  recv_counts[r] = send_counts[r];
  for (int s = 1; s < n; ++s) {
    const int k = recv_peer(r, s, n);
    headers.recv(k, &recv_counts[k], 1);
  }
  const std::vector<int64_t> recv_offsets = offsets_of(recv_counts);
  Tensor out = Tensor::empty(with_rows(input.shape(), recv_offsets[n - 1] + recv_counts[n - 1]),
                             input.dtype(), c.allocator, false);
  if (recv_counts[r] > 0) {
    std::memcpy(at(out.data(), recv_offsets[r] * row, item), at(input.data(), send_offsets[r] * row, item),
                static_cast<size_t>(recv_counts[r] * row) * item);
  }
  for (int s = 1; s < n; ++s) {
    const int k = recv_peer(r, s, n);
    rows.recv(k, at(out.data(), recv_offsets[k] * row, item), recv_counts[k] * row);
  }
  return out;
}

std::vector<int64_t> p2p_root_description(Transport& t, const std::vector<int64_t>& description,
                                          int root, const CallContext& c) {
  const int64_t length = t.rank() == root ? static_cast<int64_t>(description.size()) : 0;
  const auto posts = t.exchange(*c.signature, Post{nullptr, nullptr, length}, c.deadline);
  Messages values(t, c, sizeof(int64_t));
  if (t.rank() == root) {
    for (int s = 1; s < t.size(); ++s) values.send(send_peer(root, s, t.size()), description.data(), length);
    return description;
  }
  std::vector<int64_t> out(static_cast<size_t>(posts[root].count));
  values.recv(root, out.data(), posts[root].count);
  return out;
}

Tensor p2p_scatter(Transport& t, const Tensor& input, int root, const std::vector<int64_t>& counts,
                   const Shape& row_shape, DType dtype, const CallContext& c) {
  const int n = t.size();
  const int r = t.rank();
  std::vector<int64_t> dims = {counts[r]};
  dims.insert(dims.end(), row_shape.dims().begin(), row_shape.dims().end());
  Tensor out = Tensor::empty(Shape(dims), dtype, c.allocator, false);
  const int64_t row = row_shape.num_elements();
  const size_t item = dtype_size(dtype);
  Messages m(t, c, item);
  if (r != root) {
    m.recv(root, out.data(), out.num_elements());
    return out;
  }
  const std::vector<int64_t> first_rows = offsets_of(counts);
  for (int s = 1; s < n; ++s) {
    const int k = send_peer(r, s, n);
    m.send(k, at(input.data(), first_rows[k] * row, item), counts[k] * row);
  }
  if (out.nbytes() > 0) std::memcpy(out.data(), at(input.data(), first_rows[r] * row, item), out.nbytes());
  return out;
}

}  // namespace tessel::detail
