#include "tessel/mesh/mesh.h"

#include <algorithm>
#include <numeric>

#include "core/errors.h"
#include "core/text.h"
#include "mesh/mesh_data.h"
#include "tessel/core/device_name.h"

namespace tessel {
namespace {

constexpr std::string_view kMesh = "Mesh";

const Mesh::Data& empty_data() {
  static const Mesh::Data* data = new Mesh::Data();
  return *data;
}

uint64_t fnv1a(std::string_view bytes, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

Mesh MeshBuilder::build(Mesh::Data data, MeshOrigin origin) {
  if (data.global_ids.empty() && data.dims.empty() && data.local_ids.empty() &&
      data.local_devices.empty() && data.global_devices.empty()) {
    return Mesh();
  }
  if (data.global_ids.empty()) {
    // TF silently returns the empty mesh here and drops the dimensions; tessel refuses.
    detail::throw_invalid(kMesh, "mesh '{}' has dimensions or devices but no global_device_ids",
                          data.name);
  }
  if (origin == MeshOrigin::kConstructor) {
    check_constructor_rules(data);
    check_parser_rules(data);
  } else {
    check_parser_rules(data);
    check_constructor_rules(data);
  }
  return wrap(std::move(data));
}

Mesh MeshBuilder::wrap(Mesh::Data data) {
  return Mesh(std::make_shared<const Mesh::Data>(std::move(data)));
}

Mesh::Mesh() : data_(std::shared_ptr<const Data>(&empty_data(), [](const Data*) {})) {}

Mesh::Mesh(std::shared_ptr<const Data> data) : data_(std::move(data)) {}

Mesh::Mesh(std::vector<std::string> dim_names, std::vector<int64_t> ids_shape,
           std::vector<int64_t> global_device_ids, std::vector<int64_t> local_device_ids,
           std::vector<std::string> local_devices, std::string mesh_name,
           std::vector<std::string> global_devices, bool use_xla_spmd) {
  const int64_t count = std::accumulate(ids_shape.begin(), ids_shape.end(), int64_t{1},
                                        std::multiplies<int64_t>());
  if (count != static_cast<int64_t>(global_device_ids.size())) {
    detail::throw_invalid(kMesh, "global_device_ids of shape {} hold {} ids, but {} were given",
                          format_ids(ids_shape), count, global_device_ids.size());
  }
  if (global_device_ids.empty()) {
    detail::throw_invalid(kMesh, "Variable global_device_ids must be non-empty.");
  }
  Data d;
  d.global_ids = std::move(global_device_ids);
  for (size_t i = 0; i < d.global_ids.size(); ++i) {
    if (d.global_ids[i] - static_cast<int64_t>(i) != d.global_ids[0]) {
      detail::throw_invalid(kMesh, "global_device_ids must sequentially increase: {}",
                            format_ids(d.global_ids));
    }
  }
  if (dim_names.size() != ids_shape.size()) {
    detail::throw_invalid(kMesh,
                          "Number of mesh dimensions does not match number of dimension names. "
                          "({} names for ids of shape {})",
                          dim_names.size(), format_ids(ids_shape));
  }
  for (size_t i = 0; i < dim_names.size(); ++i) d.dims.push_back({dim_names[i], ids_shape[i]});
  d.name = std::move(mesh_name);
  d.local_ids = std::move(local_device_ids);
  d.local_devices = std::move(local_devices);
  d.global_devices = std::move(global_devices);
  d.use_xla_spmd = use_xla_spmd;
  *this = MeshBuilder::build(std::move(d), MeshOrigin::kConstructor);
}

Mesh::Mesh(const std::vector<MeshDimension>& dims, const std::vector<std::string>& local_devices,
           std::string mesh_name) {
  Data d;
  d.name = std::move(mesh_name);
  d.dims = dims;
  const int64_t n = mesh_device_count(dims);
  for (int64_t i = 0; i < n; ++i) d.global_ids.push_back(i);
  d.local_ids = d.global_ids;
  d.local_devices = local_devices;
  *this = MeshBuilder::build(std::move(d), MeshOrigin::kConstructor);
}

Mesh Mesh::from_device(const std::string& device) {
  if (device.empty()) detail::throw_invalid(kMesh, "Single device is empty.");
  // A full device name, so that to_string() (the name itself) parses back as this mesh.
  // TF's rule as Mesh::from_string applies it: 5 or 6 ':'-separated pieces (a legacy
  // "/job:a/task:0/cpu:0" parses as a device name but not back as a mesh).
  const std::optional<DeviceName> name = DeviceName::try_parse(device);
  const size_t pieces = detail::split(device, ':').size();
  if (!name || !name->job || !name->task || !name->type || !name->id ||
      (pieces != 5 && pieces != 6)) {
    detail::throw_invalid(kMesh,
                          "Single device '{}' is not a full device name "
                          "(/job:<job>[/replica:<r>]/task:<t>/device:<type>:<id>)",
                          device);
  }
  Data d;
  d.single_device = device;
  return MeshBuilder::wrap(std::move(d));
}

Mesh Mesh::create(const std::vector<MeshDimension>& dims, const std::string& device_type,
                  const std::string& mesh_name, int64_t num_devices, bool use_xla_spmd) {
  std::vector<MeshDimension> resolved = dims;
  if (resolved.empty()) {
    if (num_devices < 1) {
      detail::throw_invalid(kMesh, "create: no dimensions given and num_devices is {}", num_devices);
    }
    resolved.push_back({"x", num_devices});
  }
  if (resolved.size() == 1 && resolved[0].size == -1) {
    if (num_devices < 1) {
      detail::throw_invalid(kMesh, "create: dimension {} has size -1 but num_devices is {}",
                            resolved[0].name, num_devices);
    }
    resolved[0].size = num_devices;
  }
  const int64_t n = mesh_device_count(resolved);
  if (num_devices >= 0 && n > num_devices) {
    detail::throw_invalid(kMesh, "create: the dimensions need {} devices but only {} exist", n,
                          num_devices);
  }
  std::vector<std::string> devices;
  for (int64_t i = 0; i < n; ++i) devices.push_back(fmt::format("{}:{}", device_type, i));
  return create_on_devices(resolved, devices, mesh_name, use_xla_spmd);
}

Mesh Mesh::create_on_devices(const std::vector<MeshDimension>& dims,
                             const std::vector<std::string>& devices, const std::string& mesh_name,
                             bool use_xla_spmd) {
  const int64_t count = static_cast<int64_t>(devices.size());
  std::vector<MeshDimension> resolved = dims;
  if (resolved.empty()) resolved.push_back({"x", count});
  if (resolved.size() == 1 && resolved[0].size == -1) resolved[0].size = count;
  std::vector<std::string> full;
  for (const std::string& d : devices) {
    full.push_back(!d.empty() && d[0] == '/' ? d : "/job:localhost/replica:0/task:0/device:" + d);
  }
  std::vector<std::string> names;
  std::vector<int64_t> shape;
  for (const MeshDimension& d : resolved) {
    names.push_back(d.name);
    shape.push_back(d.size);
  }
  std::vector<int64_t> ids(devices.size());
  std::iota(ids.begin(), ids.end(), 0);
  return Mesh(names, shape, ids, ids, full, mesh_name, {}, use_xla_spmd);
}

bool Mesh::is_empty() const { return data_->global_ids.empty() && data_->single_device.empty(); }
bool Mesh::is_single_device() const { return !data_->single_device.empty(); }
bool Mesh::is_remote() const { return data_->local_ids.empty() && !data_->global_ids.empty(); }
bool Mesh::use_xla_spmd() const { return data_->use_xla_spmd; }
const std::string& Mesh::name() const { return data_->name; }
const std::vector<MeshDimension>& Mesh::dims() const { return data_->dims; }
int Mesh::rank() const { return static_cast<int>(data_->dims.size()); }
int64_t Mesh::size() const { return static_cast<int64_t>(data_->global_ids.size()); }
const std::vector<int64_t>& Mesh::global_device_ids() const { return data_->global_ids; }
const std::vector<int64_t>& Mesh::local_device_ids() const { return data_->local_ids; }
const std::vector<std::string>& Mesh::local_devices() const { return data_->local_devices; }
const std::vector<std::string>& Mesh::global_devices() const { return data_->global_devices; }
int64_t Mesh::num_local_devices() const { return static_cast<int64_t>(data_->local_devices.size()); }
const std::string& Mesh::single_device() const { return data_->single_device; }

std::vector<std::string> Mesh::dim_names() const {
  std::vector<std::string> names;
  for (const MeshDimension& d : data_->dims) names.push_back(d.name);
  return names;
}

std::vector<int64_t> Mesh::shape() const {
  std::vector<int64_t> shape;
  for (const MeshDimension& d : data_->dims) shape.push_back(d.size);
  return shape;
}

bool Mesh::contains_dim(const std::string& name) const {
  return std::any_of(data_->dims.begin(), data_->dims.end(),
                     [&](const MeshDimension& d) { return d.name == name; });
}

int Mesh::dim_index(const std::string& name) const {
  for (size_t i = 0; i < data_->dims.size(); ++i) {
    if (data_->dims[i].name == name) return static_cast<int>(i);
  }
  detail::throw_error(ErrorCode::kNotFound, kMesh,
                      "Dimension {} does not exist in mesh.Available dimensions: {}", name,
                      fmt::join(dim_names(), ","));
}

int64_t Mesh::dim_size(const std::string& name) const { return data_->dims[dim_index(name)].size; }

std::vector<int64_t> Mesh::strides() const {
  std::vector<int64_t> strides(data_->dims.size(), 1);
  for (int i = rank() - 2; i >= 0; --i) strides[i] = strides[i + 1] * data_->dims[i + 1].size;
  return strides;
}

int64_t Mesh::min_global_device_id() const {
  if (data_->global_ids.empty()) return 0;
  return *std::min_element(data_->global_ids.begin(), data_->global_ids.end());
}

std::string Mesh::device_type() const {
  const Data& d = *data_;
  std::string device;
  if (!d.single_device.empty()) {
    device = d.single_device;
  } else if (!d.global_devices.empty()) {
    device = d.global_devices[0];
  } else if (!d.local_devices.empty()) {
    device = d.local_devices[0];
  } else {
    return "";
  }
  std::optional<DeviceName> parsed = DeviceName::try_parse(device);
  return parsed && parsed->type ? *parsed->type : "";
}

std::vector<int64_t> Mesh::device_location(int64_t offset) const {
  if (offset < 0 || offset >= size()) {
    detail::throw_invalid(kMesh, "Mesh offset cannot be negative or exceed Mesh's size. "
                                 "Offset size: {} and Mesh size: {}", offset, size());
  }
  return coords(offset);
}

std::vector<int64_t> Mesh::coords(int64_t index) const {
  const std::vector<int64_t> s = strides();
  std::vector<int64_t> location(s.size());
  for (size_t i = 0; i < s.size(); ++i) location[i] = (index / s[i]) % data_->dims[i].size;
  return location;
}

int64_t Mesh::offset_of(const std::vector<int64_t>& location) const {
  if (static_cast<int>(location.size()) != rank()) {
    detail::throw_invalid(kMesh, "location {} has {} coordinates but the mesh has {} dimensions",
                          format_ids(location), location.size(), rank());
  }
  const std::vector<int64_t> s = strides();
  int64_t offset = 0;
  for (size_t i = 0; i < location.size(); ++i) {
    if (location[i] < 0 || location[i] >= data_->dims[i].size) {
      detail::throw_invalid(kMesh, "location {}: coordinate {} of dimension {} is outside [0, {})",
                            format_ids(location), location[i], data_->dims[i].name,
                            data_->dims[i].size);
    }
    offset += location[i] * s[i];
  }
  return offset;
}

std::map<int64_t, std::map<std::string, int64_t>> Mesh::unravel_index() const {
  std::map<int64_t, std::map<std::string, int64_t>> result;
  for (int64_t offset = 0; offset < size(); ++offset) {
    std::vector<int64_t> loc = coords(offset);
    for (size_t i = 0; i < loc.size(); ++i) result[offset][data_->dims[i].name] = loc[i];
  }
  return result;
}

int64_t Mesh::offset_of_device_id(int64_t device_id) const {
  const int64_t offset = device_id - min_global_device_id();
  if (offset < 0 || offset >= size()) {
    detail::throw_error(ErrorCode::kNotFound, kMesh, "device id {} is not in the mesh (ids {}..{})",
                        device_id, min_global_device_id(), min_global_device_id() + size() - 1);
  }
  return offset;
}

std::vector<std::vector<int64_t>> Mesh::local_device_locations() const {
  std::vector<std::vector<int64_t>> locations;
  for (int64_t id : data_->local_ids) locations.push_back(coords(offset_of_device_id(id)));
  return locations;
}

Mesh Mesh::host_mesh() const {
  if (is_empty() || is_single_device()) return *this;
  // The same job, replica, task and id, on the host's CPU.
  auto to_cpu = [](const std::vector<std::string>& devices) {
    std::vector<std::string> out;
    for (const std::string& device : devices) {
      const DeviceName name = DeviceName::parse(device);
      out.push_back(DeviceName::make(name.job.value_or("localhost"), name.replica.value_or(0),
                                     name.task.value_or(0), "CPU", name.id.value_or(0))
                        .to_string());
    }
    return out;
  };
  Data d;
  d.dims = data_->dims;
  d.global_ids = data_->global_ids;
  d.local_ids = data_->local_ids;
  d.local_devices = to_cpu(data_->local_devices);
  // A remote mesh keeps its global devices so that it stays describable.
  if (d.local_devices.empty()) d.global_devices = to_cpu(data_->global_devices);
  return MeshBuilder::build(std::move(d), MeshOrigin::kParser);
}

uint64_t Mesh::global_fingerprint() const {
  uint64_t h = fnv1a("tessel.mesh");
  for (const MeshDimension& d : data_->dims) h = fnv1a(fmt::format("{}={};", d.name, d.size), h);
  h = fnv1a(format_ids(data_->global_ids), h);
  for (const std::string& device : data_->global_devices) h = fnv1a(device + ";", h);
  // A mesh of one client (every id local) without global device names: its local devices are
  // its global ones. Without them, meshes of equal shape over different devices of one process
  // (the replicas of replicate(), relayout's send_recv groups) would share collective groups.
  if (data_->global_devices.empty() && !data_->local_ids.empty() &&
      data_->local_ids.size() == data_->global_ids.size()) {
    for (const std::string& device : data_->local_devices) h = fnv1a(device + ";", h);
  }
  return h;
}

bool operator==(const Mesh& a, const Mesh& b) {
  if (a.data_ == b.data_) return true;  // copies share their data
  const Mesh::Data& x = *a.data_;
  const Mesh::Data& y = *b.data_;
  return x.name == y.name && x.dims == y.dims && x.global_ids == y.global_ids &&
         x.local_ids == y.local_ids && x.local_devices == y.local_devices &&
         x.global_devices == y.global_devices && x.use_xla_spmd == y.use_xla_spmd &&
         x.single_device == y.single_device;
}

size_t Mesh::hash() const {
  return static_cast<size_t>(fnv1a(to_string() + (use_xla_spmd() ? "#x" : "") + "#" + name()));
}

std::ostream& operator<<(std::ostream& os, const Mesh& mesh) { return os << mesh.to_string(); }

}  // namespace tessel
