// libFuzzer target: DeviceName::parse rejects the text with tessel::Error or round-trips it.
#include <cstddef>
#include <cstdint>
#include <string>

#include "round_trip.h"
#include "tessel/core/device_name.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessel;
  return fuzz::check_round_trip<DeviceName>(
      "device_name_parse", fuzz::bytes_of(data, size),
      [](const std::string& s) { return DeviceName::parse(s); },
      [](const std::string& s) { return DeviceName::parse(s); });
}
