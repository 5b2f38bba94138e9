// Execution-device resolution (TF's tpu_rewrite_device_util.cc): the checks in TF's order, with
// TF's texts.
#include "tessel/replicate/execution_devices.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <climits>
#include <optional>

#include "core/errors.h"
#include "tessel/core/device_name.h"
#include "tessel/proto/topology.pb.h"

namespace tessel {
namespace {

constexpr const char* kComponent = "ExecutionDevices";
constexpr int kTopologyRank = 4;  // (x, y, z, core)

using Coordinate = std::array<int, kTopologyRank>;

// "(x, y, z, core)".
std::string coordinate_text(const Coordinate& c) {
  return fmt::format("({}, {}, {}, {})", c[0], c[1], c[2], c[3]);
}

// TF's IsCompleteSpecification: every part `spec` names, `device` has with the same value.
bool complete_match(const DeviceName& spec, const DeviceName& device) {
  return (!spec.job || spec.job == device.job) && (!spec.replica || spec.replica == device.replica) &&
         (!spec.task || spec.task == device.task) && (!spec.type || spec.type == device.type) &&
         (!spec.id || spec.id == device.id);
}

std::vector<DeviceName> matching(const std::vector<DeviceName>& devices, const DeviceName& spec) {
  std::vector<DeviceName> out;
  for (const auto& d : devices) {
    if (complete_match(spec, d)) out.push_back(d);
  }
  return out;
}

template <typename T>
std::string optional_text(const std::optional<T>& v) {
  return v ? fmt::format("{}", *v) : std::string();
}

// TF's GetTPUSystemDevices: every "<system>:0" device, one job and replica, sorted by task.
std::vector<DeviceName> system_devices(const std::vector<DeviceName>& devices,
                                       const std::string& type) {
  DeviceName spec;
  spec.type = type;
  spec.id = 0;
  auto found = matching(devices, spec);
  if (found.empty()) detail::throw_invalid(kComponent, "no {} devices found", type);
  for (const auto& d : found) {
    if (d.job != found[0].job) {
      detail::throw_invalid(kComponent, "found {} devices with conflicting jobs '{}' and '{}'", type,
                            optional_text(found[0].job), optional_text(d.job));
    }
    if (d.replica != found[0].replica) {
      detail::throw_invalid(kComponent, "found {} devices with conflicting replicas '{}' and '{}'",
                            type, optional_text(found[0].replica), optional_text(d.replica));
    }
  }
  std::stable_sort(found.begin(), found.end(),
                   [](const DeviceName& a, const DeviceName& b) { return a.task < b.task; });
  return found;
}

// TF's GetTPUDevices: each system device's cores by id; every host the same count.
std::vector<std::vector<DeviceName>> core_devices(const std::vector<DeviceName>& devices,
                                                  const std::vector<DeviceName>& systems,
                                                  const std::string& type) {
  std::vector<std::vector<DeviceName>> out;
  for (const auto& system : systems) {
    DeviceName spec = system;
    spec.type = type;
    spec.id.reset();
    auto cores = matching(devices, spec);
    std::stable_sort(cores.begin(), cores.end(),
                     [](const DeviceName& a, const DeviceName& b) { return a.id < b.id; });
    if (!out.empty() && cores.size() != out[0].size()) {
      detail::throw_invalid(kComponent, "expected the number of {} devices per host to be {}, got {}",
                            type, out[0].size(), cores.size());
    }
    out.push_back(std::move(cores));
  }
  if (out[0].empty()) {
    // TF indexes the empty list; tessel names the host instead.
    detail::throw_invalid(kComponent, "no {} devices found on the host of {}", type,
                          systems[0].to_string());
  }
  return out;
}

// The same device name with type CPU (and id `id` when given).
std::string as_cpu(DeviceName d, std::optional<int> id) {
  d.type = "CPU";
  if (id) d.id = id;
  return d.to_string();
}

// TF's GetCPUHostDeviceForTPUDevice.
ExecutionDevice device_and_host(const DeviceName& core) {
  return {core.to_string(), as_cpu(core, 0)};
}

// TF's GetFullMeshTPUExecutionDeviceAssignment.
std::vector<std::vector<ExecutionDevice>> full_mesh(int num_replicas, int num_cores_per_replica,
                                                    const std::vector<std::vector<DeviceName>>& cores) {
  const int per_task = static_cast<int>(cores[0].size());
  const int total = static_cast<int>(cores.size()) * per_task;
  if (num_replicas != 1 && num_replicas != total) {
    detail::throw_invalid(kComponent, "'num_replicas' must be equal to 1 or {}, got {}", total,
                          num_replicas);
  }
  if (num_cores_per_replica != 1) {
    detail::throw_invalid(kComponent, "'num_cores_per_replica' must be equal to 1, got {}",
                          num_cores_per_replica);
  }
  std::vector<std::vector<ExecutionDevice>> out;
  for (int i = 0; i < num_replicas; ++i) {
    out.push_back({device_and_host(cores[i / per_task][i % per_task])});
  }
  return out;
}

// The mesh of a parsed topology: each point's (task, device), -1 where none.
struct TopologyMesh {
  Coordinate bounds{};
  std::vector<std::pair<int, int>> occupant;  // row-major over (x, y, z, core)

  bool inside(const Coordinate& c) const {
    for (int d = 0; d < kTopologyRank; ++d) {
      if (c[d] < 0 || c[d] >= bounds[d]) return false;
    }
    return true;
  }
  size_t index(const Coordinate& c) const {
    return static_cast<size_t>(((int64_t{c[0]} * bounds[1] + c[1]) * bounds[2] + c[2]) * bounds[3] +
                               c[3]);
  }
  // TF's XLA device id: (x + X * (y + Y * z)) * C + core.
  int64_t xla_id(const Coordinate& c) const {
    return (c[0] + int64_t{bounds[0]} * (c[1] + int64_t{bounds[1]} * c[2])) * bounds[3] + c[3];
  }
  std::string bounds_text() const { return coordinate_text(bounds); }
};

[[noreturn]] void outside(const char* attribute, const Coordinate& c, const TopologyMesh& mesh) {
  detail::throw_invalid(kComponent, "device coordinate {} in '{}' is outside of mesh shape {}",
                        coordinate_text(c), attribute, mesh.bounds_text());
}

[[noreturn]] void duplicate(const char* attribute, const Coordinate& c) {
  detail::throw_invalid(kComponent, "'{}' has duplicate device coordinate {}", attribute,
                        coordinate_text(c));
}

// TF's ParseTopologyAttr.
TopologyMesh parse_topology(const std::string& bytes, int num_tasks, int per_task) {
  proto::TopologyProto p;
  if (!p.ParseFromString(bytes)) {
    detail::throw_invalid(kComponent, "failed to parse 'topology' attribute to TopologyProto");
  }
  if (p.mesh_shape_size() != kTopologyRank) {
    detail::throw_invalid(kComponent, "'topology' 'mesh_shape' must be rank {}, got rank {}",
                          kTopologyRank, p.mesh_shape_size());
  }
  TopologyMesh mesh;
  int64_t points = 1;
  for (int d = 0; d < kTopologyRank; ++d) {
    if (p.mesh_shape(d) <= 0) {
      detail::throw_invalid(kComponent, "'topology' 'mesh_shape' dimension {} must be positive, got {}",
                            d, p.mesh_shape(d));
    }
    mesh.bounds[d] = p.mesh_shape(d);
    points *= p.mesh_shape(d);
  }
  if (p.num_tasks() != num_tasks) {
    detail::throw_invalid(kComponent,
                          "number of tasks from available TPU devices must be 'num_tasks' in "
                          "'topology' ({}), got {}",
                          p.num_tasks(), num_tasks);
  }
  if (p.num_devices_per_task() != per_task) {
    detail::throw_invalid(kComponent,
                          "number of TPU devices available per task must be "
                          "'num_tpu_devices_per_task' in 'topology' ({}), got {}",
                          p.num_devices_per_task(), per_task);
  }
  const int64_t expected = int64_t{num_tasks} * per_task * kTopologyRank;
  if (p.device_coordinates_size() != expected) {
    detail::throw_invalid(kComponent,
                          "length of 'device_coordinates' in 'topology' must be 'num_tasks' * "
                          "'num_tpus_per_task' * {} ({} * {} * {}), got {}",
                          kTopologyRank, num_tasks, per_task, kTopologyRank,
                          p.device_coordinates_size());
  }
  if (points > (int64_t{1} << 26)) {
    // tessel: TF allocates the whole mesh; a corrupt proto must not exhaust memory.
    detail::throw_invalid(kComponent, "'topology' 'mesh_shape' {} has {} points; at most {}",
                          mesh.bounds_text(), points, int64_t{1} << 26);
  }
  mesh.occupant.assign(static_cast<size_t>(points), {-1, -1});
  int pos = 0;
  for (int task = 0; task < num_tasks; ++task) {
    for (int device = 0; device < per_task; ++device) {
      Coordinate c;
      for (int d = 0; d < kTopologyRank; ++d) c[d] = p.device_coordinates(pos++);
      if (!mesh.inside(c)) outside("topology", c, mesh);
      auto& slot = mesh.occupant[mesh.index(c)];
      if (slot.first != -1) duplicate("topology", c);
      slot = {task, device};
    }
  }
  return mesh;
}

// TF's GetGeneralTPUExecutionDeviceAssignment.
void general(int num_replicas, int num_cores_per_replica,
             const std::vector<std::vector<DeviceName>>& cores, const std::string& topology,
             const std::vector<int64_t>& assignment, ExecutionDevices& out) {
  const int num_tasks = static_cast<int>(cores.size());
  const int per_task = static_cast<int>(cores[0].size());
  const TopologyMesh mesh = parse_topology(topology, num_tasks, per_task);
  const int64_t expected = int64_t{num_replicas} * num_cores_per_replica * kTopologyRank;
  if (static_cast<int64_t>(assignment.size()) != expected) {
    detail::throw_invalid(kComponent,
                          "length of 'device_assignment' must be 'num_replicas' * "
                          "'num_cores_per_replica' * {} ({} * {} * {}), got {}",
                          kTopologyRank, num_replicas, num_cores_per_replica, kTopologyRank,
                          assignment.size());
  }
  std::vector<bool> used(mesh.occupant.size(), false);
  size_t pos = 0;
  for (int replica = 0; replica < num_replicas; ++replica) {
    auto& devices = out.execution_devices.emplace_back();
    auto& ids = out.xla_device_assignment.emplace_back();
    for (int core = 0; core < num_cores_per_replica; ++core) {
      Coordinate c;
      for (int d = 0; d < kTopologyRank; ++d) {
        const int64_t v = assignment[pos++];
        c[d] = v < INT32_MIN || v > INT32_MAX ? -1 : static_cast<int>(v);
      }
      if (!mesh.inside(c)) outside("device_assignment", c, mesh);
      const auto [task, device] = mesh.occupant[mesh.index(c)];
      if (task == -1 || device == -1) {
        detail::throw_invalid(kComponent,
                              "no TPU device found for 'device_assignment' device coordinate {}",
                              coordinate_text(c));
      }
      if (used[mesh.index(c)]) duplicate("device_assignment", c);
      used[mesh.index(c)] = true;
      devices.push_back(device_and_host(cores[task][device]));
      ids.push_back(mesh.xla_id(c));
    }
  }
}

}  // namespace

ExecutionDevices compilation_and_execution_devices(const std::vector<std::string>& devices,
                                                   int num_replicas, int num_cores_per_replica,
                                                   const std::string& topology,
                                                   const std::vector<int64_t>& device_assignment,
                                                   const ExecutionDeviceTypes& types) {
  // The op definition's minimums (TF checks them before the rewrite pass runs).
  if (num_replicas < 1 || num_cores_per_replica < 1) {
    detail::throw_invalid(kComponent, "num_replicas ({}) and num_cores_per_replica ({}) must be >= 1",
                          num_replicas, num_cores_per_replica);
  }
  std::vector<DeviceName> parsed;
  parsed.reserve(devices.size());
  for (const auto& d : devices) parsed.push_back(DeviceName::parse(d));

  const auto systems = system_devices(parsed, types.system);
  const auto cores = core_devices(parsed, systems, types.core);

  ExecutionDevices out;
  out.compilation_device = as_cpu(systems[0], std::nullopt);
  if (topology.empty()) {
    if (!device_assignment.empty()) {
      detail::throw_invalid(kComponent,
                            "'device_assignment' must not be set when 'topology' is not set");
    }
    out.execution_devices = full_mesh(num_replicas, num_cores_per_replica, cores);
    return out;
  }
  general(num_replicas, num_cores_per_replica, cores, topology, device_assignment, out);
  return out;
}

}  // namespace tessel
