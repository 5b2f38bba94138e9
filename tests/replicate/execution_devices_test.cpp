// Execution-device resolution (TF's GetTPUCompilationAndExecutionDevices): the compilation
// device, each (replica, core)'s device and host, XLA's device ids, and TF's errors in TF's order.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <string>
#include <vector>

#include "tessel/replicate/execution_devices.h"
#include "testing/expect_error.h"
#include "testing/topology_bytes.h"

namespace tessel {
namespace {

// A controller CPU, then per task of job "worker": CPU:0, TPU_SYSTEM:0 and `cores` TPU cores,
// listed in reverse so that the resolution has to sort them.
std::vector<std::string> worker_devices(int tasks, int cores) {
  std::vector<std::string> devices{"/job:localhost/replica:0/task:0/device:CPU:0"};
  for (int t = tasks - 1; t >= 0; --t) {
    devices.push_back(fmt::format("/job:worker/replica:0/task:{}/device:CPU:0", t));
    for (int c = cores - 1; c >= 0; --c) {
      devices.push_back(fmt::format("/job:worker/replica:0/task:{}/device:TPU:{}", t, c));
    }
    devices.push_back(fmt::format("/job:worker/replica:0/task:{}/device:TPU_SYSTEM:0", t));
  }
  return devices;
}

std::string tpu(int task, int core) {
  return fmt::format("/job:worker/replica:0/task:{}/device:TPU:{}", task, core);
}
std::string host(int task) { return fmt::format("/job:worker/replica:0/task:{}/device:CPU:0", task); }

// A TopologyProto; coordinates as given (possibly invalid).
std::string topology(std::vector<int> mesh, int tasks, int per_task, std::vector<int> coordinates) {
  return testing::topology_proto_bytes(mesh, tasks, per_task, coordinates);
}

// Two tasks of one core each on a [2, 1, 1, 1] mesh: task t at (t, 0, 0, 0).
std::string two_tasks() { return topology({2, 1, 1, 1}, 2, 1, {0, 0, 0, 0, 1, 0, 0, 0}); }

TEST(ExecutionDevices, FullMeshReplicatesOverEveryCoreInTaskOrder) {
  const auto r = compilation_and_execution_devices(worker_devices(2, 4), 8, 1);
  EXPECT_EQ(r.compilation_device, host(0));
  ASSERT_EQ(r.execution_devices.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(r.execution_devices[i].size(), 1u);
    EXPECT_EQ(r.execution_devices[i][0], (ExecutionDevice{tpu(i / 4, i % 4), host(i / 4)}));
  }
  EXPECT_TRUE(r.xla_device_assignment.empty());
  // One replica: the first core.
  const auto one = compilation_and_execution_devices(worker_devices(2, 4), 1, 1);
  ASSERT_EQ(one.execution_devices.size(), 1u);
  EXPECT_EQ(one.execution_devices[0][0].device, tpu(0, 0));
}

TEST(ExecutionDevices, TopologyAndAssignmentPickEachCoresDevice) {
  // 2 tasks x 2 cores on a [2, 2, 1, 1] mesh, device d of task t at (d, t, 0, 0); 2 replicas of
  // 2 cores, replica 0 on task 1 and replica 1 on task 0 (cores crossed).
  const auto topo = topology({2, 2, 1, 1}, 2, 2, {0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0});
  const auto r = compilation_and_execution_devices(
      worker_devices(2, 2), 2, 2, topo, {0, 1, 0, 0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0});
  EXPECT_EQ(r.compilation_device, host(0));
  EXPECT_EQ(r.execution_devices,
            (std::vector<std::vector<ExecutionDevice>>{
                {{tpu(1, 0), host(1)}, {tpu(1, 1), host(1)}},
                {{tpu(0, 1), host(0)}, {tpu(0, 0), host(0)}}}));
  // XLA's id of (x, y, z, c) on [X, Y, Z, C]: (x + X * (y + Y * z)) * C + c.
  EXPECT_EQ(r.xla_device_assignment, (std::vector<std::vector<int64_t>>{{2, 3}, {1, 0}}));
}

TEST(ExecutionDevices, DeviceSetErrors) {
  const auto bad = [](std::vector<std::string> devices, const char* text) {
    EXPECT_TESSEL_ERROR(compilation_and_execution_devices(devices, 1, 1),
                        ErrorCode::kInvalidArgument, text);
  };
  bad({"/job:localhost/replica:0/task:0/device:CPU:0"}, "no TPU_SYSTEM devices found");
  bad({"/job:localhost/replica:0/task:0/device:TPU_SYSTEM:0",
       "/job:worker/replica:0/task:0/device:TPU_SYSTEM:0"},
      "found TPU_SYSTEM devices with conflicting jobs 'localhost' and 'worker'");
  bad({"/job:localhost/replica:0/task:0/device:TPU_SYSTEM:0",
       "/job:localhost/replica:1/task:0/device:TPU_SYSTEM:0"},
      "found TPU_SYSTEM devices with conflicting replicas '0' and '1'");
  bad({"/job:w/replica:0/task:0/device:TPU_SYSTEM:0", "/job:w/replica:0/task:0/device:TPU:0",
       "/job:w/replica:0/task:0/device:TPU:1", "/job:w/replica:0/task:1/device:TPU_SYSTEM:0",
       "/job:w/replica:0/task:1/device:TPU:0"},
      "expected the number of TPU devices per host to be 2, got 1");
  // tessel: a system device without cores, and a malformed name.
  bad({"/job:w/replica:0/task:0/device:TPU_SYSTEM:0"}, "no TPU devices found on the host of");
  bad({"/job:w/task:x"}, "task:x");
}

TEST(ExecutionDevices, FullMeshErrors) {
  const auto devices = worker_devices(2, 1);
  EXPECT_TESSEL_ERROR(compilation_and_execution_devices(devices, 2, 1, "", {0}),
                      ErrorCode::kInvalidArgument,
                      "'device_assignment' must not be set when 'topology' is not set");
  EXPECT_TESSEL_ERROR(compilation_and_execution_devices(devices, 8, 1),
                      ErrorCode::kInvalidArgument, "'num_replicas' must be equal to 1 or 2, got 8");
  EXPECT_TESSEL_ERROR(compilation_and_execution_devices(devices, 2, 2),
                      ErrorCode::kInvalidArgument,
                      "'num_cores_per_replica' must be equal to 1, got 2");
  EXPECT_TESSEL_ERROR(compilation_and_execution_devices(devices, 0, 1),
                      ErrorCode::kInvalidArgument, "num_replicas (0)");
}

TEST(ExecutionDevices, TopologyErrorsInTfsOrder) {
  const auto devices = worker_devices(2, 1);
  const auto bad = [&](const std::string& topo, const char* text) {
    EXPECT_TESSEL_ERROR(compilation_and_execution_devices(devices, 2, 1, topo),
                        ErrorCode::kInvalidArgument, text);
  };
  bad("BAD_TOPOLOGY", "failed to parse 'topology' attribute to TopologyProto");
  bad(topology({0}, 0, 0, {}), "'topology' 'mesh_shape' must be rank 4, got rank 1");
  bad(topology({2, 0, 1, 2}, 0, 0, {}), "'topology' 'mesh_shape' dimension 1 must be positive, got 0");
  bad(topology({1, 1, 1, 1}, 1, 1, {}),
      "number of tasks from available TPU devices must be 'num_tasks' in 'topology' (1), got 2");
  bad(topology({1, 1, 1, 1}, 2, 2, {}),
      "number of TPU devices available per task must be 'num_tpu_devices_per_task' in "
      "'topology' (2), got 1");
  bad(topology({2, 1, 1, 1}, 2, 1, {}),
      "length of 'device_coordinates' in 'topology' must be 'num_tasks' * 'num_tpus_per_task' * "
      "4 (2 * 1 * 4), got 0");
  bad(topology({2, 1, 1, 1}, 2, 1, {0, 0, 0, 0, 2, 0, 0, 0}),
      "device coordinate (2, 0, 0, 0) in 'topology' is outside of mesh shape (2, 1, 1, 1)");
  bad(topology({2, 1, 1, 1}, 2, 1, {0, 0, 0, -1, 1, 0, 0, 0}),
      "device coordinate (0, 0, 0, -1) in 'topology' is outside of mesh shape (2, 1, 1, 1)");
  bad(topology({2, 1, 1, 1}, 2, 1, {1, 0, 0, 0, 1, 0, 0, 0}),
      "'topology' has duplicate device coordinate (1, 0, 0, 0)");
}

TEST(ExecutionDevices, AssignmentErrors) {
  const auto devices = worker_devices(2, 1);
  const auto bad = [&](std::vector<int64_t> assignment, const char* text) {
    EXPECT_TESSEL_ERROR(compilation_and_execution_devices(devices, 2, 1, two_tasks(), assignment),
                        ErrorCode::kInvalidArgument, text);
  };
  // An empty assignment with a topology is an error, not a request to build one.
  bad({}, "length of 'device_assignment' must be 'num_replicas' * 'num_cores_per_replica' * 4 "
          "(2 * 1 * 4), got 0");
  bad({0, 0, 0, 0}, "(2 * 1 * 4), got 4");
  bad({0, 0, 0, 0, 0, 1, 0, 0},
      "device coordinate (0, 1, 0, 0) in 'device_assignment' is outside of mesh shape (2, 1, 1, 1)");
  bad({-1, 0, 0, 0, 0, 0, 0, 0}, "device coordinate (-1, 0, 0, 0) in 'device_assignment'");
  bad({1, 0, 0, 0, 1, 0, 0, 0}, "'device_assignment' has duplicate device coordinate (1, 0, 0, 0)");
  // A mesh point no device occupies.
  const auto one_task = worker_devices(1, 1);
  EXPECT_TESSEL_ERROR(compilation_and_execution_devices(
                          one_task, 1, 1, topology({2, 1, 1, 1}, 1, 1, {0, 0, 0, 0}), {1, 0, 0, 0}),
                      ErrorCode::kInvalidArgument,
                      "no TPU device found for 'device_assignment' device coordinate (1, 0, 0, 0)");
}

TEST(ExecutionDevices, OtherDeviceTypesForTesselsOwnRuntimes) {
  // A tessel runtime's CPU devices as cores, a "SYSTEM" device per task.
  const std::vector<std::string> devices{"/job:localhost/replica:0/task:0/device:SYSTEM:0",
                                         "/job:localhost/replica:0/task:0/device:CPU:0",
                                         "/job:localhost/replica:0/task:0/device:CPU:1"};
  const auto r = compilation_and_execution_devices(devices, 2, 1, "", {}, {"SYSTEM", "CPU"});
  EXPECT_EQ(r.execution_devices[1][0].device, "/job:localhost/replica:0/task:0/device:CPU:1");
  EXPECT_EQ(r.execution_devices[1][0].host, "/job:localhost/replica:0/task:0/device:CPU:0");
}

}  // namespace
}  // namespace tessel
