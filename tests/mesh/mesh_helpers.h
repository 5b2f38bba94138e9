// Shared fixtures for the mesh-layer tests.
#pragma once

#include <string>
#include <vector>

#include "tessel/mesh/mesh.h"

namespace tessel::testing {

// "/job:localhost/replica:0/task:0/device:<type>:<i>" for i in [0, n).
inline std::vector<std::string> devices(int n, const std::string& type = "CPU",
                                        const std::string& job = "localhost") {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    out.push_back("/job:" + job + "/replica:0/task:0/device:" + type + ":" + std::to_string(i));
  }
  return out;
}

inline std::vector<int64_t> iota(int n, int64_t start = 0) {
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i) out.push_back(start + i);
  return out;
}

// x=2,y=2 over 4 local CPUs.
inline Mesh mesh_2x2() { return Mesh::from_string("|x=2,y=2|*CPU"); }

}  // namespace tessel::testing
