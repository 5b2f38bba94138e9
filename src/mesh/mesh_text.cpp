// Mesh <-> TensorFlow's text form (tf-dtensor-semantics.md §1.5):
//   <name>|<d1>=<n1>,...|<global ids>|<local ids>|<local devices>[|<global devices>][|use_xla_spmd]
#include <algorithm>

#include "core/errors.h"
#include "core/text.h"
#include "mesh/mesh_data.h"

namespace tessel {
namespace {

constexpr std::string_view kMesh = "Mesh";
constexpr std::string_view kEmptyMesh = "empty_mesh";
constexpr std::string_view kXlaSpmd = "use_xla_spmd";

std::vector<int64_t> parse_ids(const std::string& text, std::string_view what) {
  std::vector<int64_t> ids;
  if (text.empty()) return ids;
  for (const std::string& piece : detail::split(text, ',')) {
    const std::optional<int64_t> id = detail::parse_integer(piece);
    if (!id) {
      detail::throw_invalid(kMesh, "Failed to parse {}: '{}' is not an integer (in '{}')", what,
                            piece, text);
    }
    ids.push_back(*id);
  }
  return ids;
}

std::vector<std::string> parse_devices(const std::string& text) {
  if (text.empty()) return {};
  return detail::split(text, ',');
}

std::vector<MeshDimension> parse_dims(const std::string& text) {
  std::vector<MeshDimension> dims;
  if (text.empty()) return dims;
  for (const std::string& piece : detail::split(text, ',')) {
    const std::vector<std::string> kv = detail::split(piece, '=');
    const std::optional<int64_t> size =
        kv.size() == 2 ? detail::parse_integer(kv[1]) : std::nullopt;
    if (!size) {
      // TF leaves this undefined; tessel names the malformed piece.
      detail::throw_invalid(kMesh, "Failed to parse mesh dimension '{}': expected <name>=<size>",
                            piece);
    }
    dims.push_back({kv[0], *size});
  }
  return dims;
}

// TF's 3-part test shorthand "name|x=2,y=2|*CPU": ids 0..n-1, all local, no replica field.
Mesh::Data expand_shorthand(Mesh::Data d, const std::string& devices_part) {
  const size_t star = devices_part.find('*');
  if (star == std::string::npos || star + 1 >= devices_part.size()) {
    detail::throw_invalid(kMesh, "Expected '*<DEVICE_TYPE>' as the 3rd mesh part but got '{}'",
                          devices_part);
  }
  const std::string type = devices_part.substr(star + 1);
  const int64_t n = mesh_device_count(d.dims);
  for (int64_t i = 0; i < n; ++i) {
    d.global_ids.push_back(i);
    d.local_ids.push_back(i);
    d.local_devices.push_back(fmt::format("/job:localhost/task:0/device:{}:{}", type, i));
  }
  return d;
}

}  // namespace

Mesh Mesh::from_string(const std::string& text) {
  std::string_view body = text;
  // tessel strips the "mesh:" prefix here too (TF only does so in Layout.from_string and names
  // the mesh "mesh:"); mesh names may not contain ':' so nothing is lost.
  if (body.substr(0, 5) == "mesh:") body.remove_prefix(5);
  if (body == kEmptyMesh) return Mesh();
  if (body.find('|') == std::string_view::npos) {
    if (detail::split(body, ':').size() != 5 && detail::split(body, ':').size() != 6) {
      detail::throw_invalid(kMesh, "Input string is invalid: '{}'", text);
    }
    return from_device(std::string(body));
  }
  const std::vector<std::string> parts = detail::split(body, '|');
  const size_t n = parts.size();
  if (n != 3 && n != 5 && n != 6 && n != 7) {
    detail::throw_invalid(kMesh, "Expected either 5, 6, 7 or 3 mesh parts but found{} in '{}'", n,
                          text);
  }
  Mesh::Data d;
  d.name = parts[0];
  d.dims = parse_dims(parts[1]);
  if (n == 3) return MeshBuilder::build(expand_shorthand(std::move(d), parts[2]), MeshOrigin::kParser);
  d.global_ids = parse_ids(parts[2], "global_device_ids");
  d.local_ids = parse_ids(parts[3], "local_device_ids");
  d.local_devices = parse_devices(parts[4]);
  if (n >= 6) {
    if (parts[5] == kXlaSpmd) {
      d.use_xla_spmd = true;
    } else {
      d.global_devices = parse_devices(parts[5]);
    }
  }
  if (n == 7 && !parts[6].empty()) {
    if (parts[6] != kXlaSpmd) {
      detail::throw_invalid(kMesh, "Expected string use_xla_spmdas the 7th argument but got: {}",
                            parts[6]);
    }
    d.use_xla_spmd = true;
  }
  return MeshBuilder::build(std::move(d), MeshOrigin::kParser);
}

std::string Mesh::to_string() const {
  if (is_single_device()) return single_device();
  if (is_empty()) return std::string(kEmptyMesh);
  const Data& d = *data_;
  std::vector<std::string> dims;
  for (const MeshDimension& dim : d.dims) dims.push_back(fmt::format("{}={}", dim.name, dim.size));
  std::string out = fmt::format("{}|{}|{}|{}|{}", d.name, fmt::join(dims, ","),
                                fmt::join(d.global_ids, ","), fmt::join(d.local_ids, ","),
                                fmt::join(d.local_devices, ","));
  if (!d.global_devices.empty()) out += fmt::format("|{}", fmt::join(d.global_devices, ","));
  if (d.use_xla_spmd) out += fmt::format("|{}", kXlaSpmd);
  return out;
}

}  // namespace tessel
