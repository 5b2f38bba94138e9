// Test helper of the checkpoint tests: corrupts a saved safetensors file in place.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace tessel::testing {

// Flips the bits `mask` of the byte at offset `at` of the data of safetensors file `file` (after
// its 8-byte header length and its header).
inline void flip_data_byte(const std::string& file, uint64_t at, char mask) {
  uint64_t header = 0;
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.read(reinterpret_cast<char*>(&header), 8);
  f.seekg(static_cast<std::streamoff>(8 + header + at));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ mask);
  f.seekp(static_cast<std::streamoff>(8 + header + at));
  f.write(&c, 1);
}

}  // namespace tessel::testing
