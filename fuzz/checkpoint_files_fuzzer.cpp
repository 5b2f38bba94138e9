// libFuzzer target: the readers of checkpoint files, which may be corrupt, truncated or written
// by another program. The first byte picks the reader, the rest is the file: 0 -> a safetensors
// file (SafetensorsHeader::read, SafetensorsFile::read), 1 -> a manifest tessel.json
// (checkpoint::metadata, checkpoint::verify). Each must reject bad bytes with tessel::Error;
// any other exception, a crash or a sanitizer report is a finding.
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>

#include "round_trip.h"
#include "tessel/checkpoint/checkpoint.h"
#include "tessel/checkpoint/safetensors.h"

namespace {

// A directory of this process's own, made once, for the file under test.
const std::string& scratch_dir() {
  static const std::string dir = [] {
    char name[] = "/tmp/tessel-fuzz-XXXXXX";
    if (mkdtemp(name) == nullptr) std::abort();
    return std::string(name);
  }();
  return dir;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

template <typename Read>
void expect_error_or_success(const char* what, Read read) {
  try {
    read();
  } catch (const tessel::Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: threw a non-tessel exception: %s\n", what, e.what());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string bytes = tessel::fuzz::bytes_of(data + 1, size - 1);
  if (data[0] % 2 == 0) {
    const std::string path = scratch_dir() + "/shard.safetensors";
    write_file(path, bytes);
    expect_error_or_success("SafetensorsHeader::read",
                            [&] { tessel::SafetensorsHeader::read(path); });
    expect_error_or_success("SafetensorsFile::read", [&] { tessel::SafetensorsFile::read(path); });
  } else {
    write_file(scratch_dir() + "/tessel.json", bytes);
    expect_error_or_success("checkpoint::metadata",
                            [&] { tessel::checkpoint::metadata(scratch_dir()); });
    expect_error_or_success("checkpoint::verify",
                            [&] { tessel::checkpoint::verify(scratch_dir()); });
  }
  return 0;
}
