// The per-thread default-mesh stack (TF's `with dtensor.default_mesh(mesh):`), the DTensor
// device's name, and visualize.
#include "core/errors.h"
#include "dtensor/dtensor_internal.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/mesh/shard_map.h"

namespace tessel {
namespace {

// Innermost scope last. Per thread, as the controller thread of each client owns its scopes.
std::vector<Mesh>& mesh_stack() {
  thread_local std::vector<Mesh> stack;
  return stack;
}

}  // namespace

DefaultMeshScope::DefaultMeshScope(const Mesh& mesh) {
  if (mesh.is_empty()) {
    detail::throw_invalid("default_mesh", "Expect `mesh` to be a non-empty `Mesh`, got {}",
                          mesh.to_string());
  }
  depth_ = mesh_stack().size();
  mesh_stack().push_back(mesh);
}

DefaultMeshScope::~DefaultMeshScope() {
  std::vector<Mesh>& stack = mesh_stack();
  if (stack.size() > depth_) stack.resize(depth_);
}

std::optional<Mesh> get_default_mesh() {
  if (mesh_stack().empty()) return std::nullopt;
  return mesh_stack().back();
}

Mesh require_default_mesh(std::string_view op) {
  if (mesh_stack().empty()) {
    detail::throw_invalid(op,
                          "No default mesh has been registered to DTensor; run {} inside a "
                          "DefaultMeshScope or give it a DTensor input",
                          op);
  }
  return mesh_stack().back();
}

namespace detail {

std::string dtensor_device_name(const Runtime& runtime) {
  const RuntimeOptions& o = runtime.options();
  return fmt::format("/job:{}/replica:{}/task:{}/device:CUSTOM:0", o.job, o.replica, o.task);
}

}  // namespace detail

std::string device_name() { return detail::dtensor_device_name(Runtime::global()); }

std::string visualize(const DTensor& tensor) {
  if (!tensor.defined()) detail::throw_invalid("visualize", "a null DTensor has no layout");
  return ShardMap(tensor.layout(), tensor.shape()).visualize();
}

}  // namespace tessel
