// Topology: validation, the inverse maps, and the TopologyProto wire form.
#include "tessel/mesh/topology.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <climits>
#include <utility>

#include "core/errors.h"
#include "tessel/core/device_name.h"
#include "tessel/proto/topology.pb.h"

namespace tessel {
namespace {

constexpr const char* kComponent = "Topology";

bool valid_device_type(const std::string& type) {
  if (type.empty() || type[0] < 'A' || type[0] > 'Z') return false;
  for (char c : type) {
    if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

}  // namespace

Topology::Topology() : Topology({1, 1, 1, 1}, 0, 0, {}, "CPU") {}

Topology::Topology(std::vector<int> mesh_shape,
                   const std::vector<std::vector<std::vector<int>>>& device_coordinates,
                   std::string device_type) {
  const size_t rank = mesh_shape.size();
  const size_t per_task = device_coordinates.empty() ? 0 : device_coordinates[0].size();
  std::vector<int> flat;
  for (size_t t = 0; t < device_coordinates.size(); ++t) {
    if (device_coordinates[t].size() != per_task) {
      detail::throw_invalid(kComponent,
                            "device_coordinates must be a rank 3 array [num_tasks, "
                            "num_devices_per_task, {}]: task {} has {} devices but task 0 has {}",
                            rank, t, device_coordinates[t].size(), per_task);
    }
    for (size_t d = 0; d < per_task; ++d) {
      const std::vector<int>& c = device_coordinates[t][d];
      if (c.size() != rank) {
        detail::throw_invalid(kComponent,
                              "minor dimension of device_coordinates must have size equal to the "
                              "mesh rank ({}), got {} for task {} device {}",
                              rank, c.size(), t, d);
      }
      flat.insert(flat.end(), c.begin(), c.end());
    }
  }
  *this = Topology(std::move(mesh_shape), static_cast<int64_t>(device_coordinates.size()),
                   static_cast<int64_t>(per_task), std::move(flat), std::move(device_type));
}

Topology::Topology(std::vector<int> mesh_shape, int64_t num_tasks, int64_t devices_per_task,
                   std::vector<int> coordinates, std::string device_type) {
  // TF's parse checks, in TF's order.
  bool shape_ok = !mesh_shape.empty();
  int64_t points = 1;
  for (int extent : mesh_shape) {
    if (extent <= 0) shape_ok = false;
    if (shape_ok) points *= extent;
    if (points > INT_MAX) {
      detail::throw_invalid(kComponent, "`mesh_shape` {} has more than {} points",
                            mesh_shape, INT_MAX);
    }
  }
  if (!shape_ok) {
    detail::throw_invalid(kComponent,
                          "`mesh_shape` must be a vector of size >= 1 with positive entries; "
                          "got {}",
                          mesh_shape);
  }
  if (num_tasks < 0) {
    detail::throw_invalid(kComponent, "`num_tasks` must be >= 0; got {}", num_tasks);
  }
  if (devices_per_task < 0) {
    detail::throw_invalid(kComponent, "`num_tpu_devices_per_task` must be >= 0; got {}",
                          devices_per_task);
  }
  const int64_t rank = static_cast<int64_t>(mesh_shape.size());
  if (static_cast<int64_t>(coordinates.size()) != num_tasks * devices_per_task * rank) {
    detail::throw_invalid(kComponent,
                          "`device_coordinates` must have shape num_tasks ({}) * "
                          "num_tpu_devices_per_task ({}) * len(mesh_shape) ({}); got shape {}",
                          num_tasks, devices_per_task, rank, coordinates.size());
  }
  for (int c : coordinates) {
    if (c < 0) {
      detail::throw_invalid(kComponent, "`device_coordinates` must be >= 0; got {}", c);
    }
  }
  if (device_type.empty()) device_type = "CPU";
  if (!valid_device_type(device_type)) {
    detail::throw_invalid(kComponent,
                          "device_type '{}' is not a device type (an upper-case letter, then "
                          "upper-case letters, digits or '_')",
                          device_type);
  }
  mesh_shape_ = std::move(mesh_shape);
  num_tasks_ = static_cast<int>(num_tasks);
  devices_per_task_ = static_cast<int>(devices_per_task);
  coordinates_ = std::move(coordinates);
  device_type_ = std::move(device_type);

  // tessel's checks: inside the mesh, and one device per point (so the inverse maps are exact).
  occupant_.clear();
  for (int64_t device = 0; device < num_tasks * devices_per_task; ++device) {
    const auto first = coordinates_.begin() + device * rank;
    const std::vector<int> point(first, first + rank);
    for (int64_t i = 0; i < rank; ++i) {
      if (point[i] >= mesh_shape_[i]) {
        detail::throw_invalid(kComponent,
                              "`device_coordinates` {} of task {} device {} lie outside "
                              "mesh_shape {}",
                              point, device / devices_per_task, device % devices_per_task,
                              mesh_shape_);
      }
    }
    const auto [it, inserted] = occupant_.emplace(point_index(point), static_cast<int>(device));
    if (!inserted) {
      detail::throw_invalid(kComponent,
                            "task {} device {} and task {} device {} both have coordinates {}",
                            it->second / devices_per_task, it->second % devices_per_task,
                            device / devices_per_task, device % devices_per_task, point);
    }
  }
}

Topology Topology::for_hosts(int num_tasks, int devices_per_task, std::string device_type) {
  if (num_tasks < 1 || devices_per_task < 1) {
    detail::throw_invalid(kComponent,
                          "for_hosts needs num_tasks >= 1 and devices_per_task >= 1; got {} and {}",
                          num_tasks, devices_per_task);
  }
  std::vector<int> coordinates;
  coordinates.reserve(static_cast<size_t>(num_tasks) * devices_per_task * 4);
  for (int t = 0; t < num_tasks; ++t) {
    for (int d = 0; d < devices_per_task; ++d) {
      coordinates.insert(coordinates.end(), {d, t, 0, 0});
    }
  }
  return Topology({devices_per_task, num_tasks, 1, 1}, num_tasks, devices_per_task,
                  std::move(coordinates), std::move(device_type));
}

Topology Topology::from_serialized(const std::string& bytes) {
  proto::TopologyProto p;
  if (!p.ParseFromString(bytes)) {
    detail::throw_invalid(kComponent, "from_serialized: {} bytes are not a TopologyProto",
                          bytes.size());
  }
  return Topology(std::vector<int>(p.mesh_shape().begin(), p.mesh_shape().end()), p.num_tasks(),
                  p.num_devices_per_task(),
                  std::vector<int>(p.device_coordinates().begin(), p.device_coordinates().end()),
                  p.device_type());
}

std::string Topology::serialized() const {
  proto::TopologyProto p;
  for (int extent : mesh_shape_) p.add_mesh_shape(extent);
  p.set_num_tasks(num_tasks_);
  p.set_num_devices_per_task(devices_per_task_);
  for (int c : coordinates_) p.add_device_coordinates(c);
  p.set_device_type(device_type_);
  return p.SerializeAsString();
}

std::vector<int> Topology::device_coordinates(int task, int device) const {
  const int64_t id = global_device_id(task, device);
  const auto first = coordinates_.begin() + id * mesh_rank();
  return std::vector<int>(first, first + mesh_rank());
}

int64_t Topology::point_index(const std::vector<int>& coordinates) const {
  if (coordinates.size() != mesh_shape_.size()) {
    detail::throw_invalid(kComponent, "coordinates {} have {} entries; the mesh rank is {}",
                          coordinates, coordinates.size(), mesh_shape_.size());
  }
  int64_t index = 0;
  for (size_t i = 0; i < coordinates.size(); ++i) {
    if (coordinates[i] < 0 || coordinates[i] >= mesh_shape_[i]) {
      detail::throw_error(ErrorCode::kOutOfRange, kComponent,
                          "coordinates {} lie outside mesh_shape {}", coordinates, mesh_shape_);
    }
    index = index * mesh_shape_[i] + coordinates[i];
  }
  return index;
}

int Topology::task_ordinal_at_coordinates(const std::vector<int>& coordinates) const {
  const auto it = occupant_.find(point_index(coordinates));
  return it == occupant_.end() ? -1 : it->second / devices_per_task_;
}

int Topology::device_ordinal_at_coordinates(const std::vector<int>& coordinates) const {
  const auto it = occupant_.find(point_index(coordinates));
  return it == occupant_.end() ? -1 : it->second % devices_per_task_;
}

std::vector<std::vector<int>> Topology::missing_devices() const {
  std::vector<std::vector<int>> out;
  std::vector<int> point(mesh_shape_.size(), 0);
  for (int64_t index = 0;; ++index) {
    if (!occupant_.contains(index)) out.push_back(point);
    // Next point in row-major order; done after the last.
    int axis = mesh_rank() - 1;
    while (axis >= 0 && ++point[axis] == mesh_shape_[axis]) point[axis--] = 0;
    if (axis < 0) break;
  }
  return out;
}

int64_t Topology::global_device_id(int task, int device) const {
  if (task < 0 || task >= num_tasks_ || device < 0 || device >= devices_per_task_) {
    detail::throw_error(ErrorCode::kOutOfRange, kComponent,
                        "task {} device {} is outside the topology ({} tasks x {} devices)", task,
                        device, num_tasks_, devices_per_task_);
  }
  return static_cast<int64_t>(task) * devices_per_task_ + device;
}

std::vector<int64_t> Topology::global_device_ids(int task) const {
  if (task < 0 || task >= num_tasks_) {
    detail::throw_error(ErrorCode::kOutOfRange, kComponent,
                        "task {} is outside the topology ({} tasks)", task, num_tasks_);
  }
  std::vector<int64_t> ids(static_cast<size_t>(devices_per_task_));
  for (int d = 0; d < devices_per_task_; ++d) ids[d] = global_device_id(task, d);
  return ids;
}

std::string Topology::device_name(int task, int device, const std::string& job) const {
  (void)global_device_id(task, device);  // range check
  return DeviceName::make(job, 0, task, device_type_, device).to_string();
}

std::string Topology::device_name_at_coordinates(const std::vector<int>& coordinates,
                                                 const std::string& job) const {
  const auto it = occupant_.find(point_index(coordinates));
  if (it == occupant_.end()) {
    detail::throw_error(ErrorCode::kNotFound, kComponent, "no device at coordinates {}",
                        coordinates);
  }
  return device_name(it->second / devices_per_task_, it->second % devices_per_task_, job);
}

std::string Topology::to_string() const {
  return fmt::format("Topology(mesh_shape=[{}], num_tasks={}, num_devices_per_task={}, "
                     "device_type={})",
                     fmt::join(mesh_shape_, ","), num_tasks_, devices_per_task_, device_type_);
}

std::ostream& operator<<(std::ostream& os, const Topology& topology) {
  return os << topology.to_string();
}

}  // namespace tessel
