// stream_copy and stream_copy_crc32c (core/stream_copy.h): the same bytes as memcpy and the same
// CRC as crc32c_extend, for every alignment of the destination and sizes around the streaming
// loop's edges (its 16 KiB threshold, 64-byte lines, 3 x 8 KiB CRC blocks, 4 x 4 KiB pages).
#include "core/stream_copy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tessel/core/crc32c.h"

namespace tessel::detail {
namespace {

std::vector<unsigned char> pattern(size_t n) {
  std::vector<unsigned char> bytes(n);
  uint32_t x = 12345;
  for (unsigned char& b : bytes) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<unsigned char>(x >> 24);
  }
  return bytes;
}

const size_t kSizes[] = {0,     1,     63,    64,    65,    16383, 16384, 16447,
                         24575, 24576, 24577, 49152, 73729, 99999, (1u << 20) + 13};

TEST(StreamCopy, CopiesLikeMemcpyAtEveryAlignment) {
  const std::vector<unsigned char> src = pattern((1u << 20) + 200);
  std::vector<unsigned char> dst(src.size() + 128);
  for (size_t dst_offset : {0, 1, 8, 31, 63}) {
    for (size_t src_offset : {0, 5}) {
      for (size_t n : kSizes) {
        std::fill(dst.begin(), dst.end(), 0xAB);
        stream_copy(dst.data() + dst_offset, src.data() + src_offset, n);
        ASSERT_EQ(std::memcmp(dst.data() + dst_offset, src.data() + src_offset, n), 0)
            << "n=" << n << " dst_offset=" << dst_offset << " src_offset=" << src_offset;
        // Nothing written around the destination.
        EXPECT_EQ(dst[dst_offset + n], 0xAB);
        if (dst_offset > 0) {
          EXPECT_EQ(dst[dst_offset - 1], 0xAB);
        }
      }
    }
  }
}

TEST(StreamCopy, CrcVariantCopiesAndReturnsTheExtendedCrc) {
  const std::vector<unsigned char> src = pattern((1u << 20) + 200);
  std::vector<unsigned char> dst(src.size() + 128);
  for (size_t dst_offset : {0, 3, 32, 63}) {
    for (size_t n : kSizes) {
      for (uint32_t start : {0u, 0xE3069283u}) {
        std::fill(dst.begin(), dst.end(), 0);
        const uint32_t crc = stream_copy_crc32c(dst.data() + dst_offset, src.data() + 7, n, start);
        EXPECT_EQ(crc, crc32c_extend(start, src.data() + 7, n)) << "n=" << n;
        ASSERT_EQ(std::memcmp(dst.data() + dst_offset, src.data() + 7, n), 0) << "n=" << n;
      }
    }
  }
  // The standard check value, through the copy.
  char out[9];
  EXPECT_EQ(stream_copy_crc32c(out, "123456789", 9, 0), 0xE3069283u);
}

}  // namespace
}  // namespace tessel::detail
