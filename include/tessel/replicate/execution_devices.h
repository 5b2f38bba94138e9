// Execution-device resolution: which device compiles a replicated computation and which devices
// run it (TF's GetTPUCompilationAndExecutionDevices, tensorflow/compiler/mlir/tensorflow/utils/
// tpu_rewrite_device_util.cc). BR-105-03 applied to a real device set.
//
// From the devices of a job (per task: a host CPU, one system device "TPU_SYSTEM:0" and the
// accelerator cores "TPU:<i>"), num_replicas, num_cores_per_replica, a serialized TopologyProto
// and a flattened device_assignment [replica][core][x, y, z, core]:
//   - the compilation device: the first task's system device with type CPU;
//   - without a topology (full mesh): one core per replica, num_replicas 1 or every core, core i
//     is device i % per_task of task i / per_task;
//   - with a topology: every (replica, core) is the device the topology puts at its coordinates,
//     and the XLA device id of each is (x + X * (y + Y * z)) * C + core;
//   - the host of a core: its own task's CPU:0.
//
//   auto r = compilation_and_execution_devices(
//       {"/job:w/replica:0/task:0/device:CPU:0", "/job:w/replica:0/task:0/device:TPU_SYSTEM:0",
//        "/job:w/replica:0/task:0/device:TPU:0", "/job:w/replica:0/task:0/device:TPU:1"},
//       /*num_replicas=*/2, /*num_cores_per_replica=*/1);
//   r.compilation_device == "/job:w/replica:0/task:0/device:CPU:0"
//   r.execution_devices[1][0].device == "/job:w/replica:0/task:0/device:TPU:1"
//   r.execution_devices[1][0].host == "/job:w/replica:0/task:0/device:CPU:0"
//
// Every failure is kInvalidArgument with TF's text (tessel prefixes the component), in TF's
// order: an unparsable device name; "no TPU_SYSTEM devices found"; "found TPU_SYSTEM devices
// with conflicting jobs 'a' and 'b'" (and replicas); "expected the number of TPU devices per host
// to be N, got M"; a system device with no cores (tessel: TF indexes an empty list); without a
// topology: "'device_assignment' must not be set when 'topology' is not set", "'num_replicas'
// must be equal to 1 or N, got R", "'num_cores_per_replica' must be equal to 1, got C"; with
// one: "failed to parse 'topology' attribute to TopologyProto", "'topology' 'mesh_shape' must be
// rank 4, got rank R", "... dimension i must be positive, got v", "number of tasks from
// available TPU devices must be 'num_tasks' in 'topology' (T), got t", "number of TPU devices
// available per task must be 'num_tpu_devices_per_task' in 'topology' (D), got d", "length of
// 'device_coordinates' ...", "device coordinate (x, y, z, c) in 'topology' is outside of mesh
// shape (..)", "'topology' has duplicate device coordinate (..)", "length of
// 'device_assignment' must be 'num_replicas' * 'num_cores_per_replica' * 4 (..), got n" (an
// empty assignment with a topology too), the same out-of-mesh and duplicate texts for
// 'device_assignment', and "no TPU device found for 'device_assignment' device coordinate (..)".
//
// Thread safety: a pure function.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessel {

// One logical core of one replica: the device that runs it and its task's host CPU.
struct ExecutionDevice {
  std::string device;
  std::string host;
  friend bool operator==(const ExecutionDevice&, const ExecutionDevice&) = default;
};

struct ExecutionDevices {
  std::string compilation_device;
  // [replica][logical core].
  std::vector<std::vector<ExecutionDevice>> execution_devices;
  // XLA's device assignment, [replica][logical core] -> device id; empty without a topology.
  std::vector<std::vector<int64_t>> xla_device_assignment;
};

// The device types the resolution looks for (TF: TPU_SYSTEM and TPU; tessel's own runtimes may
// name their cores CPU or GPU).
struct ExecutionDeviceTypes {
  std::string system = "TPU_SYSTEM";
  std::string core = "TPU";
};

// TF's GetTPUCompilationAndExecutionDevices; see above. topology is serialized TopologyProto
// bytes ("" for none); device_assignment the flattened attribute (empty for none).
ExecutionDevices compilation_and_execution_devices(const std::vector<std::string>& devices,
                                                   int num_replicas, int num_cores_per_replica,
                                                   const std::string& topology = "",
                                                   const std::vector<int64_t>& device_assignment = {},
                                                   const ExecutionDeviceTypes& types = {});

}  // namespace tessel
