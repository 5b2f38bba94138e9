// GpuEvent: a point in a GPU device's stream, for ordering work between devices and for waiting
// on the host with a deadline (a CUDA event underneath).
//
//   GpuEvent done(gpu0);
//   done.record();                        // after everything queued on gpu0's stream so far
//   done.make_wait(gpu1);                 // gpu1's later work starts after that point
//   done.synchronize(deadline, "copy");   // the host waits, at most until `deadline`
//
// Errors: a CPU device: kInvalidArgument naming it; built without CUDA: kUnavailable; a wait
// past its deadline: kDeadlineExceeded naming the device and what was awaited; a CUDA error:
// the code of that error (kInternal, kResourceExhausted) with CUDA's name for it.
//
// Thread safety: one thread at a time per event.
#pragma once

#include <chrono>
#include <memory>
#include <string_view>

namespace tessel {

class Device;

class GpuEvent {
 public:
  explicit GpuEvent(Device& gpu);
  ~GpuEvent();
  GpuEvent(const GpuEvent&) = delete;
  GpuEvent& operator=(const GpuEvent&) = delete;

  // Marks the current end of the device's stream.
  void record();
  // True once the work before the last record() has finished (or none was recorded).
  bool done() const;
  // `other` (a GPU device) runs its later stream work after the recorded point.
  void make_wait(Device& other) const;
  // Blocks until done() or `deadline`; then kDeadlineExceeded naming the device and `what`.
  void synchronize(std::chrono::steady_clock::time_point deadline, std::string_view what) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessel
