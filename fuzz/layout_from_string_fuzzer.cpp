// libFuzzer target: Layout::from_string rejects the text with tessel::Error or round-trips it.
#include <cstddef>
#include <cstdint>
#include <string>

#include "round_trip.h"
#include "tessel/mesh/layout.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessel;
  return fuzz::check_round_trip<Layout>(
      "layout_from_string", fuzz::bytes_of(data, size),
      [](const std::string& s) { return Layout::from_string(s); },
      [](const std::string& s) { return Layout::from_string(s); });
}
