#include "checkpoint/background_writer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <utility>

namespace tessel::checkpoint::detail {

BackgroundWriter::BackgroundWriter() : thread_([this] { loop(); }) {}

BackgroundWriter::~BackgroundWriter() {
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return !busy_; });
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void BackgroundWriter::run(std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    job_ = std::move(job);
    busy_ = true;
    failure_ = nullptr;
  }
  changed_.notify_all();
}

bool BackgroundWriter::finished(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return !busy_; });
}

std::exception_ptr BackgroundWriter::take_failure() {
  std::lock_guard lock(mutex_);
  return std::exchange(failure_, nullptr);
}

void BackgroundWriter::loop() {
  // Best effort: where lowering is refused the writer runs at the caller's priority.
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] { return stop_ || job_; });
    if (stop_) return;
    std::function<void()> job = std::move(job_);
    job_ = nullptr;
    lock.unlock();
    std::exception_ptr failure;
    try {
      job();
    } catch (...) {
      failure = std::current_exception();
    }
    job = nullptr;  // what the job holds goes before the caller hears it finished
    lock.lock();
    failure_ = failure;
    busy_ = false;
    changed_.notify_all();
  }
}

}  // namespace tessel::checkpoint::detail
