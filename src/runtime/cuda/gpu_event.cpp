// GpuEvent over a CUDA event.
#include "tessel/runtime/gpu_event.h"

#include <cuda_runtime_api.h>

#include "core/errors.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/poll_until.h"
#include "tessel/runtime/device.h"

namespace tessel {

struct GpuEvent::Impl {
  Device* device = nullptr;
  cudaEvent_t event = nullptr;
};

namespace {
void require_gpu(const Device& d, const char* what) {
  if (d.cuda_stream() == nullptr) {
    detail::throw_invalid("GpuEvent", "{} needs a GPU device on a CUDA GPU, got {}", what, d.name());
  }
}
}  // namespace

GpuEvent::GpuEvent(Device& gpu) : impl_(std::make_unique<Impl>()) {
  require_gpu(gpu, "GpuEvent");
  impl_->device = &gpu;
  detail::ScopedCudaDevice on(gpu.gpu_ordinal());
  detail::check_cuda(cudaEventCreateWithFlags(&impl_->event, cudaEventDisableTiming), "GpuEvent",
                     fmt::format("cudaEventCreate on {}", gpu.name()));
}

GpuEvent::~GpuEvent() {
  if (impl_ && impl_->event != nullptr) (void)cudaEventDestroy(impl_->event);
}

void GpuEvent::record() {
  detail::ScopedCudaDevice on(impl_->device->gpu_ordinal());
  detail::check_cuda(
      cudaEventRecord(impl_->event, static_cast<cudaStream_t>(impl_->device->cuda_stream())),
      "GpuEvent", fmt::format("cudaEventRecord on {}", impl_->device->name()));
}

bool GpuEvent::done() const {
  const cudaError_t status = cudaEventQuery(impl_->event);
  if (status == cudaErrorNotReady) return false;
  detail::check_cuda(status, "GpuEvent", fmt::format("cudaEventQuery on {}", impl_->device->name()));
  return true;
}

void GpuEvent::make_wait(Device& other) const {
  require_gpu(other, "make_wait");
  detail::ScopedCudaDevice on(other.gpu_ordinal());
  detail::check_cuda(
      cudaStreamWaitEvent(static_cast<cudaStream_t>(other.cuda_stream()), impl_->event, 0),
      "GpuEvent", fmt::format("{} waiting for an event of {}", other.name(), impl_->device->name()));
}

void GpuEvent::synchronize(std::chrono::steady_clock::time_point deadline,
                           std::string_view what) const {
  // Polls instead of cudaEventSynchronize, which cannot be given a deadline.
  if (!detail::poll_until(deadline, [this] { return done(); })) {
    detail::throw_error(ErrorCode::kDeadlineExceeded, "GpuEvent",
                        "{} on {} did not finish by its deadline", what, impl_->device->name());
  }
}

}  // namespace tessel
