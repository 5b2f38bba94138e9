// DeviceAssignment: which device runs logical core c of replica r (TF's
// tf.tpu.experimental.DeviceAssignment, tensorflow/python/tpu/device_assignment.py).
//
// A core assignment is an array [num_replicas][num_cores_per_replica][topology.mesh_rank()] of
// mesh coordinates; the device at those coordinates of the Topology runs that logical core.
//
//   Topology t = Topology::for_hosts(2, 2);                 // mesh [2, 2, 1, 1]
//   DeviceAssignment da(t, {{{0, 0, 0, 0}, {1, 0, 0, 0}},   // replica 0: task 0's devices
//                           {{0, 1, 0, 0}, {1, 1, 0, 0}}}); // replica 1: task 1's devices
//   da.num_replicas() == 2;  da.num_cores_per_replica() == 2
//   da.device(1, 1) == "/job:localhost/replica:0/task:1/device:CPU:1"
//   da.tpu_ordinal(1, 1) == 1;  da.task(1, 0) == 1;  da.lookup_replicas(1, 0) == {1}
//   DeviceAssignment::build(t, {}, {}, 4)                   // TF's device_assignment() helper
//
// Validation (BR-105-03), every failure kInvalidArgument naming the values, TF's texts where TF
// has one: the array is rank 3 ("core_assignment must be a rank 3 numpy array, got shape
// [..]"; a ragged nested list counts as not rank 3); its minor dimension equals the topology
// rank ("minor dimension of core_assignment must have size equal to topology rank (r), got
// shape [..]"); at least one replica and one core per replica; then three checks TF leaves to
// an IndexError, a -1 task or the TPU rewrite pass: every coordinate lies inside the topology's
// mesh_shape, names a device that exists (not a missing mesh point), and no device is used by
// two (replica, core) pairs.
//
// Thread safety: an immutable value type.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "tessel/mesh/topology.h"

namespace tessel {

// TF's tf.tpu.experimental.DeviceOrderMode (the values are TF's).
enum class DeviceOrderMode { kAuto = 0, kRing = 1, kMesh = 2 };

// TF's ring order of an x by y by z grid of chips (device_assignment.py's _ring_3d): 2-D rings
// stacked along z and joined in one corner; a grid with an odd dimension > 1 is walked x-fastest.
// Each entry is {x, y, z}; every size must be >= 1.
std::vector<std::array<int, 3>> ring_3d(int x_size, int y_size, int z_size);

class DeviceAssignment {
 public:
  using CoreAssignment = std::vector<std::vector<std::vector<int>>>;

  // TF's DeviceAssignment(topology, core_assignment); see the validation above.
  DeviceAssignment(Topology topology, const CoreAssignment& core_assignment);
  // The same from an array's shape and its row-major values (numpy's view, TPUReplicateMetadata's
  // flattened device_assignment attribute). values.size() must equal the product of shape.
  static DeviceAssignment from_array(Topology topology, const std::vector<int64_t>& shape,
                                     const std::vector<int>& values);
  // From the flattened [num_replicas, num_cores_per_replica, rank] attribute of
  // TPUReplicateMetadata / _TPUReplicate: its length must be num_replicas *
  // num_cores_per_replica * topology rank.
  static DeviceAssignment from_flat(Topology topology, int num_replicas,
                                    int num_cores_per_replica, const std::vector<int>& flat);

  // TF's DeviceAssignment.build(topology, computation_shape=None, computation_stride=None,
  // num_replicas=1, device_order_mode=AUTO): places num_replicas copies of a computation block
  // of computation_shape (with computation_stride between its cores) onto the mesh. An empty
  // shape / stride means [1] * rank. Errors (kInvalidArgument, TF's texts): "computation_shape
  // must have shape [r]; got [..]" (same for computation_stride), "computation_shape must be
  // positive; got ...", "computation footprint F does not fit in TPU topology shape M",
  // "requested R replicas but only M replicas with shape S and computation_stride T fit in a TPU
  // mesh of shape MS", num_replicas < 1.
  // Order (full topology): the 3-D ring tiling when the mode is RING, or AUTO and the tiling
  // applies (rank 4, computation_shape's core dimension equal to the mesh's, stride 1, full
  // replication: num_replicas equal to the maximum); otherwise the mesh placement (near-cubic
  // replica grid, cores in meshgrid order), always for MESH. RING where the tiling does not
  // apply: "device_order_mode=DeviceOrderMode.RING is not compatible with the 3D tiling current
  // topology.  Try setting device_order_mode=DeviceOrderMode.AUTO". A topology with missing
  // devices places replicas in task order (any mode) and needs stride 1 and enough devices.
  static DeviceAssignment build(const Topology& topology,
                                std::vector<int> computation_shape = {},
                                std::vector<int> computation_stride = {}, int num_replicas = 1,
                                DeviceOrderMode device_order_mode = DeviceOrderMode::kAuto);

  const Topology& topology() const { return topology_; }
  int num_replicas() const { return num_replicas_; }
  int num_cores_per_replica() const { return num_cores_per_replica_; }
  // The array, flattened [replica][core][dim] (the device_assignment attribute).
  const std::vector<int>& core_assignment() const { return core_assignment_; }
  // Nested form of core_assignment().
  CoreAssignment core_assignment_nested() const;

  // The mesh coordinates of (replica, logical_core). Either out of range: kOutOfRange
  // (as every accessor below).
  std::vector<int> coordinates(int replica = 0, int logical_core = 0) const;
  // The task (host) that holds (replica, logical_core).
  int task(int replica = 0, int logical_core = 0) const;
  // TF's tpu_ordinal: the device's index within its task.
  int tpu_ordinal(int replica = 0, int logical_core = 0) const;
  // The full tessel device name "/job:<job>/replica:0/task:<t>/device:<type>:<d>" (a runtime's
  // name for the device; TF's shorter form is tpu_device()).
  std::string device(int replica = 0, int logical_core = 0,
                     const std::string& job = "localhost") const;
  // TF's tpu_device(replica=0, logical_core=0, job=None): "/job:<job>/task:<t>/device:<type>:<d>",
  // or "/task:<t>/device:<type>:<d>" without a job (type: the topology's device type).
  std::string tpu_device(int replica = 0, int logical_core = 0,
                         const std::optional<std::string>& job = std::nullopt) const;
  // TF's host_device(replica=0, logical_core=0, job=None): the task's CPU:0,
  // "/job:<job>/task:<t>/device:CPU:0", or "/task:<t>/device:CPU:0" without a job.
  std::string host_device(int replica = 0, int logical_core = 0,
                          const std::optional<std::string>& job = std::nullopt) const;
  // The replicas (ascending) whose logical_core lives on task task_id. None:
  // kInvalidArgument "Can not find any replica in task: t contains logical_core: c ".
  std::vector<int> lookup_replicas(int task_id, int logical_core) const;

  // "DeviceAssignment(num_replicas=2, num_cores_per_replica=1, core_assignment=[...])".
  std::string to_string() const;

  friend bool operator==(const DeviceAssignment& a, const DeviceAssignment& b) {
    return a.topology_ == b.topology_ && a.num_replicas_ == b.num_replicas_ &&
           a.num_cores_per_replica_ == b.num_cores_per_replica_ &&
           a.core_assignment_ == b.core_assignment_;
  }

 private:
  DeviceAssignment(Topology topology, int num_replicas, int num_cores, std::vector<int> flat);
  int flat_device(int replica, int logical_core) const;  // task * per_task + device

  Topology topology_;
  int num_replicas_ = 0;
  int num_cores_per_replica_ = 0;
  std::vector<int> core_assignment_;  // flattened [replica][core][dim]
  std::vector<int> devices_;          // [replica][core] -> task * per_task + device
  std::map<int, std::map<int, std::vector<int>>> task_core_replicas_;
};

std::ostream& operator<<(std::ostream& os, const DeviceAssignment& assignment);

}  // namespace tessel
