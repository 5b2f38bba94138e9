// The validation rules of a tile mesh: TensorFlow's Python-constructor and C++-parser checks,
// with TF's message texts, plus tessel's stricter rules (docs/compatibility.md).
#include <algorithm>
#include <set>

#include "core/errors.h"
#include "core/inert_attribute.h"
#include "mesh/mesh_data.h"
#include "tessel/core/device_name.h"
#include "tessel/mesh/sharding_spec.h"

namespace tessel {
namespace {

constexpr std::string_view kMesh = "Mesh";

// Names usable in the text forms without quoting: letters, digits, '_', '-', '.'.
bool is_plain_name(std::string_view name) {
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

// The device type of one name, or "" when it has none; unparseable names throw.
std::string device_type_of(const std::string& device, std::string_view list_name) {
  std::optional<DeviceName> parsed = DeviceName::try_parse(device);
  if (!parsed) detail::throw_invalid(kMesh, "Failed to parse {}: '{}'", list_name, device);
  return parsed->type.value_or("");
}

void check_duplicates(const std::vector<std::string>& devices) {
  std::set<std::string> seen;
  std::set<std::string> dups;
  for (const std::string& d : devices) {
    if (!seen.insert(d).second) dups.insert(d);
  }
  if (dups.empty()) return;
  // TF allows one CPU device repeated for every local device (several logical CPUs on one).
  const bool all_same_cpu =
      seen.size() == 1 && device_type_of(devices[0], "local_devices") == "CPU";
  if (all_same_cpu) return;
  detail::throw_invalid(kMesh, "Duplicate devices found in mesh specification [{}].",
                        fmt::join(dups, ", "));
}

}  // namespace

int64_t mesh_device_count(const std::vector<MeshDimension>& dims) {
  int64_t count = 1;
  for (const MeshDimension& dim : dims) {
    if (dim.size < 1) {
      detail::throw_invalid(kMesh, "mesh dimension {} has size {}; sizes must be at least 1",
                            dim.name, dim.size);
    }
    if (dim.size > kMaxMeshDevices || count * dim.size > kMaxMeshDevices) {
      detail::throw_invalid(kMesh, "mesh dimension {}={} makes the mesh larger than {} devices",
                            dim.name, dim.size, kMaxMeshDevices);
    }
    count *= dim.size;
  }
  return count;
}

std::string format_ids(const std::vector<int64_t>& ids) {
  return fmt::format("[{}]", fmt::join(ids, ","));
}

void MeshBuilder::check_constructor_rules(const Mesh::Data& d) {
  const std::vector<int64_t>& ids = d.global_ids;
  // Device ids count devices from 0 (TF does not check; a negative id names no device).
  if (!ids.empty() && ids[0] < 0) {
    detail::throw_invalid(kMesh, "global_device_ids must be >= 0, got {} in {}", ids[0],
                          format_ids(ids));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] - static_cast<int64_t>(i) != ids[0]) {
      detail::throw_invalid(kMesh, "global_device_ids must sequentially increase: {}",
                            format_ids(ids));
    }
  }
  if (d.local_devices.empty() && d.global_devices.empty()) {
    detail::throw_invalid(kMesh, "Empty list of devices not allowed.");
  }
  check_duplicates(d.local_devices);
  check_duplicates(d.global_devices);
  if (d.local_ids.size() != d.local_devices.size()) {
    detail::throw_invalid(kMesh,
                          "Variable local_device_ids does not have same size as local_devices. "
                          "({} ids, {} devices)",
                          d.local_ids.size(), d.local_devices.size());
  }
  if (d.local_ids.size() > ids.size()) {
    detail::throw_invalid(kMesh, "Cannot have more local than gobal device IDs. ({} > {})",
                          d.local_ids.size(), ids.size());
  }
  // The global ids are consecutive (checked above), so membership is a range check: a search of
  // the list per local id made a 50,000-device mesh take seconds to build (found by make fuzz).
  const auto is_global_id = [&ids](int64_t id) {
    return !ids.empty() && id >= ids.front() && id <= ids.back();
  };
  std::set<int64_t> local_seen;
  for (int64_t id : d.local_ids) {
    if (!is_global_id(id)) {
      detail::throw_invalid(kMesh, "local device id {} is not one of global_device_ids {}", id,
                            format_ids(ids));
    }
    if (!local_seen.insert(id).second) {
      detail::throw_invalid(kMesh, "local_device_ids lists device id {} twice", id);
    }
  }
  const bool use_local = !d.local_devices.empty();
  const std::vector<std::string>& typed = use_local ? d.local_devices : d.global_devices;
  std::set<std::string> types;
  for (const std::string& device : typed) {
    std::string type = device_type_of(device, use_local ? "local_devices" : "global_devices");
    if (type.empty()) detail::throw_invalid(kMesh, "device_type is required: '{}'", device);
    types.insert(type);
  }
  if (types.size() > 1) {
    detail::throw_invalid(kMesh, "Devices containing multiple device_types : {{{}}}",
                          fmt::join(types, ", "));
  }
  if (d.use_xla_spmd && *types.begin() != "TPU") {
    detail::throw_invalid(kMesh, "XLA SPMD is not currently not supported for {} mesh.",
                          *types.begin());
  }
  if (d.use_xla_spmd) {
    detail::warn_inert_attribute(kMesh, "use_xla_spmd", "true",
                                 "tessel expands every mesh's ops itself (its sharding rules), "
                                 "with no XLA SPMD pass");
  }
}

void MeshBuilder::check_parser_rules(const Mesh::Data& d) {
  if (!is_plain_name(d.name)) {
    detail::throw_invalid(kMesh, "mesh name '{}' is invalid: use letters, digits, '_', '-' or '.'",
                          d.name);
  }
  std::set<std::string> names;
  for (const MeshDimension& dim : d.dims) {
    if (!names.insert(dim.name).second) {
      detail::throw_invalid(kMesh, "repeated mesh dimension {}", dim.name);
    }
    if (dim.name == kAny || dim.name == kMatch || dim.name == kUnsharded) {
      detail::throw_invalid(kMesh, "mesh dimension name {} is reserved", dim.name);
    }
    if (dim.name.empty() || !is_plain_name(dim.name)) {
      detail::throw_invalid(
          kMesh, "mesh dimension name '{}' is invalid: use letters, digits, '_', '-' or '.'",
          dim.name);
    }
  }
  const int64_t product = mesh_device_count(d.dims);
  const size_t g = d.global_ids.size();
  const size_t l = d.local_ids.size();
  if (g < l || d.local_devices.size() != l) {
    detail::throw_invalid(kMesh,
                          "number of global_device_ids {} local_devices ids {} and local devices "
                          "{}not meeting requirements",
                          g, l, d.local_devices.size());
  }
  if (l > 0 && g % l != 0) {
    detail::throw_invalid(
        kMesh, "Uneven local clusters with global_ids {} and local_devices ids {}", g, l);
  }
  if (product != static_cast<int64_t>(g)) {
    detail::throw_invalid(kMesh,
                          "mesh size doesn't match number of devices: dimensions give {}, "
                          "there are {} global_device_ids",
                          product, g);
  }
  if (!d.global_devices.empty() && d.global_devices.size() != g) {
    detail::throw_invalid(kMesh, "{} global_devices given for {} global_device_ids",
                          d.global_devices.size(), g);
  }
  std::set<std::string> types;
  for (const std::vector<std::string>* list : {&d.local_devices, &d.global_devices}) {
    const char* list_name = list == &d.local_devices ? "local_devices" : "global_devices";
    for (const std::string& device : *list) {
      std::optional<DeviceName> parsed = DeviceName::try_parse(device);
      if (!parsed) detail::throw_invalid(kMesh, "Failed to parse {}: '{}'", list_name, device);
      if (!parsed->job || !parsed->task || !parsed->type) {
        detail::throw_invalid(kMesh, "Failed to either identify host or device type: '{}'", device);
      }
      types.insert(*parsed->type);
    }
  }
  if (types.size() > 1) {
    detail::throw_invalid(kMesh, "More than one device type per mesh not supported. Found {} ({})",
                          types.size(), fmt::join(types, ", "));
  }
}

}  // namespace tessel
