// stream_copy.h: SSE2 streaming stores (every x86-64 CPU has them), the source read four pages at
// a time as glibc's large memcpy does (fewer DRAM page switches than one sequential stream, and
// the hardware prefetcher follows each); the CRC-32C variant reads three blocks at a time, as
// crc32c.cpp's does, so that three crc32 instructions are in flight.
#include "core/stream_copy.h"

#include <cstring>

#include "tessel/core/crc32c.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tessel::detail {
namespace {

// Below this many bytes a plain memcpy: the streaming loop's set-up and fence do not pay off, and
// a small destination may well be read soon.
constexpr size_t kStreamMinBytes = 16 << 10;

#if defined(__x86_64__)
constexpr size_t kPage = 4096;

// Copies 64 bytes from `s` to the 16-byte aligned `d` with streaming stores.
inline void stream_line(unsigned char* d, const unsigned char* s) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
  const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
  const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
  _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
  _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
  _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
  _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
}

// Bytes to copy before `d` is 64-byte aligned (a cache line: whole lines are streamed).
size_t head_bytes(const unsigned char* d) {
  return (64 - (reinterpret_cast<uintptr_t>(d) & 63)) & 63;
}

// CRC-32C's raw (not inverted) register after 8 more bytes.
__attribute__((target("sse4.2"))) inline uint64_t crc_word(uint64_t state, const unsigned char* p) {
  uint64_t word;
  std::memcpy(&word, p, 8);
  return __builtin_ia32_crc32di(state, word);
}

// The three-stream block: each of three adjacent kBlock-byte blocks has a register of its own.
constexpr size_t kBlock = 8192;

// Copies 3 * kBlock bytes (`d` 64-byte aligned) and returns the CRC of `crc` extended by them.
__attribute__((target("sse4.2"))) uint32_t copy_three_blocks(unsigned char* d,
                                                             const unsigned char* s,
                                                             uint32_t crc) {
  uint64_t a = ~crc, b = ~0u, c = ~0u;
  for (size_t i = 0; i < kBlock; i += 64) {
    for (size_t k = 0; k < 3; ++k) stream_line(d + k * kBlock + i, s + k * kBlock + i);
    for (size_t w = 0; w < 64; w += 8) {
      a = crc_word(a, s + i + w);
      b = crc_word(b, s + kBlock + i + w);
      c = crc_word(c, s + 2 * kBlock + i + w);
    }
  }
  // Each register started as a CRC of its own (initial ~0): joined as CRCs of adjacent pieces.
  const uint32_t ab = crc32c_combine(~static_cast<uint32_t>(a), ~static_cast<uint32_t>(b), kBlock);
  return crc32c_combine(ab, ~static_cast<uint32_t>(c), kBlock);
}

bool has_sse42() {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
#endif

}  // namespace

void stream_copy(void* dst, const void* src, size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
#if defined(__x86_64__)
  if (n >= kStreamMinBytes) {
    const size_t head = head_bytes(d);
    std::memcpy(d, s, head);
    d += head, s += head, n -= head;
    for (; n >= 4 * kPage; d += 4 * kPage, s += 4 * kPage, n -= 4 * kPage) {
      for (size_t i = 0; i < kPage; i += 64) {
        for (size_t k = 0; k < 4; ++k) {
          _mm_prefetch(reinterpret_cast<const char*>(s + k * kPage + i + 256), _MM_HINT_T0);
          stream_line(d + k * kPage + i, s + k * kPage + i);
        }
      }
    }
    for (; n >= 64; d += 64, s += 64, n -= 64) stream_line(d, s);
    _mm_sfence();  // the streamed lines are visible before what follows the copy
  }
#endif
  std::memcpy(d, s, n);
}

uint32_t stream_copy_crc32c(void* dst, const void* src, size_t n, uint32_t crc) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
#if defined(__x86_64__)
  if (n >= kStreamMinBytes && has_sse42()) {
    const size_t head = head_bytes(d);
    std::memcpy(d, s, head);
    crc = crc32c_extend(crc, s, head);
    d += head, s += head, n -= head;
    for (; n >= 3 * kBlock; d += 3 * kBlock, s += 3 * kBlock, n -= 3 * kBlock) {
      crc = copy_three_blocks(d, s, crc);
    }
    _mm_sfence();
  }
#endif
  std::memcpy(d, s, n);
  return crc32c_extend(crc, s, n);
}

}  // namespace tessel::detail
