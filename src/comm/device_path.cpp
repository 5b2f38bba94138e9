// Communicator's collectives on device-memory tensors.
#include "comm/device_path.h"

#include <cstring>

#include "core/errors.h"

namespace tessel::detail {
namespace {
constexpr std::string_view kComm = "Communicator";

int64_t elements_per_row(const Tensor& t) {
  int64_t n = 1;
  for (int d = 1; d < t.rank(); ++d) n *= t.shape()[d];
  return n;
}

// Every rank's value of `mine`, learnt at the host meeting (which also compares signatures).
std::vector<int64_t> meet_and_share(Transport& t, int64_t mine, const Signature& sig,
                                    Deadline deadline) {
  Post post;
  post.count = mine;
  const std::vector<Post> posts = t.exchange(sig, post, deadline);
  std::vector<int64_t> all;
  for (const Post& p : posts) all.push_back(p.count);
  return all;
}

std::vector<int64_t> offsets_of(const std::vector<int64_t>& counts) {
  std::vector<int64_t> out(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) out[i] = out[i - 1] + counts[i - 1];
  return out;
}

std::vector<int64_t> scaled(std::vector<int64_t> v, int64_t factor) {
  for (int64_t& x : v) x *= factor;
  return v;
}

}  // namespace

DeviceCollectives* device_collectives_for(Transport& transport, const Tensor& t,
                                          std::string_view op) {
  if (!t.defined() || t.memory_space().is_host()) return nullptr;
  DeviceCollectives* dev = transport.device_collectives();
  if (dev == nullptr) {  // callers stage such tensors through the host first
    throw_error(ErrorCode::kInternal, kComm,
                "{}: a tensor in {} memory reached a transport without device collectives", op,
                t.memory_space().to_string());
  }
  if (!(dev->memory_space() == t.memory_space())) {
    throw_invalid(kComm, "{}: the tensor is in {} memory, but this rank's NCCL communicator is on {}",
                  op, t.memory_space().to_string(), dev->memory_space().to_string());
  }
  return dev;
}

namespace {
bool strided_on_device(const Tensor& t) {
  return t.defined() && !t.memory_space().is_host() && !t.is_contiguous();
}
}  // namespace

bool stages_through_host(Transport& transport, const Tensor& t, bool device_version) {
  return t.defined() && !t.memory_space().is_host() && !strided_on_device(t) &&
         (!device_version || transport.device_collectives() == nullptr);
}

Tensor host_copy(const Tensor& t) {
  if (!t.defined()) return t;
  return t.memory_space().is_host() ? t.clone() : t.to_host();
}

Tensor copy_like(const Tensor& host, const Tensor& like) {
  if (!like.defined() || !host.defined() || like.memory_space().is_host()) return host;
  Tensor out = Tensor::empty(host.shape(), host.dtype(), like.allocator(), /*zero_fill=*/false);
  out.copy_from(host);
  return out;
}

HostStaging::HostStaging(Transport& transport, const Tensor& input, Tensor* output,
                         bool device_version)
    : caller_input_(input), caller_output_(output) {
  const Tensor none;
  const Tensor& out = output != nullptr ? *output : none;
  staged_ = !strided_on_device(input) && !strided_on_device(out) &&
            (stages_through_host(transport, input, device_version) ||
             stages_through_host(transport, out, device_version));
  if (!staged_) return;
  input_ = host_copy(input);
  if (out.defined()) {
    output_ = out.shares_storage_with(input)
                  ? input_
                  : Tensor::empty(out.shape(), out.dtype(), nullptr, /*zero_fill=*/false);
  }
}

void HostStaging::finish() {
  if (caller_output_ != nullptr && caller_output_->defined()) caller_output_->copy_from(output_);
}

Tensor HostStaging::finish(const Tensor& result) const { return copy_like(result, caller_input_); }

void device_all_reduce(DeviceCollectives& dev, Transport& t, const Tensor& input, Tensor& output,
                       ReduceOp op, const Signature& sig, Deadline deadline) {
  (void)device_collectives_for(t, output, "all_reduce (output)");
  t.barrier(sig, deadline);
  dev.all_reduce(input.data_ptr(), output.data_ptr(), input.num_elements(), input.dtype(), op, sig,
                 deadline);
}

void device_reduce(DeviceCollectives& dev, Transport& t, const Tensor& input, Tensor& output,
                   ReduceOp op, int root, const Signature& sig, Deadline deadline) {
  void* out = nullptr;
  if (t.rank() == root) {
    (void)device_collectives_for(t, output, "reduce (output)");
    out = output.data_ptr();
  }
  t.barrier(sig, deadline);
  dev.reduce(input.data_ptr(), out, input.num_elements(), input.dtype(), op, root, sig, deadline);
}

void device_broadcast(DeviceCollectives& dev, Transport& t, Tensor& tensor, int root,
                      const Signature& sig, Deadline deadline) {
  t.barrier(sig, deadline);
  dev.broadcast(tensor.data_ptr(), tensor.num_elements(), tensor.dtype(), root, sig, deadline);
}

Tensor device_all_gather(DeviceCollectives& dev, Transport& t, const Tensor& input, int axis,
                         const Signature& sig, Deadline deadline) {
  const std::vector<int64_t> sizes = meet_and_share(t, input.shape()[axis], sig, deadline);
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  std::vector<int64_t> dims = input.shape().dims();
  dims[static_cast<size_t>(axis)] = total;
  Allocator* memory = input.allocator();
  if (axis == 0) {
    Tensor out = Tensor::empty(Shape(dims), input.dtype(), memory, /*zero_fill=*/false);
    dev.all_gather(input.data_ptr(), out.data_ptr(), scaled(sizes, elements_per_row(input)),
                   input.dtype(), sig, deadline);
    return out;
  }
  // Another axis: gather the blocks whole (rank-major), then move each into its columns.
  int64_t outer = 1;
  for (int d = 0; d < axis; ++d) outer *= input.shape()[d];
  const int64_t inner = input.num_elements() / std::max<int64_t>(1, outer * input.shape()[axis]);
  std::vector<int64_t> block_counts;
  for (int64_t s : sizes) block_counts.push_back(outer * s * inner);
  int64_t gathered_count = 0;
  for (int64_t c : block_counts) gathered_count += c;
  Tensor gathered = Tensor::empty(Shape{gathered_count}, input.dtype(), memory, false);
  dev.all_gather(input.data_ptr(), gathered.data_ptr(), block_counts, input.dtype(), sig, deadline);
  Tensor out = Tensor::empty(Shape(dims), input.dtype(), memory, false);
  std::vector<int64_t> column_dims = {outer, total, inner};
  Tensor out3 = out.reshape(Shape(column_dims));
  int64_t source = 0;
  int64_t column = 0;
  for (size_t r = 0; r < sizes.size(); ++r) {
    if (sizes[r] > 0) {
      Tensor block = gathered.slice(0, source, source + block_counts[r])
                         .reshape(Shape{outer, sizes[r], inner});
      // A strided device view: copy block rows one outer index at a time (each contiguous).
      for (int64_t o = 0; o < outer; ++o) {
        Tensor dst = out3.slice(0, o, o + 1).slice(1, column, column + sizes[r]);
        Tensor src = block.slice(0, o, o + 1);
        if (dst.is_contiguous()) {
          dst.copy_from(src);
        } else {
          for (int64_t c = 0; c < sizes[r]; ++c) {
            dst.slice(1, c, c + 1).copy_from(src.slice(1, c, c + 1));
          }
        }
      }
    }
    source += block_counts[r];
    column += sizes[r];
  }
  return out;
}

Tensor device_reduce_scatter(DeviceCollectives& dev, Transport& t, const Tensor& input,
                             ReduceOp op, const std::vector<int64_t>& rows, const Signature& sig,
                             Deadline deadline) {
  t.barrier(sig, deadline);
  std::vector<int64_t> dims = input.shape().dims();
  dims[0] = rows[static_cast<size_t>(t.rank())];
  Tensor out = Tensor::empty(Shape(dims), input.dtype(), input.allocator(), false);
  dev.reduce_scatter(input.data_ptr(), out.data_ptr(), scaled(rows, elements_per_row(input)),
                     input.dtype(), op, sig, deadline);
  return out;
}

Tensor device_all_to_all(DeviceCollectives& dev, Transport& t, const Tensor& input,
                         const std::vector<int64_t>& rows, const Signature& sig,
                         Deadline deadline) {
  // Each rank posts the rows it sends to every rank; rank r receives column r of that table.
  std::vector<int64_t> received;
  if (t.shares_memory()) {
    Post post;
    post.counts = rows.data();
    const std::vector<Post> posts = t.share(sig, post, deadline);
    for (const Post& p : posts) received.push_back(p.counts[t.rank()]);
    t.barrier(sig, deadline);  // the posted counts are read; they may go
  } else {
    // Round k: every rank posts what it sends to rank k; rank k keeps the column.
    for (int k = 0; k < t.size(); ++k) {
      const std::vector<int64_t> column = meet_and_share(t, rows[static_cast<size_t>(k)], sig, deadline);
      if (k == t.rank()) received = column;
    }
  }
  int64_t total = 0;
  for (int64_t r : received) total += r;
  std::vector<int64_t> dims = input.shape().dims();
  dims[0] = total;
  Tensor out = Tensor::empty(Shape(dims), input.dtype(), input.allocator(), false);
  const int64_t per_row = elements_per_row(input);
  dev.all_to_all(input.data_ptr(), scaled(rows, per_row), scaled(offsets_of(rows), per_row),
                 out.data_ptr(), scaled(received, per_row), scaled(offsets_of(received), per_row),
                 input.dtype(), sig, deadline);
  return out;
}

}  // namespace tessel::detail
