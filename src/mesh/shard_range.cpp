#include "tessel/mesh/shard_range.h"

#include <algorithm>

#include "core/errors.h"

namespace tessel {

int64_t shard_chunk_size(int64_t n, int64_t shards) {
  if (n < 0) detail::throw_invalid("ShardRange", "dimension length {} is negative", n);
  if (shards < 1) detail::throw_invalid("ShardRange", "shard count {} is less than 1", shards);
  return (n + shards - 1) / shards;
}

ShardRange shard_range(int64_t n, int64_t shards, int64_t index) {
  const int64_t chunk = shard_chunk_size(n, shards);
  if (index < 0 || index >= shards) {
    detail::throw_error(ErrorCode::kOutOfRange, "ShardRange", "shard index {} is outside [0, {})",
                        index, shards);
  }
  const int64_t begin = std::min(index * chunk, n);
  const int64_t end = std::min(begin + chunk, n);
  return ShardRange{begin, end - begin};
}

}  // namespace tessel
