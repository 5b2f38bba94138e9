// Chunked checksums of a saved shard: the CRC-32C of every kCrcChunkBytes piece of its bytes (the
// last one shorter), recorded in the manifest ("chunk_crc32c"), so that a restore that needs part
// of a shard checks, and reads, only the chunks around that part (docs/checkpoints.md).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tessel/core/crc32c.h"

namespace tessel::checkpoint::detail {

inline constexpr uint64_t kCrcChunkBytes = uint64_t{256} << 10;

// How many chunks `bytes` bytes make.
inline uint64_t num_chunks(uint64_t bytes) { return (bytes + kCrcChunkBytes - 1) / kCrcChunkBytes; }

struct ChunkedCrc {
  uint32_t whole = 0;            // crc32c of all the bytes
  std::vector<uint32_t> chunks;  // of each chunk
};

// One pass over the bytes: each chunk's CRC, and the whole one combined from them. After each
// chunk's CRC, `visit(chunk, size)` runs while the chunk is still in the cache (the save writes
// it there: the bytes come from memory once for both).
template <typename Visit>
ChunkedCrc chunked_crc(const void* data, uint64_t bytes, Visit&& visit) {
  ChunkedCrc out;
  const auto* p = static_cast<const unsigned char*>(data);
  for (uint64_t at = 0; at < bytes; at += kCrcChunkBytes) {
    const uint64_t n = std::min(kCrcChunkBytes, bytes - at);
    const uint32_t c = crc32c(p + at, n);
    out.chunks.push_back(c);
    out.whole = at == 0 ? c : crc32c_combine(out.whole, c, n);
    visit(p + at, n);
  }
  return out;
}

inline ChunkedCrc chunked_crc(const void* data, uint64_t bytes) {
  return chunked_crc(data, bytes, [](const unsigned char*, uint64_t) {});
}

}  // namespace tessel::checkpoint::detail
