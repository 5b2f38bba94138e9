// parse_mesh: the user-facing mesh grammar (mesh_spec.h) on top of Mesh::create and
// Mesh::from_string.
#include "tessel/mesh/mesh_spec.h"

#include "core/errors.h"
#include "core/text.h"

namespace tessel {
namespace {

constexpr std::string_view kParseMesh = "parse_mesh";

int64_t parse_size(std::string_view size, std::string_view text, int64_t max_devices) {
  const std::optional<int64_t> value = detail::parse_integer(size);
  if (!value || *value < 1 || *value > max_devices) {
    detail::throw_invalid(kParseMesh, "'{}' in '{}' is not a dimension size from 1 to {}", size,
                          text, max_devices);
  }
  return *value;
}

// "x=2,y=2" (named) or "2x2" (sizes, named by default_names).
std::vector<MeshDimension> parse_short(std::string_view text,
                                       const std::vector<std::string>& default_names,
                                       int64_t max_devices) {
  std::vector<MeshDimension> dims;
  if (text.find('=') != std::string_view::npos) {
    for (const std::string& piece : detail::split(text, ',')) {
      const size_t eq = piece.find('=');
      if (eq == std::string::npos || eq == 0) {
        detail::throw_invalid(kParseMesh, "'{}' in '{}' is not <name>=<size> (e.g. x=2,y=2)",
                              piece, text);
      }
      dims.push_back({piece.substr(0, eq), parse_size(piece.substr(eq + 1), text, max_devices)});
    }
  } else {
    const std::vector<std::string> sizes = detail::split(text, 'x');
    if (default_names.empty()) {
      detail::throw_invalid(kParseMesh, "'{}' needs dimension names: <name>=<size>,... "
                            "(e.g. x=2,y=2) or TensorFlow's form (|x=2,y=2|*CPU)", text);
    }
    if (sizes.size() != default_names.size()) {
      detail::throw_invalid(kParseMesh, "'{}' has {} size{} for the {} dimensions {} (e.g. {})",
                            text, sizes.size(), sizes.size() == 1 ? "" : "s", default_names.size(),
                            fmt::join(default_names, ","),
                            fmt::join(std::vector<std::string>(default_names.size(), "2"), "x"));
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      dims.push_back({default_names[i], parse_size(sizes[i], text, max_devices)});
    }
  }
  int64_t devices = 1;
  for (const MeshDimension& d : dims) {
    devices *= d.size;  // each size is at most max_devices (2^16 by default): no overflow here
    if (devices > max_devices) {
      detail::throw_invalid(kParseMesh, "'{}' has more than {} devices", text, max_devices);
    }
  }
  return dims;
}

}  // namespace

Mesh parse_mesh(std::string_view text, const std::vector<std::string>& default_names,
                int64_t max_devices) {
  if (text.empty()) {
    detail::throw_invalid(kParseMesh, "empty mesh text: expected e.g. x=2,y=2 or |x=2,y=2|*CPU");
  }
  if (text.find('|') != std::string_view::npos) return Mesh::from_string(std::string(text));
  return Mesh::create(parse_short(text, default_names, max_devices), "CPU");
}

}  // namespace tessel
