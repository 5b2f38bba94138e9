// Chunk semantics for splitting one tensor dimension of length n into `shards` pieces.
//
// chunk = ceil(n / shards); shard i holds [min(i*chunk, n), min((i+1)*chunk, n)). Leading
// shards are full, trailing shards short or empty; nothing is ever dropped. When shards
// divides n this is the even split TensorFlow uses.
//   n=10, shards=4: chunk 3 -> [0,3) [3,6) [6,9) [9,10)
//   n=2,  shards=4: chunk 1 -> [0,1) [1,2) [2,2) [2,2)
#pragma once

#include <cstdint>

namespace tessel {

struct ShardRange {
  int64_t offset = 0;  // first index of the shard along the dimension
  int64_t extent = 0;  // number of indices it holds (0 for an empty trailing shard)
  friend bool operator==(const ShardRange&, const ShardRange&) = default;
};

// ceil(n / shards); requires n >= 0 and shards >= 1 (else Error kInvalidArgument).
int64_t shard_chunk_size(int64_t n, int64_t shards);
// The range of shard `index` (0 <= index < shards, else Error kOutOfRange).
ShardRange shard_range(int64_t n, int64_t shards, int64_t index);

}  // namespace tessel
