// MemorySpace names and the process's DeviceMemoryOps slot.
#include "tessel/core/memory_space.h"

#include <atomic>

#include "core/errors.h"

namespace tessel {
namespace {
// One slot per kind of memory (kHost's stays empty).
std::atomic<DeviceMemoryOps*> installed_ops[3] = {nullptr, nullptr, nullptr};
}  // namespace

std::string MemorySpace::to_string() const {
  switch (kind) {
    case Kind::kHost: return "host";
    case Kind::kCudaDevice: return fmt::format("cuda:{}", device_ordinal);
    case Kind::kSimulatedGpu: return fmt::format("simulated_gpu:{}", device_ordinal);
  }
  return "unknown";
}

void set_device_memory_ops(MemorySpace::Kind kind, DeviceMemoryOps* ops) {
  installed_ops[static_cast<int>(kind)].store(ops);
}

DeviceMemoryOps& device_memory_ops(const char* what, MemorySpace space) {
  DeviceMemoryOps* ops = installed_ops[static_cast<int>(space.kind)].load();
  if (ops == nullptr) {
    detail::throw_error(ErrorCode::kFailedPrecondition, "Tensor",
                        "{} on {} memory, but no device memory support is installed", what,
                        space.to_string());
  }
  return *ops;
}

}  // namespace tessel
