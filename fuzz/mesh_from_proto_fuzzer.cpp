// libFuzzer target: Mesh::from_proto (serialized MeshProto bytes) rejects
// them with tessel::Error or gives a valid mesh whose text form round-trips.
#include <cstddef>
#include <cstdint>
#include <string>

#include "round_trip.h"
#include "tessel/mesh/mesh.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessel;
  return fuzz::check_round_trip<Mesh>(
      "mesh_from_proto", fuzz::bytes_of(data, size),
      [](const std::string& s) { return Mesh::from_proto(s); },
      [](const std::string& s) { return Mesh::from_string(s); });
}
