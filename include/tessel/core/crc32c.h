// crc32c: the CRC-32C (Castagnoli) checksum, as iSCSI, ext4, zarr's crc32c codec and TF's
// tensor bundles use it (reflected polynomial 0x82F63B78, initial value and final xor ~0).
//
//   crc32c("123456789", 9) == 0xE3069283          // the standard check value
//   uint32_t c = crc32c(a, n); c = crc32c_extend(c, b, m);   // == crc32c of a then b
//   crc32c_combine(crc32c(a, n), crc32c(b, m), m)            // the same, from the two CRCs
//
// Uses the SSE4.2 crc32 instruction when the CPU has it, a table otherwise (same results).
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessel {

// The checksum of `size` bytes at `data` (0 for no bytes).
uint32_t crc32c(const void* data, size_t size);
// The checksum of the bytes that gave `crc` followed by these `size` bytes.
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size);
// The checksum of A followed by B from crc32c(A), crc32c(B) and B's length, without the bytes
// (zlib's crc32_combine for the Castagnoli polynomial: O(log size) products modulo the
// polynomial).
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t size_b);

}  // namespace tessel
