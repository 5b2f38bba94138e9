// TopologyProto bytes written by hand, as TF writes them (independent of tessel's generated
// protobuf code, and able to hold what a Topology would reject): fields 1 (packed), 2, 3 and 4
// (packed); zero counts are left out, as proto3 does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessel::testing {

// A varint; int32 values are sign-extended to 64 bits, as protobuf writes them.
inline void put_varint(std::string& out, int64_t value) {
  auto v = static_cast<uint64_t>(value);
  do {
    const auto byte = static_cast<uint8_t>(v & 0x7f);
    v >>= 7;
    out.push_back(static_cast<char>(v != 0 ? (byte | 0x80) : byte));
  } while (v != 0);
}

inline void put_packed(std::string& out, int field, const std::vector<int>& values) {
  if (values.empty()) return;
  std::string payload;
  for (int v : values) put_varint(payload, v);
  put_varint(out, (field << 3) | 2);
  put_varint(out, static_cast<int64_t>(payload.size()));
  out += payload;
}

inline std::string topology_proto_bytes(const std::vector<int>& mesh_shape, int num_tasks,
                                        int per_task, const std::vector<int>& coordinates) {
  std::string out;
  put_packed(out, 1, mesh_shape);
  if (num_tasks != 0) {
    put_varint(out, 2 << 3);
    put_varint(out, num_tasks);
  }
  if (per_task != 0) {
    put_varint(out, 3 << 3);
    put_varint(out, per_task);
  }
  put_packed(out, 4, coordinates);
  return out;
}

}  // namespace tessel::testing
