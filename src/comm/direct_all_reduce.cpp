// Direct all-reduce (in-process): the buffer is cut into N chunks; rank r reads chunk r of every
// rank's input, reduces it once and writes the result into chunk r of every rank's output. Each
// byte is read once and written once in total — the memory-traffic minimum — and no temporary
// memory is used. A closing barrier keeps every buffer alive until all ranks are done with it.
#include <vector>

#include "comm/algorithms.h"
#include "comm/reduce_kernels.h"
#include "core/errors.h"
#include "tessel/shard_range.h"

namespace tessel::detail {

void direct_all_reduce(Transport& t, const AllReduceArgs& a) {
  if (!t.shares_memory()) {
    throw_error(ErrorCode::kInvalidArgument, "Communicator",
                "the direct algorithm needs an in-process group");
  }
  const std::vector<Post> posts = t.exchange(*a.signature, Post{a.input, a.output, a.count}, a.deadline);
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
  // Out of place, once the group's inputs and outputs (2·N·S bytes) exceed the last-level
  // cache, outputs are written with non-temporal stores: each output line is then written
  // without first being read, which cuts the traffic from 3·N·S to 2·N·S bytes. In place, the
  // output lines were just read (they are the input), so there is nothing to save; with the
  // cache-resident sizes below the threshold, streaming would only push the results out of
  // cache. (Measured with `tessel bench all_reduce`, docs/benchmarks.md.)
  bool out_of_place = true;
  for (int k = 0; k < n; ++k) out_of_place = out_of_place && posts[k].send != posts[k].recv;
  const size_t footprint = 2 * static_cast<size_t>(a.count) * dtype_size(a.dtype) * static_cast<size_t>(n);
  const bool streaming = out_of_place && footprint > last_level_cache_bytes();
  if (end > begin) {
    reduce_buffers(a.dtype, a.op, inputs.data(), n, outputs.data(), n, begin, end, n, streaming);
  }
  t.barrier(*a.signature, a.deadline);
}

}  // namespace tessel::detail
