#include "tessel/replicate/device_assignment.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

#include "core/errors.h"

namespace tessel {
namespace {

constexpr const char* kComponent = "DeviceAssignment";

int64_t product(const std::vector<int>& v) {
  int64_t p = 1;
  for (int x : v) p *= x;
  return p;
}

// TF's mesh placement: replica r at its position in the replica grid (the core dimension
// varying fastest), its logical cores enumerating the computation block in meshgrid(ij) order.
void place_mesh(const std::vector<int>& shape, const std::vector<int>& stride,
                const std::vector<int>& replica_shape, int num_replicas, std::vector<int>& flat) {
  const int rank = static_cast<int>(shape.size());
  const int64_t cores = product(shape);
  // Logical core -> offset inside the block, meshgrid(ij) order (last dimension fastest).
  std::vector<std::vector<int>> block;
  std::vector<int> idx(static_cast<size_t>(rank), 0);
  for (int64_t k = 0; k < cores; ++k) {
    std::vector<int> offset(static_cast<size_t>(rank));
    for (int d = 0; d < rank; ++d) offset[d] = idx[d] * stride[d];
    block.push_back(std::move(offset));
    for (int d = rank - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  for (int replica = 0; replica < num_replicas; ++replica) {
    // Position in the replica grid, the core dimension varying fastest.
    std::vector<int> pos(static_cast<size_t>(rank));
    int64_t t = replica;
    pos[rank - 1] = static_cast<int>(t % replica_shape[rank - 1]);
    t /= replica_shape[rank - 1];
    for (int d = 0; d < rank - 1; ++d) {
      pos[d] = static_cast<int>(t % replica_shape[d]);
      t /= replica_shape[d];
    }
    std::vector<int> start(static_cast<size_t>(rank));
    for (int d = 0; d < rank; ++d) {
      start[d] = (pos[d] / stride[d]) * shape[d] * stride[d] + pos[d] % stride[d];
    }
    for (const auto& offset : block) {
      for (int d = 0; d < rank; ++d) flat.push_back(start[d] + offset[d]);
    }
  }
}

// TF's 3-D ring tiling: replicas follow the ring through the replica grid, the chips of one
// replica the ring through its block, each chip's cores (the last dimension) in order.
void place_ring(const std::vector<int>& shape, const std::vector<int>& replica_shape,
                const std::vector<int>& mesh, int num_replicas, std::vector<int>& flat) {
  const auto inner = ring_3d(shape[0], shape[1], shape[2]);
  const auto outer = ring_3d(replica_shape[0], replica_shape[1], replica_shape[2]);
  if (static_cast<int64_t>(outer.size()) < num_replicas) {
    detail::throw_error(ErrorCode::kInternal, kComponent,
                        "the ring through the replica grid [{}] has {} places for {} replicas",
                        fmt::join(replica_shape, ", "), outer.size(), num_replicas);
  }
  const int64_t cores = product(shape);
  const int per_chip = mesh[3];
  for (int replica = 0; replica < num_replicas; ++replica) {
    const auto& o = outer[static_cast<size_t>(replica)];
    for (int64_t index = 0; index < cores; ++index) {
      const auto& i = inner[static_cast<size_t>(index / per_chip)];
      for (int d = 0; d < 3; ++d) flat.push_back(o[d] * shape[d] + i[d]);
      flat.push_back(static_cast<int>(index % per_chip));
    }
  }
}

}  // namespace

DeviceAssignment::DeviceAssignment(Topology topology, const CoreAssignment& core_assignment)
    : DeviceAssignment([&] {
        // Nested -> (shape, values); a ragged list is not a rank-3 array.
        std::vector<int64_t> shape{static_cast<int64_t>(core_assignment.size())};
        std::vector<int> values;
        bool ragged = false;
        int64_t cores = -1, rank = -1;
        for (const auto& replica : core_assignment) {
          if (cores < 0) cores = static_cast<int64_t>(replica.size());
          if (static_cast<int64_t>(replica.size()) != cores) ragged = true;
          for (const auto& coords : replica) {
            if (rank < 0) rank = static_cast<int64_t>(coords.size());
            if (static_cast<int64_t>(coords.size()) != rank) ragged = true;
            values.insert(values.end(), coords.begin(), coords.end());
          }
        }
        if (ragged) {
          detail::throw_invalid(kComponent,
                                "core_assignment must be a rank 3 numpy array, got a ragged "
                                "nested list (replicas with different numbers of cores or "
                                "coordinates of different lengths)");
        }
        if (cores >= 0) shape.push_back(cores);
        if (rank >= 0) shape.push_back(rank);
        return from_array(std::move(topology), shape, values);
      }()) {}

DeviceAssignment DeviceAssignment::from_array(Topology topology, const std::vector<int64_t>& shape,
                                              const std::vector<int>& values) {
  if (shape.size() != 3) {
    detail::throw_invalid(kComponent, "core_assignment must be a rank 3 numpy array, got shape [{}]",
                          fmt::join(shape, ", "));
  }
  if (shape[2] != topology.mesh_rank()) {
    detail::throw_invalid(kComponent,
                          "minor dimension of core_assignment must have size equal to topology "
                          "rank ({}), got shape [{}]",
                          topology.mesh_rank(), fmt::join(shape, ", "));
  }
  if (shape[0] < 1 || shape[1] < 1) {
    detail::throw_invalid(kComponent,
                          "core_assignment must have at least one replica and one core per "
                          "replica, got shape [{}]",
                          fmt::join(shape, ", "));
  }
  if (static_cast<int64_t>(values.size()) != shape[0] * shape[1] * shape[2]) {
    detail::throw_invalid(kComponent, "core_assignment of shape [{}] needs {} values, got {}",
                          fmt::join(shape, ", "), shape[0] * shape[1] * shape[2], values.size());
  }
  return DeviceAssignment(std::move(topology), static_cast<int>(shape[0]),
                          static_cast<int>(shape[1]), values);
}

DeviceAssignment DeviceAssignment::from_flat(Topology topology, int num_replicas,
                                             int num_cores_per_replica,
                                             const std::vector<int>& flat) {
  const int64_t rank = topology.mesh_rank();
  const int64_t expected = int64_t{num_replicas} * num_cores_per_replica * rank;
  if (num_replicas < 1 || num_cores_per_replica < 1 ||
      static_cast<int64_t>(flat.size()) != expected) {
    detail::throw_invalid(kComponent,
                          "device_assignment has {} entries; num_replicas ({}) * "
                          "num_cores_per_replica ({}) * topology rank ({}) = {} expected",
                          flat.size(), num_replicas, num_cores_per_replica, rank, expected);
  }
  return from_array(std::move(topology), {num_replicas, num_cores_per_replica, rank}, flat);
}

DeviceAssignment::DeviceAssignment(Topology topology, int num_replicas, int num_cores,
                                   std::vector<int> flat)
    : topology_(std::move(topology)),
      num_replicas_(num_replicas),
      num_cores_per_replica_(num_cores),
      core_assignment_(std::move(flat)) {
  const int rank = topology_.mesh_rank();
  const auto& mesh = topology_.mesh_shape();
  const int per_task = topology_.num_devices_per_task();
  std::vector<std::pair<int, int>> used(static_cast<size_t>(topology_.num_devices()), {-1, -1});
  devices_.reserve(static_cast<size_t>(num_replicas_) * num_cores_per_replica_);
  for (int r = 0; r < num_replicas_; ++r) {
    for (int c = 0; c < num_cores_per_replica_; ++c) {
      const auto begin = core_assignment_.begin() +
                         (static_cast<int64_t>(r) * num_cores_per_replica_ + c) * rank;
      const std::vector<int> coords(begin, begin + rank);
      for (int d = 0; d < rank; ++d) {
        if (coords[d] < 0 || coords[d] >= mesh[d]) {
          detail::throw_invalid(kComponent,
                                "replica {} logical core {}: coordinates [{}] lie outside the "
                                "topology mesh of shape [{}]",
                                r, c, fmt::join(coords, ", "), fmt::join(mesh, ", "));
        }
      }
      const int task = topology_.task_ordinal_at_coordinates(coords);
      if (task < 0) {
        detail::throw_invalid(kComponent,
                              "replica {} logical core {}: no device at coordinates [{}] (a "
                              "missing point of the topology mesh [{}])",
                              r, c, fmt::join(coords, ", "), fmt::join(mesh, ", "));
      }
      const int device = topology_.device_ordinal_at_coordinates(coords);
      const int flat_id = task * per_task + device;
      auto& user = used[static_cast<size_t>(flat_id)];
      if (user.first >= 0) {
        detail::throw_invalid(kComponent,
                              "device at coordinates [{}] (task {} device {}) is assigned twice: "
                              "replica {} logical core {} and replica {} logical core {}",
                              fmt::join(coords, ", "), task, device, user.first, user.second, r,
                              c);
      }
      user = {r, c};
      devices_.push_back(flat_id);
      task_core_replicas_[task][c].push_back(r);  // r ascending: already sorted
    }
  }
}

DeviceAssignment DeviceAssignment::build(const Topology& topology,
                                         std::vector<int> computation_shape,
                                         std::vector<int> computation_stride, int num_replicas,
                                         DeviceOrderMode device_order_mode) {
  const int rank = topology.mesh_rank();
  const std::vector<int>& mesh = topology.mesh_shape();
  if (computation_shape.empty()) computation_shape.assign(static_cast<size_t>(rank), 1);
  if (computation_stride.empty()) computation_stride.assign(static_cast<size_t>(rank), 1);
  if (static_cast<int>(computation_shape.size()) != rank) {
    detail::throw_invalid(kComponent, "computation_shape must have shape [{}]; got [{}]", rank,
                          computation_shape.size());
  }
  if (static_cast<int>(computation_stride.size()) != rank) {
    detail::throw_invalid(kComponent, "computation_stride must have shape [{}]; got [{}]", rank,
                          computation_stride.size());
  }
  if (std::any_of(computation_shape.begin(), computation_shape.end(), [](int x) { return x < 1; })) {
    detail::throw_invalid(kComponent, "computation_shape must be positive; got computation_shape=[{}]",
                          fmt::join(computation_shape, ", "));
  }
  if (std::any_of(computation_stride.begin(), computation_stride.end(),
                  [](int x) { return x < 1; })) {
    detail::throw_invalid(kComponent,
                          "computation_stride must be positive; got computation_stride=[{}]",
                          fmt::join(computation_stride, ", "));
  }
  if (num_replicas < 1) {
    detail::throw_invalid(kComponent, "num_replicas must be >= 1; got {}", num_replicas);
  }
  std::vector<int> footprint(static_cast<size_t>(rank));
  for (int i = 0; i < rank; ++i) footprint[i] = computation_shape[i] * computation_stride[i];
  for (int i = 0; i < rank; ++i) {
    if (footprint[i] > mesh[i]) {
      detail::throw_invalid(kComponent,
                            "computation footprint [{}] does not fit in TPU topology shape [{}]",
                            fmt::join(footprint, ", "), fmt::join(mesh, ", "));
    }
  }
  std::vector<int> replica_counts(static_cast<size_t>(rank));
  for (int i = 0; i < rank; ++i) replica_counts[i] = (mesh[i] / footprint[i]) * computation_stride[i];
  const int64_t max_replicas = product(replica_counts);
  if (num_replicas > max_replicas) {
    detail::throw_invalid(kComponent,
                          "requested {} replicas but only {} replicas with shape [{}] and "
                          "computation_stride [{}] fit in a TPU mesh of shape [{}]",
                          num_replicas, max_replicas, fmt::join(computation_shape, ", "),
                          fmt::join(computation_stride, ", "), fmt::join(mesh, ", "));
  }
  const int64_t cores = product(computation_shape);
  std::vector<int> flat;
  flat.reserve(static_cast<size_t>(num_replicas * cores * rank));

  if (topology.missing_devices().empty()) {
    // Near-cubic replica grid: dimensions in increasing size, the core (last) dimension first.
    std::vector<int> replica_shape(static_cast<size_t>(rank), 0);
    std::vector<std::pair<int, int>> order;  // (size, (i + 1) % rank)
    for (int i = 0; i < rank; ++i) order.emplace_back(replica_counts[i], (i + 1) % rank);
    std::sort(order.begin(), order.end());
    int64_t remaining = num_replicas;
    int remaining_dims = rank;
    for (const auto& [x, ni] : order) {
      const int i = (ni + rank - 1) % rank;
      const auto target = static_cast<int64_t>(
          std::ceil(std::pow(static_cast<double>(remaining), 1.0 / remaining_dims)));
      replica_shape[i] = static_cast<int>(std::min<int64_t>(target, x));
      remaining = (remaining + replica_shape[i] - 1) / replica_shape[i];
      --remaining_dims;
    }
    // TF's 3-D ring tiling: rank 4, whole chips per replica, no stride, full replication.
    bool ring = rank == 4 && computation_shape[rank - 1] == mesh[rank - 1] &&
                product(computation_stride) == 1 && num_replicas == max_replicas;
    if (device_order_mode != DeviceOrderMode::kAuto) {
      if (device_order_mode == DeviceOrderMode::kRing && !ring) {
        detail::throw_invalid(kComponent,
                              "device_order_mode=DeviceOrderMode.RING is not compatible with the "
                              "3D tiling current topology.  Try setting "
                              "device_order_mode=DeviceOrderMode.AUTO (computation_shape [{}], "
                              "computation_stride [{}], {} of {} replicas, mesh [{}])",
                              fmt::join(computation_shape, ", "),
                              fmt::join(computation_stride, ", "), num_replicas, max_replicas,
                              fmt::join(mesh, ", "));
      }
      ring = device_order_mode == DeviceOrderMode::kRing;
    }
    if (ring) {
      place_ring(computation_shape, replica_shape, mesh, num_replicas, flat);
    } else {
      place_mesh(computation_shape, computation_stride, replica_shape, num_replicas, flat);
    }
  } else {
    // Missing devices: ignore the mesh, take devices in task order.
    if (product(computation_stride) != 1) {
      detail::throw_invalid(kComponent,
                            "a topology with missing devices needs computation_stride 1; got [{}]",
                            fmt::join(computation_stride, ", "));
    }
    if (num_replicas * cores > topology.num_devices()) {
      detail::throw_invalid(kComponent,
                            "requested {} replicas of {} cores but the topology has only {} "
                            "devices",
                            num_replicas, cores, topology.num_devices());
    }
    const int per_task = topology.num_devices_per_task();
    for (int64_t logical = 0; logical < num_replicas * cores; ++logical) {
      const auto coords = topology.device_coordinates(static_cast<int>(logical / per_task),
                                                      static_cast<int>(logical % per_task));
      flat.insert(flat.end(), coords.begin(), coords.end());
    }
  }
  return from_flat(topology, num_replicas, static_cast<int>(cores), flat);
}

DeviceAssignment::CoreAssignment DeviceAssignment::core_assignment_nested() const {
  CoreAssignment out(static_cast<size_t>(num_replicas_));
  for (int r = 0; r < num_replicas_; ++r) {
    for (int c = 0; c < num_cores_per_replica_; ++c) out[r].push_back(coordinates(r, c));
  }
  return out;
}

int DeviceAssignment::flat_device(int replica, int logical_core) const {
  if (replica < 0 || replica >= num_replicas_) {
    detail::throw_error(ErrorCode::kOutOfRange, kComponent, "replica {} out of range [0, {})",
                        replica, num_replicas_);
  }
  if (logical_core < 0 || logical_core >= num_cores_per_replica_) {
    detail::throw_error(ErrorCode::kOutOfRange, kComponent,
                        "logical_core {} out of range [0, {})", logical_core,
                        num_cores_per_replica_);
  }
  return devices_[static_cast<size_t>(replica) * num_cores_per_replica_ + logical_core];
}

std::vector<int> DeviceAssignment::coordinates(int replica, int logical_core) const {
  (void)flat_device(replica, logical_core);
  const int rank = topology_.mesh_rank();
  const auto begin = core_assignment_.begin() +
                     (static_cast<int64_t>(replica) * num_cores_per_replica_ + logical_core) * rank;
  return {begin, begin + rank};
}

int DeviceAssignment::task(int replica, int logical_core) const {
  return flat_device(replica, logical_core) / topology_.num_devices_per_task();
}

int DeviceAssignment::tpu_ordinal(int replica, int logical_core) const {
  return flat_device(replica, logical_core) % topology_.num_devices_per_task();
}

std::string DeviceAssignment::device(int replica, int logical_core, const std::string& job) const {
  const int id = flat_device(replica, logical_core);
  const int per_task = topology_.num_devices_per_task();
  return topology_.device_name(id / per_task, id % per_task, job);
}

namespace {

// TF's _tpu_device_name / _tpu_host_device_name: the job is optional and there is no replica.
std::string tf_device_name(const std::optional<std::string>& job, int task, const std::string& type,
                           int id) {
  if (!job) return fmt::format("/task:{}/device:{}:{}", task, type, id);
  return fmt::format("/job:{}/task:{}/device:{}:{}", *job, task, type, id);
}

}  // namespace

std::string DeviceAssignment::tpu_device(int replica, int logical_core,
                                         const std::optional<std::string>& job) const {
  return tf_device_name(job, task(replica, logical_core), topology_.device_type(),
                        tpu_ordinal(replica, logical_core));
}

std::string DeviceAssignment::host_device(int replica, int logical_core,
                                          const std::optional<std::string>& job) const {
  return tf_device_name(job, task(replica, logical_core), "CPU", 0);
}

std::vector<int> DeviceAssignment::lookup_replicas(int task_id, int logical_core) const {
  const auto t = task_core_replicas_.find(task_id);
  if (t != task_core_replicas_.end()) {
    const auto c = t->second.find(logical_core);
    if (c != t->second.end()) return c->second;
  }
  detail::throw_invalid(kComponent, "Can not find any replica in task: {} contains logical_core: {} ",
                        task_id, logical_core);
}

std::string DeviceAssignment::to_string() const {
  std::vector<std::string> replicas;
  for (const auto& replica : core_assignment_nested()) {
    std::vector<std::string> cores;
    for (const auto& c : replica) cores.push_back(fmt::format("[{}]", fmt::join(c, ",")));
    replicas.push_back(fmt::format("[{}]", fmt::join(cores, ",")));
  }
  return fmt::format("DeviceAssignment(num_replicas={}, num_cores_per_replica={}, "
                     "core_assignment=[{}])",
                     num_replicas_, num_cores_per_replica_, fmt::join(replicas, ","));
}

std::ostream& operator<<(std::ostream& os, const DeviceAssignment& assignment) {
  return os << assignment.to_string();
}

}  // namespace tessel
