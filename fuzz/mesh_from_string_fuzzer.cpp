// libFuzzer target: Mesh::from_string must either reject the input with tessel::Error or
// accept it and round-trip: from_string(to_string()) is an equal mesh with the same text.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tessel/core/error.h"
#include "tessel/mesh/mesh.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  tessel::Mesh mesh;
  try {
    mesh = tessel::Mesh::from_string(text);
  } catch (const tessel::Error&) {
    return 0;  // rejected: the expected outcome for most inputs
  }
  const std::string printed = mesh.to_string();
  try {
    const tessel::Mesh again = tessel::Mesh::from_string(printed);
    if (again == mesh && again.to_string() == printed) return 0;
    std::fprintf(stderr,
                 "mesh round trip changed the mesh:\n  input:  %s\n  first:  %s\n"
                 "  second: %s\n",
                 text.c_str(), printed.c_str(), again.to_string().c_str());
  } catch (const tessel::Error& e) {
    std::fprintf(stderr,
                 "mesh round trip rejected its own output:\n  input:  %s\n  printed: %s\n"
                 "  error:  %s\n",
                 text.c_str(), printed.c_str(), e.what());
  }
  std::abort();
}
