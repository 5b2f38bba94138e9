// Mesh: a named n-dimensional grid of devices, with TensorFlow DTensor's semantics and text form.
//
// A mesh has named dimensions (the last varies fastest), one global device id per grid point in
// row-major order, the subset of ids this process owns (local ids) paired 1:1 with local device
// names, optional global device names, a name, and a use_xla_spmd flag. A device's position in
// the flat id list is its offset; ids are consecutive, so offset = id - min_global_device_id().
//
//   Mesh m = Mesh::from_string("|x=2,y=2|*CPU");   // TF's test shorthand: 4 local CPU devices
//   m.shape() == {2, 2}; m.strides() == {2, 1}; m.device_location(3) == {1, 1}
//   m.to_string() == "|x=2,y=2|0,1,2,3|0,1,2,3|/job:localhost/task:0/device:CPU:0,...,CPU:3"
//
// Besides tile meshes there is the empty mesh (Mesh(), prints "empty_mesh") and the
// single-device mesh (Mesh::from_device, prints the bare device name).
//
// Validation: every construction path (constructor, from_string, from_proto) runs the checks of
// TF's Python constructor and of its C++ parser; errors are Error kInvalidArgument whose messages
// contain TF's texts (docs/compatibility.md lists where tessel is deliberately stricter).
// Thread safety: an immutable value; copies share their data and are cheap.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace tessel {

struct MeshDimension {
  std::string name;
  int64_t size = 0;
  friend bool operator==(const MeshDimension&, const MeshDimension&) = default;
};

class Mesh {
 public:
  // The empty mesh: no dimensions and no devices.
  Mesh();

  // TF's Python constructor Mesh(dim_names, global_device_ids, local_device_ids, local_devices,
  // mesh_name, global_devices, use_xla_spmd), with the ndarray of global ids given as its shape
  // (`ids_shape`) and its flat row-major contents. Checks run in TF's order (see
  // tf-dtensor-semantics.md §1.2), then the parser's (§1.3).
  Mesh(std::vector<std::string> dim_names, std::vector<int64_t> ids_shape,
       std::vector<int64_t> global_device_ids, std::vector<int64_t> local_device_ids,
       std::vector<std::string> local_devices, std::string mesh_name = "",
       std::vector<std::string> global_devices = {}, bool use_xla_spmd = false);

  // Convenience: dims {{"x",2},{"y",2}} with ids 0..n-1, all of them local.
  Mesh(const std::vector<MeshDimension>& dims, const std::vector<std::string>& local_devices,
       std::string mesh_name = "");

  // A mesh of one device and no dimensions (TF's Mesh.from_device). The device is a full name,
  // /job:<job>[/replica:<r>]/task:<t>/device:<type>:<id>; anything else (TF takes any non-empty
  // text here, which then fails to parse back) is kInvalidArgument.
  static Mesh from_device(const std::string& device);
  // TF's create_mesh: dims over devices "/job:localhost/replica:0/task:0/device:<type>:<i>".
  // A size of -1 in a 1-D spec means `num_devices`. Empty dims: one dim "x" of num_devices.
  static Mesh create(const std::vector<MeshDimension>& dims, const std::string& device_type = "CPU",
                     const std::string& mesh_name = "", int64_t num_devices = -1,
                     bool use_xla_spmd = false);
  // TF's create_mesh with explicit devices: names without a leading '/' ("CPU:0") get the
  // prefix "/job:localhost/replica:0/task:0/device:"; ids are 0..n-1, all local. Empty dims:
  // one dim "x" over all devices; a 1-D size of -1 means all devices.
  static Mesh create_on_devices(const std::vector<MeshDimension>& dims,
                                const std::vector<std::string>& devices,
                                const std::string& mesh_name = "", bool use_xla_spmd = false);
  // TF's text form (§1.5). Malformed: Error kInvalidArgument quoting TF's message.
  static Mesh from_string(const std::string& text);
  // The serialized tessel.MeshProto (wire-compatible with tensorflow.dtensor.MeshProto).
  static Mesh from_proto(const std::string& bytes);

  // Kind.
  bool is_empty() const;          // no global ids and not single-device
  bool is_single_device() const;  // from_device
  bool is_remote() const;         // global ids but no local ones
  bool use_xla_spmd() const;

  // Dimensions.
  const std::string& name() const;
  std::vector<std::string> dim_names() const;
  const std::vector<MeshDimension>& dims() const;
  int rank() const;  // number of dimensions
  std::vector<int64_t> shape() const;
  // Number of global device ids (0 for the single-device and empty meshes).
  int64_t size() const;
  bool contains_dim(const std::string& name) const;
  // Unknown name: Error kNotFound "Dimension <n> does not exist in mesh.Available dimensions: ..".
  int64_t dim_size(const std::string& name) const;
  // Position of a dimension in dims(); unknown: kNotFound as above.
  int dim_index(const std::string& name) const;
  // Row-major strides of shape(): [b*c*d, c*d, d, 1] for [a,b,c,d].
  std::vector<int64_t> strides() const;

  // Devices.
  const std::vector<int64_t>& global_device_ids() const;  // flat, row-major
  const std::vector<int64_t>& local_device_ids() const;
  const std::vector<std::string>& local_devices() const;
  const std::vector<std::string>& global_devices() const;
  int64_t num_local_devices() const;
  // Minimum global id (0 for an empty mesh).
  int64_t min_global_device_id() const;
  // The single device's name ("" unless is_single_device()).
  const std::string& single_device() const;
  // "CPU", "GPU", "TPU"; "" for the empty mesh.
  std::string device_type() const;

  // Coordinates.
  // Row-major unravel of an offset; offset < 0 or >= size(): Error kInvalidArgument
  // ("Mesh offset cannot be negative or exceed Mesh's size").
  std::vector<int64_t> device_location(int64_t offset) const;
  // TF's coords(i): (i / strides) % shape, wrapping for i >= size().
  std::vector<int64_t> coords(int64_t index) const;
  // Inverse of device_location. Wrong rank or a coordinate out of range: kInvalidArgument.
  int64_t offset_of(const std::vector<int64_t>& location) const;
  // offset -> {dim name -> coordinate}, for every offset 0..size()-1.
  std::map<int64_t, std::map<std::string, int64_t>> unravel_index() const;
  // Locations of the local devices in local order. Unlike TF (which treats ids as offsets),
  // ids are mapped to offsets first, so meshes whose ids start above 0 work.
  std::vector<std::vector<int64_t>> local_device_locations() const;
  // Offset of a global device id; not in the mesh: kNotFound.
  int64_t offset_of_device_id(int64_t device_id) const;

  // Derived meshes.
  // Same dims and ids, every local device renamed /job:J/replica:R/task:T/device:CPU:i; the name,
  // global devices and use_xla_spmd are dropped (as in TF).
  Mesh host_mesh() const;

  // Text and wire forms.
  std::string to_string() const;
  std::string as_proto() const;  // serialized MeshProto bytes
  // Hash of the dims, global ids and global devices only: equal on every client of a mesh. A
  // mesh whose ids are all local and that names no global devices hashes its local devices in
  // their place (they are its global devices), so that meshes over different devices differ.
  uint64_t global_fingerprint() const;

  // Exact equality of every field (TF compares the protos).
  friend bool operator==(const Mesh& a, const Mesh& b);
  friend bool operator!=(const Mesh& a, const Mesh& b) { return !(a == b); }
  size_t hash() const;

  // ---- internal ---------------------------------------------------------------------------
  // The fields behind the handle; defined in src/mesh/mesh_data.h, not part of the API.
  struct Data;

 private:
  explicit Mesh(std::shared_ptr<const Data> data);
  friend struct MeshBuilder;
  std::shared_ptr<const Data> data_;  // shared, immutable
};

std::ostream& operator<<(std::ostream& os, const Mesh& mesh);

}  // namespace tessel

template <>
struct std::hash<tessel::Mesh> {
  size_t operator()(const tessel::Mesh& m) const { return m.hash(); }
};
