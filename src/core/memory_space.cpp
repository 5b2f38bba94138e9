// MemorySpace names and the process's DeviceMemoryOps slot.
#include "tessel/core/memory_space.h"

#include <atomic>

#include "core/errors.h"

namespace tessel {
namespace {
std::atomic<DeviceMemoryOps*> installed_ops{nullptr};
}  // namespace

std::string MemorySpace::to_string() const {
  if (is_host()) return "host";
  return fmt::format("cuda:{}", device_ordinal);
}

void set_device_memory_ops(DeviceMemoryOps* ops) { installed_ops.store(ops); }

DeviceMemoryOps& device_memory_ops(const char* what, MemorySpace space) {
  DeviceMemoryOps* ops = installed_ops.load();
  if (ops == nullptr) {
    detail::throw_error(ErrorCode::kFailedPrecondition, "Tensor",
                        "{} on {} memory, but no device memory support is installed", what,
                        space.to_string());
  }
  return *ops;
}

}  // namespace tessel
