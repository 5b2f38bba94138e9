// CRC-32C: byte-at-a-time table lookup, or the SSE4.2 crc32 instruction 8 bytes at a time on
// three streams at once when the CPU has it (chosen once, at the first call). Both compute the
// same reflected CRC.
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

// Products of polynomials modulo the CRC's, in the reflected bit order (zlib's multmodp and
// x2nmodp): appending n zero bytes to a CRC register multiplies it by x^(8n).
// `a` must not be 0 (every factor used here is a power of x).
constexpr uint32_t multiply_mod_p(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, product = 0;
  while (true) {
    if (a & m) {
      product ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ kPolynomial : b >> 1;
  }
  return product;
}

// x^(2^k) modulo the polynomial, k = 0..31.
constexpr std::array<uint32_t, 32> make_powers() {
  std::array<uint32_t, 32> powers{};
  uint32_t p = 1u << 30;  // x^1
  powers[0] = p;
  for (size_t k = 1; k < 32; ++k) powers[k] = p = multiply_mod_p(p, p);
  return powers;
}
constexpr std::array<uint32_t, 32> kPowers = make_powers();

// x^(8 * bytes) modulo the polynomial: the factor that appends `bytes` zero bytes.
uint32_t zero_bytes_factor(uint64_t bytes) {
  uint32_t p = 1u << 31;  // x^0
  for (size_t k = 3; bytes != 0; bytes >>= 1, ++k) {
    if (bytes & 1) p = multiply_mod_p(kPowers[k & 31], p);
  }
  return p;
}

#if defined(__x86_64__)
// The crc32 instruction takes 3 cycles and can start one per cycle: three independent streams
// over three adjacent blocks keep it busy, and the three registers are joined by shifting the
// first two over the blocks after them (a multiplication by a precomputed x^(8 * block)).
template <size_t kBlock>
__attribute__((target("sse4.2"))) uint32_t extend_three_blocks(uint32_t state,
                                                               const unsigned char* p,
                                                               uint32_t block_factor) {
  uint64_t a = state, b = 0, c = 0;
  for (size_t i = 0; i < kBlock; i += 8) {
    uint64_t wa, wb, wc;
    std::memcpy(&wa, p + i, 8);
    std::memcpy(&wb, p + kBlock + i, 8);
    std::memcpy(&wc, p + 2 * kBlock + i, 8);
    a = __builtin_ia32_crc32di(a, wa);
    b = __builtin_ia32_crc32di(b, wb);
    c = __builtin_ia32_crc32di(c, wc);
  }
  uint32_t joined = multiply_mod_p(block_factor, static_cast<uint32_t>(a)) ^
                    static_cast<uint32_t>(b);
  return multiply_mod_p(block_factor, joined) ^ static_cast<uint32_t>(c);
}

__attribute__((target("sse4.2"))) uint32_t extend_sse42(uint32_t state, const unsigned char* p,
                                                        size_t size) {
  constexpr size_t kLong = 8192, kShort = 256;
  static const uint32_t long_factor = zero_bytes_factor(kLong);
  static const uint32_t short_factor = zero_bytes_factor(kShort);
  for (; size >= 3 * kLong; size -= 3 * kLong, p += 3 * kLong) {
    state = extend_three_blocks<kLong>(state, p, long_factor);
  }
  for (; size >= 3 * kShort; size -= 3 * kShort, p += 3 * kShort) {
    state = extend_three_blocks<kShort>(state, p, short_factor);
  }
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

}  // namespace

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t size_b) {
  if (size_b == 0) return crc_a;
  return multiply_mod_p(zero_bytes_factor(size_b), crc_a) ^ crc_b;
}

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size) {
  static const ExtendFn extend = pick_extend();
  return ~extend(~crc, static_cast<const unsigned char*>(data), size);
}

uint32_t crc32c(const void* data, size_t size) { return crc32c_extend(0, data, size); }

}  // namespace tessel
