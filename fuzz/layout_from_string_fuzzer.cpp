// libFuzzer target: Layout::from_string must either reject the input with tessel::Error or
// accept it and round-trip: from_string(to_string()) is an equal layout with the same text.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tessel/core/error.h"
#include "tessel/mesh/layout.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  tessel::Layout layout;
  try {
    layout = tessel::Layout::from_string(text);
  } catch (const tessel::Error&) {
    return 0;  // rejected: the expected outcome for most inputs
  }
  const std::string printed = layout.to_string();
  try {
    const tessel::Layout again = tessel::Layout::from_string(printed);
    if (again == layout && again.to_string() == printed) return 0;
    std::fprintf(stderr,
                 "layout round trip changed the layout:\n  input:  %s\n  first:  %s\n"
                 "  second: %s\n",
                 text.c_str(), printed.c_str(), again.to_string().c_str());
  } catch (const tessel::Error& e) {
    std::fprintf(stderr,
                 "layout round trip rejected its own output:\n  input:  %s\n"
                 "  printed: %s\n  error:  %s\n",
                 text.c_str(), printed.c_str(), e.what());
  }
  std::abort();
}
