// Direct all-reduce (in-process): the buffer is cut into N chunks; rank r reads chunk r of every
// rank's input, reduces it once and writes the result into chunk r of every rank's output. Each
// byte is read once and written once in total — the memory-traffic minimum — and no temporary
// memory is used. A closing barrier keeps every buffer alive until all ranks are done with it.
//
// Small buffers take one rendezvous instead of two: with more ranks than cores, each rendezvous
// costs every rank a context switch, which dominates the time of a small all-reduce. Each rank
// copies its input into its staging memory (Transport::staging, kept by the group) and posts it;
// after the rendezvous, every rank reduces all the staged copies into its own output. No rank
// touches another rank's buffers, so there is no closing barrier. The two staging banks
// alternate between such calls: a bank is rewritten two small all-reduces later, and every rank
// has finished reading it by then, because it has passed the rendezvous of the call in between.
// Every rank takes the same path (the choice depends only on count, dtype and group size, which
// the signature check makes equal). Temporary memory: two staged copies of at most
// kSmallReadBytes / N bytes per rank.
#include <cstring>
#include <vector>

#include "comm/algorithms.h"
#include "comm/reduce_kernels.h"
#include "core/errors.h"
#include "tessel/mesh/shard_range.h"

namespace tessel::detail {
namespace {

// The one-rendezvous path is taken while each rank reads at most this many bytes (N staged
// copies of the buffer): 4 KiB buffers over 8 ranks, 8 KiB over 4, 16 KiB over 2. Above it, the
// N-fold reads of the one-rendezvous path cost more than the second rendezvous saves (measured
// with `tessel bench all_reduce --devices 4` on 2 cores, docs/benchmarks-history.md).
constexpr int64_t kSmallReadBytes = 32 << 10;

void small_all_reduce(Transport& t, const AllReduceArgs& a, size_t bytes) {
  Transport::Staging& staging = t.staging();
  std::vector<unsigned char>& bank = staging.bank[staging.uses++ % 2];
  if (bank.size() < bytes) bank.resize(bytes);
  if (bytes > 0) std::memcpy(bank.data(), a.input, bytes);
  const std::vector<Post> posts = t.exchange(*a.signature, Post{bank.data(), nullptr, a.count}, a.deadline);
  const int n = t.size();
  std::vector<const void*> inputs(n);
  for (int k = 0; k < n; ++k) inputs[k] = posts[k].send;
  void* output = a.output;
  if (a.count > 0) reduce_buffers(a.dtype, a.op, inputs.data(), n, &output, 1, 0, a.count, n);
}

}  // namespace

void direct_all_reduce(Transport& t, const AllReduceArgs& a) {
  if (!t.shares_memory()) {
    throw_error(ErrorCode::kInvalidArgument, "Communicator",
                "the direct algorithm needs an in-process group");
  }
  const size_t bytes = static_cast<size_t>(a.count) * dtype_size(a.dtype);
  if (static_cast<int64_t>(bytes) * t.size() <= kSmallReadBytes) return small_all_reduce(t, a, bytes);
  const std::vector<Post> posts = t.share(*a.signature, Post{a.input, a.output, a.count}, a.deadline);
  const int n = t.size();
  std::vector<const void*> inputs(n);
  std::vector<void*> outputs(n);
  for (int k = 0; k < n; ++k) {
    inputs[k] = posts[k].send;
    outputs[k] = posts[k].recv;
  }
  // Chunks are whole cache lines so that ranks never write the same line.
  const int64_t per_line = std::max<int64_t>(1, 64 / static_cast<int64_t>(dtype_size(a.dtype)));
  const int64_t lines = (a.count + per_line - 1) / per_line;
  const ShardRange mine = shard_range(lines, n, t.rank());
  const int64_t begin = std::min(a.count, mine.offset * per_line);
  const int64_t end = std::min(a.count, (mine.offset + mine.extent) * per_line);
  // Out of place, once the group's inputs and outputs (2·N·S bytes) fill the last-level
  // cache, outputs are written with non-temporal stores: each output line is then written
  // without first being read, which cuts the traffic from 3·N·S to 2·N·S bytes. In place, the
  // output lines were just read (they are the input), so there is nothing to save; with the
  // cache-resident sizes below the threshold, streaming would only push the results out of
  // cache. (Measured with `tessel bench all_reduce`, docs/benchmarks-history.md.)
  bool out_of_place = true;
  for (int k = 0; k < n; ++k) out_of_place = out_of_place && posts[k].send != posts[k].recv;
  const size_t footprint = 2 * static_cast<size_t>(a.count) * dtype_size(a.dtype) * static_cast<size_t>(n);
  const bool streaming = out_of_place && footprint >= last_level_cache_bytes();
  if (end > begin) {
    reduce_buffers(a.dtype, a.op, inputs.data(), n, outputs.data(), n, begin, end, n, streaming);
  }
  t.barrier(*a.signature, a.deadline);
}

}  // namespace tessel::detail
