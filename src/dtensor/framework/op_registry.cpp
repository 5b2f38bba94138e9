// OpRegistry: the table of ops, filled once by the families' registration functions.
#include "tessel/dtensor/op_registry.h"

#include <mutex>

#include "core/errors.h"
#include "dtensor/ops/op_families.h"

namespace tessel {

OpRegistry& OpRegistry::global() {
  static OpRegistry* registry = [] {
    auto* r = new OpRegistry();  // never destroyed: ops may run during exit
    detail::register_builtin_ops(*r);
    detail::register_gpu_kernels(*r);  // the CUDA backend's; nothing without CUDA
    return r;
  }();
  return *registry;
}

void OpRegistry::set_gpu_kernel(std::string_view name, OpDef::Kernel kernel) {
  auto it = ops_.find(name);
  if (it == ops_.end()) {
    detail::throw_error(ErrorCode::kNotFound, "OpRegistry", "no op named '{}' for a GPU kernel", name);
  }
  if (!kernel) detail::throw_invalid("OpRegistry", "a null GPU kernel for op '{}'", name);
  it->second.gpu_kernel = std::move(kernel);
}

void OpRegistry::add(OpDef def) {
  if (def.name.empty() || !def.infer || !def.shard || !def.kernel) {
    detail::throw_invalid("OpRegistry", "op '{}' needs a name, infer, shard and kernel", def.name);
  }
  if (ops_.count(def.name) != 0) {
    detail::throw_error(ErrorCode::kAlreadyExists, "OpRegistry", "op '{}' is already registered",
                        def.name);
  }
  std::string name = def.name;
  ops_.emplace(std::move(name), std::move(def));
}

const OpDef& OpRegistry::get(std::string_view name) const {
  auto it = ops_.find(name);
  if (it == ops_.end()) {
    detail::throw_error(ErrorCode::kNotFound, "OpRegistry", "no op named '{}'", name);
  }
  return it->second;
}

bool OpRegistry::contains(std::string_view name) const { return ops_.find(name) != ops_.end(); }

std::vector<std::string> OpRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, def] : ops_) out.push_back(name);
  return out;
}

}  // namespace tessel
