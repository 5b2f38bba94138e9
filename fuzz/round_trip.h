// The property every tessel parser is fuzzed for: an input is either rejected with tessel::Error
// (any other exception, a crash or a sanitizer report is a bug) or accepted, and then the value's
// text form parses back to an equal value that prints the same text.
//
//   extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
//     return tessel::fuzz::check_round_trip<Shape>("Shape::parse", bytes_of(data, size),
//         [](const std::string& s) { return Shape::parse(s); },
//         [](const std::string& s) { return Shape::parse(s); });
//   }
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tessel/core/error.h"

namespace tessel::fuzz {

inline std::string bytes_of(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// `parse` reads the fuzzer's input (text or serialized bytes); `reparse` reads the value's
// to_string(). Aborts (a finding for libFuzzer) when the round trip changes the value or the
// text, or when the printed text is rejected.
template <typename Value, typename Parse, typename Reparse>
int check_round_trip(const char* what, const std::string& input, Parse parse, Reparse reparse) {
  Value value;
  try {
    value = parse(input);
  } catch (const Error&) {
    return 0;  // rejected: the expected outcome for most inputs
  }
  const std::string printed = value.to_string();
  try {
    const Value again = reparse(printed);
    if (again == value && again.to_string() == printed) return 0;
    std::fprintf(stderr, "%s: round trip changed the value:\n  first:  %s\n  second: %s\n", what,
                 printed.c_str(), again.to_string().c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: round trip rejected its own output:\n  printed: %s\n  error: %s\n",
                 what, printed.c_str(), e.what());
  }
  std::abort();
}

}  // namespace tessel::fuzz
