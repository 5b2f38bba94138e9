// Internal: copies of many bytes into memory that is not read again soon (a checkpoint's staging
// area, a restored tensor's block), with stores that bypass the cache (non-temporal), and the
// same copy computing the CRC-32C of the bytes in the same pass.
//
// A cached store first reads the destination line from memory (read for ownership) and then
// evicts another line: a large copy moves three lines per line copied, a streaming one two.
// glibc's memcpy streams only above its x86_non_temporal_threshold (3/4 of the L3 cache, 99 MiB on
// the development VM), so a 256 MiB state copied tensor block by tensor block (16 MiB each) took
// 1.4 to 1.7 times one 256 MiB memcpy (docs/checkpoints.md, "Performance").
//
//   detail::stream_copy(dst, src, n);                           // as memcpy(dst, src, n)
//   uint32_t c = detail::stream_copy_crc32c(dst, src, n, 0);    // and c == crc32c(src, n)
//
// Other architectures (and x86 without SSE4.2 for the CRC): memcpy, then crc32c_extend.
// Thread safety: pure functions (the ranges must not overlap).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessel::detail {

// memcpy(dst, src, n), the destination written around the cache.
void stream_copy(void* dst, const void* src, size_t n);

// stream_copy(dst, src, n), returning crc32c_extend(crc, src, n) (tessel/core/crc32c.h), computed
// from the bytes as they are copied.
uint32_t stream_copy_crc32c(void* dst, const void* src, size_t n, uint32_t crc);

}  // namespace tessel::detail
