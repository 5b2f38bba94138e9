#include "comm/direct_collectives.h"

#include <cstring>
#include <numeric>

#include "comm/reduce_kernels.h"
#include "core/errors.h"
#include "tessel/mesh/shard_range.h"

namespace tessel::detail {

int64_t row_elements(const Shape& s) {
  int64_t n = 1;
  for (int i = 1; i < s.rank(); ++i) n *= s[i];
  return n;
}

Shape with_rows(const Shape& s, int64_t rows) {
  std::vector<int64_t> dims = s.dims();
  dims[0] = rows;
  return Shape(dims);
}

GatherGeometry::GatherGeometry(const Shape& s, int gathered_axis) : dims(s.dims()), axis(gathered_axis) {
  for (int i = 0; i < axis; ++i) outer *= s[i];
  for (int i = axis + 1; i < s.rank(); ++i) inner *= s[i];
}

Tensor GatherGeometry::allocate(int64_t total, DType dtype, Allocator* allocator) const {
  std::vector<int64_t> out_dims = dims;
  out_dims[axis] = total;
  return Tensor::empty(Shape(out_dims), dtype, allocator, /*zero_fill=*/false);
}

void GatherGeometry::place(void* out, int64_t total, int64_t offset, const void* block,
                           int64_t count, size_t item) const {
  auto* dst = static_cast<uint8_t*>(out);
  const auto* src = static_cast<const uint8_t*>(block);
  const size_t run = static_cast<size_t>(count * inner) * item;
  for (int64_t o = 0; o < outer && run > 0; ++o) {
    std::memcpy(dst + ((o * total + offset) * inner) * item, src + o * run, run);
  }
}

std::vector<int64_t> direct_root_description(Transport& t, const std::vector<int64_t>& description,
                                             int root, const CallContext& c) {
  const auto posts = t.share(*c.signature,
                             Post{description.data(), nullptr, static_cast<int64_t>(description.size())},
                             c.deadline);
  const auto* values = static_cast<const int64_t*>(posts[root].send);
  std::vector<int64_t> out(values, values + posts[root].count);
  t.barrier(*c.signature, c.deadline);
  return out;
}

void direct_broadcast(Transport& t, Tensor& tensor, int root, const CallContext& c) {
  const auto posts = t.share(*c.signature, Post{tensor.data(), nullptr, 0}, c.deadline);
  if (t.rank() != root && tensor.nbytes() > 0) {
    std::memcpy(tensor.data(), posts[root].send, tensor.nbytes());
  }
  t.barrier(*c.signature, c.deadline);
}

void direct_reduce(Transport& t, const Tensor& input, Tensor& output, ReduceOp op, int root,
                   const CallContext& c) {
  void* out = t.rank() == root ? output.data() : nullptr;
  const auto posts = t.share(*c.signature, Post{input.data(), out, 0}, c.deadline);
  const int n = t.size();
  std::vector<const void*> inputs(n);
  for (int k = 0; k < n; ++k) inputs[k] = posts[k].send;
  void* root_out = posts[root].recv;
  // Every rank reduces one chunk into the root's output, in parallel.
  const ShardRange mine = shard_range(input.num_elements(), n, t.rank());
  if (mine.extent > 0) {
    reduce_buffers(input.dtype(), op, inputs.data(), n, &root_out, 1, mine.offset,
                   mine.offset + mine.extent, n);
  }
  t.barrier(*c.signature, c.deadline);
}

Tensor direct_all_gather(Transport& t, const Tensor& input, int axis, int root,
                         const CallContext& c) {
  const Shape& s = input.shape();
  const GatherGeometry geometry(s, axis);
  const auto posts = t.share(*c.signature, Post{input.data(), nullptr, s[axis]}, c.deadline);
  Tensor out;
  if (root < 0 || t.rank() == root) {
    int64_t total = 0;
    for (const Post& p : posts) total += p.count;
    out = geometry.allocate(total, input.dtype(), c.allocator);
    int64_t offset = 0;
    for (const Post& p : posts) {
      geometry.place(out.data(), total, offset, p.send, p.count, dtype_size(input.dtype()));
      offset += p.count;
    }
  }
  t.barrier(*c.signature, c.deadline);
  return out;
}

Tensor direct_reduce_scatter(Transport& t, const Tensor& input, ReduceOp op,
                             const std::vector<int64_t>& counts, const CallContext& c) {
  const auto posts = t.share(*c.signature, Post{input.data(), nullptr, 0}, c.deadline);
  const int n = t.size();
  const int r = t.rank();
  const int64_t row = row_elements(input.shape());
  const int64_t first_row = std::accumulate(counts.begin(), counts.begin() + r, int64_t{0});
  Tensor out = Tensor::empty(with_rows(input.shape(), counts[r]), input.dtype(), c.allocator, false);
  std::vector<const void*> inputs(n);
  const size_t item = dtype_size(input.dtype());
  for (int k = 0; k < n; ++k) {
    inputs[k] = static_cast<const uint8_t*>(posts[k].send) + first_row * row * item;
  }
  void* dst = out.data();
  if (counts[r] * row > 0) {
    reduce_buffers(input.dtype(), op, inputs.data(), n, &dst, 1, 0, counts[r] * row, n);
  }
  t.barrier(*c.signature, c.deadline);
  return out;
}

Tensor direct_all_to_all(Transport& t, const Tensor& input, const std::vector<int64_t>& send_counts,
                         const CallContext& c) {
  const auto posts =
      t.share(*c.signature, Post{input.data(), nullptr, 0, 0, send_counts.data()}, c.deadline);
  const int n = t.size();
  const int r = t.rank();
  const int64_t row = row_elements(input.shape());
  const size_t item = dtype_size(input.dtype());
  int64_t total = 0;
  for (int k = 0; k < n; ++k) total += posts[k].counts[r];
  Tensor out = Tensor::empty(with_rows(input.shape(), total), input.dtype(), c.allocator, false);
  auto* dst = static_cast<uint8_t*>(out.data());
  for (int k = 0; k < n; ++k) {
    const int64_t skip = std::accumulate(posts[k].counts, posts[k].counts + r, int64_t{0});
    const size_t bytes = static_cast<size_t>(posts[k].counts[r] * row) * item;
    if (bytes > 0) {
      std::memcpy(dst, static_cast<const uint8_t*>(posts[k].send) + skip * row * item, bytes);
    }
    dst += bytes;
  }
  t.barrier(*c.signature, c.deadline);
  return out;
}

Tensor direct_scatter(Transport& t, const Tensor& input, int root, const std::vector<int64_t>& counts,
                      const Shape& row_shape, DType dtype, const CallContext& c) {
  const void* mine = t.rank() == root ? input.data() : nullptr;
  const auto posts = t.share(*c.signature, Post{mine, nullptr, 0}, c.deadline);
  const int r = t.rank();
  std::vector<int64_t> dims = {counts[r]};
  dims.insert(dims.end(), row_shape.dims().begin(), row_shape.dims().end());
  Tensor out = Tensor::empty(Shape(dims), dtype, c.allocator, false);
  const int64_t row = row_shape.num_elements();
  const int64_t first_row = std::accumulate(counts.begin(), counts.begin() + r, int64_t{0});
  const size_t item = dtype_size(dtype);
  if (out.nbytes() > 0) {
    std::memcpy(out.data(), static_cast<const uint8_t*>(posts[root].send) + first_row * row * item,
                out.nbytes());
  }
  t.barrier(*c.signature, c.deadline);
  return out;
}

}  // namespace tessel::detail
