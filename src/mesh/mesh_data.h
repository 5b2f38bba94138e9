// Internal: the fields behind a Mesh handle, and the one place that turns fields into a Mesh.
#pragma once

#include <string>
#include <vector>

#include "tessel/mesh/mesh.h"

namespace tessel {

struct Mesh::Data {
  std::string name;
  std::vector<MeshDimension> dims;
  std::vector<int64_t> global_ids;  // flat, row-major over dims
  std::vector<int64_t> local_ids;   // paired 1:1 with local_devices
  std::vector<std::string> local_devices;
  std::vector<std::string> global_devices;
  bool use_xla_spmd = false;
  std::string single_device;  // non-empty only for a single-device mesh
};

// Which validation layer runs first: TF's Python constructor checks, or its C++ parser checks.
// Both always run (tessel merges the layers); the order decides which message wins when a
// description breaks several rules, and follows the path TF would take.
enum class MeshOrigin { kConstructor, kParser };

struct MeshBuilder {
  // Validates a tile mesh (or returns the empty mesh for no dims and no ids).
  static Mesh build(Mesh::Data data, MeshOrigin origin);
  // No validation: the empty and single-device meshes.
  static Mesh wrap(Mesh::Data data);
  static const Mesh::Data& data(const Mesh& mesh) { return *mesh.data_; }

  // TF's Python constructor checks that apply after the id array is known (§1.2, 3 and 8-13),
  // plus tessel's: local ids must be a subset of the global ids (seed 74).
  static void check_constructor_rules(const Mesh::Data& data);
  // TF's C++ GetMesh checks (§1.3), plus tessel's naming rules.
  static void check_parser_rules(const Mesh::Data& data);
};

// The most devices one mesh may have: above today's largest SPMD meshes, low enough that a
// mistyped size fails fast instead of allocating ids for 10^14 devices.
inline constexpr int64_t kMaxMeshDevices = int64_t{1} << 16;

// Product of the dimension sizes. A size below 1, or a product above kMaxMeshDevices:
// Error kInvalidArgument naming the dimension.
int64_t mesh_device_count(const std::vector<MeshDimension>& dims);

// "[0,1,2]".
std::string format_ids(const std::vector<int64_t>& ids);

}  // namespace tessel
