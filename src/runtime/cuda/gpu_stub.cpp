// The CUDA backend's stub (built without CUDA): no GPU is visible, and what needs one throws
// kUnavailable.
#include "core/built_without.h"
#include "tessel/runtime/device.h"
#include "tessel/runtime/gpu.h"
#include "tessel/runtime/gpu_event.h"

namespace tessel {
namespace {
[[noreturn]] void unavailable(const char* component, const char* what) {
  detail::throw_built_without(detail::Backend::kCuda, component, what);
}
}  // namespace

bool built_with_cuda() { return false; }
int visible_gpu_count() { return 0; }

std::unique_ptr<Device> Device::make_gpu(DeviceName name, int, int, int64_t) {
  unavailable("Device", name.to_string().c_str());
}

struct GpuEvent::Impl {};
GpuEvent::GpuEvent(Device&) { unavailable("GpuEvent", "GpuEvent"); }
GpuEvent::~GpuEvent() = default;
void GpuEvent::record() { unavailable("GpuEvent", "record"); }
bool GpuEvent::done() const { unavailable("GpuEvent", "done"); }
void GpuEvent::make_wait(Device&) const { unavailable("GpuEvent", "make_wait"); }
void GpuEvent::synchronize(std::chrono::steady_clock::time_point, std::string_view) const {
  unavailable("GpuEvent", "synchronize");
}

}  // namespace tessel
