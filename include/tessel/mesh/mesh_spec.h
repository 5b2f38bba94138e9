// The one grammar for a mesh written by a user (every CLI --mesh flag, Python's
// tessel.parse_mesh): three forms, told apart by their punctuation.
//
//   x=2,y=2                       names and sizes: Mesh::create over local CPU devices 0..n-1
//   |x=2,y=2|*CPU, |x=2|0,1|...   TensorFlow's text form, short or full (Mesh::from_string)
//   2x2                           sizes only, for a caller whose dimensions have fixed names
//                                 (`default_names`, e.g. {"batch", "model"}); else rejected
//
//   Mesh m = parse_mesh("batch=2,model=2");
//   Mesh m = parse_mesh("2x2", {"batch", "model"});   // the same mesh
//
// A malformed text, a size below 1, or more than `max_devices` devices in the short forms is
// kInvalidArgument naming the text (before any device list is built).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/mesh/mesh.h"

namespace tessel {

inline constexpr int64_t kMaxParsedMeshDevices = 1 << 16;

Mesh parse_mesh(std::string_view text, const std::vector<std::string>& default_names = {},
                int64_t max_devices = kMaxParsedMeshDevices);

}  // namespace tessel
