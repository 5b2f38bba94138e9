// CRC-32C: byte-at-a-time table lookup, or the SSE4.2 crc32 instruction 8 bytes at a time when
// the CPU has it (chosen once, at the first call). Both compute the same reflected CRC.
#include "tessel/core/crc32c.h"

#include <array>
#include <cstring>

namespace tessel {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // Castagnoli, bit-reversed

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1) ? (c >> 1) ^ kPolynomial : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

// The raw (not inverted) register after `size` more bytes, by table.
uint32_t extend_table(uint32_t state, const unsigned char* p, size_t size) {
  for (size_t i = 0; i < size; ++i) state = kTable[(state ^ p[i]) & 0xFFu] ^ (state >> 8);
  return state;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t extend_sse42(uint32_t state, const unsigned char* p,
                                                        size_t size) {
  uint64_t wide = state;
  for (; size >= 8; size -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    wide = __builtin_ia32_crc32di(wide, word);
  }
  state = static_cast<uint32_t>(wide);
  for (; size > 0; --size, ++p) state = __builtin_ia32_crc32qi(state, *p);
  return state;
}

using ExtendFn = uint32_t (*)(uint32_t, const unsigned char*, size_t);
ExtendFn pick_extend() { return __builtin_cpu_supports("sse4.2") ? extend_sse42 : extend_table; }
#else
using ExtendFn = uint32_t (*)(uint32_t, const unsigned char*, size_t);
ExtendFn pick_extend() { return extend_table; }
#endif

// Appending zero bits to a CRC is linear over GF(2): a 32x32 bit matrix, one uint32_t per column.
using BitMatrix = std::array<uint32_t, 32>;

uint32_t times(const BitMatrix& m, uint32_t v) {
  uint32_t out = 0;
  for (int i = 0; v != 0; ++i, v >>= 1) {
    if (v & 1) out ^= m[static_cast<size_t>(i)];
  }
  return out;
}

BitMatrix squared(const BitMatrix& m) {
  BitMatrix out{};
  for (size_t i = 0; i < 32; ++i) out[i] = times(m, m[i]);
  return out;
}

}  // namespace

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t size_b) {
  if (size_b == 0) return crc_a;
  // The operator for one zero bit, then squared to 2 and 4 bits; each further square doubles
  // it (8 bits = one zero byte first), applied for each set bit of size_b.
  BitMatrix op{};
  op[0] = kPolynomial;
  for (size_t i = 1; i < 32; ++i) op[i] = 1u << (i - 1);
  op = squared(squared(op));
  uint32_t crc = crc_a;
  for (uint64_t n = size_b; n != 0; n >>= 1) {
    op = squared(op);
    if (n & 1) crc = times(op, crc);
  }
  return crc ^ crc_b;
}

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size) {
  static const ExtendFn extend = pick_extend();
  return ~extend(~crc, static_cast<const unsigned char*>(data), size);
}

uint32_t crc32c(const void* data, size_t size) { return crc32c_extend(0, data, size); }

}  // namespace tessel
