// Topology: where every device of a multi-host system sits (TF's tf.tpu.experimental.Topology).
//
// A system has num_tasks hosts (TF: tasks) with num_devices_per_task devices each. Every device
// has coordinates in a mesh of shape mesh_shape; a mesh point no device occupies is "missing".
// A device's global id is task * num_devices_per_task + its index on the host, the order TF
// DTensor's multi-client meshes use. The wire form is TopologyProto (proto/topology.proto),
// field for field TF's, so serialized() parses in TF and TF's bytes parse here.
//
//   Topology t = Topology::for_hosts(2, 4);             // 2 hosts x 4 CPU devices
//   t.mesh_shape() == {4, 2, 1, 1};  t.num_devices() == 8
//   t.device_coordinates(1, 3) == {3, 1, 0, 0}           // device 3 of host 1
//   t.task_ordinal_at_coordinates({3, 1, 0, 0}) == 1;  t.global_device_id(1, 3) == 7
//   Topology::from_serialized(t.serialized()) == t
//
// Validation (every construction path): TF's parse checks, in TF's order and with its texts
// ("`mesh_shape` must be a vector ... with positive entries", "`device_coordinates` must have
// shape num_tasks (..) * num_tpu_devices_per_task (..) * len(mesh_shape) (..)", "... must be
// >= 0"), then two that TF leaves to an IndexError or a silently overwritten inverse map: every
// coordinate lies inside mesh_shape, and no two devices share coordinates. Any mesh rank >= 1 is
// accepted (TF's Python class insists on 4; old TF protos have 3). Every failure is
// Error kInvalidArgument naming the offending values.
//
// Thread safety: an immutable value type.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <unordered_map>
#include <vector>

namespace tessel {

class Topology {
 public:
  // The empty topology: no hosts, mesh_shape [1, 1, 1, 1] (its one point missing).
  Topology();

  // TF's constructor from arrays: the mesh shape and the coordinates of every device as
  // device_coordinates[task][device] = {c_0, ..., c_{rank-1}} (TF: a rank-3 array). Every task
  // must have the same number of devices and every coordinate mesh_shape.size() entries.
  // device_type is the devices' type ("CPU", "GPU", "TPU", ...: an upper-case letter, then
  // upper-case letters, digits or '_').
  Topology(std::vector<int> mesh_shape,
           const std::vector<std::vector<std::vector<int>>>& device_coordinates,
           std::string device_type = "CPU");

  // The uniform topology of num_tasks hosts with devices_per_task devices each, in TF's rank-4
  // form: mesh_shape [devices_per_task, num_tasks, 1, 1], device d of task t at [d, t, 0, 0].
  // Both counts must be >= 1.
  static Topology for_hosts(int num_tasks, int devices_per_task, std::string device_type = "CPU");
  // (A runtime's own one-host topology is Runtime::topology(), in the runtime layer.)

  // TopologyProto bytes (TF's or tessel's) -> Topology. Bytes that do not parse as a
  // TopologyProto, or a proto that fails validation: kInvalidArgument.
  static Topology from_serialized(const std::string& bytes);
  // The serialized TopologyProto (TF's Topology.serialized()).
  std::string serialized() const;

  const std::vector<int>& mesh_shape() const { return mesh_shape_; }
  int mesh_rank() const { return static_cast<int>(mesh_shape_.size()); }
  int num_tasks() const { return num_tasks_; }
  // TF: num_tpus_per_task.
  int num_devices_per_task() const { return devices_per_task_; }
  // num_tasks() * num_devices_per_task().
  int num_devices() const { return num_tasks_ * devices_per_task_; }
  const std::string& device_type() const { return device_type_; }

  // Every device's coordinates, flattened task-major: [num_tasks, num_devices_per_task, rank].
  const std::vector<int>& device_coordinates() const { return coordinates_; }
  // The coordinates of device `device` of task `task`; either out of range: kOutOfRange.
  std::vector<int> device_coordinates(int task, int device) const;

  // The task / device index at a mesh point; -1 where the point is missing (as TF's inverse
  // maps). Coordinates of the wrong length: kInvalidArgument; outside mesh_shape: kOutOfRange.
  int task_ordinal_at_coordinates(const std::vector<int>& coordinates) const;
  // TF: tpu_device_ordinal_at_coordinates.
  int device_ordinal_at_coordinates(const std::vector<int>& coordinates) const;
  // The mesh points no device occupies, in row-major order.
  std::vector<std::vector<int>> missing_devices() const;

  // task * num_devices_per_task() + device; either out of range: kOutOfRange.
  int64_t global_device_id(int task, int device) const;
  // The global ids of task `task`'s devices, in device order; task out of range: kOutOfRange.
  std::vector<int64_t> global_device_ids(int task) const;
  // "/job:<job>/replica:0/task:<task>/device:<device_type>:<device>"; out of range: kOutOfRange.
  std::string device_name(int task, int device, const std::string& job = "localhost") const;
  // TF's tpu_device_name_at_coordinates: the name of the device at a mesh point. A missing
  // point: kNotFound; bad coordinates as task_ordinal_at_coordinates.
  std::string device_name_at_coordinates(const std::vector<int>& coordinates,
                                         const std::string& job = "localhost") const;

  // "Topology(mesh_shape=[4,2,1,1], num_tasks=2, num_devices_per_task=4, device_type=CPU)".
  std::string to_string() const;

  friend bool operator==(const Topology& a, const Topology& b) {
    return a.mesh_shape_ == b.mesh_shape_ && a.num_tasks_ == b.num_tasks_ &&
           a.devices_per_task_ == b.devices_per_task_ && a.coordinates_ == b.coordinates_ &&
           a.device_type_ == b.device_type_;
  }

 private:
  // Validates and builds the inverse map; every constructor ends here.
  Topology(std::vector<int> mesh_shape, int64_t num_tasks, int64_t devices_per_task,
           std::vector<int> coordinates, std::string device_type);
  // Row-major index of a mesh point after checking it (see task_ordinal_at_coordinates).
  int64_t point_index(const std::vector<int>& coordinates) const;

  std::vector<int> mesh_shape_;
  int num_tasks_ = 0;
  int devices_per_task_ = 0;
  std::vector<int> coordinates_;  // flattened [task][device][dim]
  std::string device_type_ = "CPU";
  // Row-major mesh point -> task * devices_per_task + device, for occupied points only.
  std::unordered_map<int64_t, int> occupant_;
};

std::ostream& operator<<(std::ostream& os, const Topology& topology);

}  // namespace tessel
