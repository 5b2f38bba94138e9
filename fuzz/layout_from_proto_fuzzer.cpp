// libFuzzer target: Layout::from_proto (serialized LayoutProto bytes) rejects
// them with tessel::Error or gives a valid layout whose text form round-trips.
#include <cstddef>
#include <cstdint>
#include <string>

#include "round_trip.h"
#include "tessel/mesh/layout.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessel;
  return fuzz::check_round_trip<Layout>(
      "layout_from_proto", fuzz::bytes_of(data, size),
      [](const std::string& s) { return Layout::from_proto(s); },
      [](const std::string& s) { return Layout::from_string(s); });
}
