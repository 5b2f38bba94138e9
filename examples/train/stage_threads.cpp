// StageThreads (stage_threads.h).
#include "stage_threads.h"

#include <utility>

#include <fmt/format.h>

#include "tessel/core/error.h"

namespace tessel::train {

StageThreads::StageThreads(int n) {
  if (n < 1) {
    throw Error(ErrorCode::kInvalidArgument, "stage threads",
                fmt::format("needs at least one thread, got {}", n));
  }
  for (int i = 0; i < n; ++i) threads_.emplace_back([this, i] { loop(static_cast<size_t>(i)); });
}

StageThreads::~StageThreads() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return !running_; });
    stopping_ = true;
  }
  work_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void StageThreads::run(std::vector<std::function<void()>> jobs) {
  if (jobs.size() != threads_.size()) {
    throw Error(ErrorCode::kInvalidArgument, "stage threads",
                fmt::format("{} jobs for {} threads", jobs.size(), threads_.size()));
  }
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (running_) {
      throw Error(ErrorCode::kFailedPrecondition, "stage threads",
                  "run() while another run is in progress");
    }
    running_ = true;
    jobs_ = std::move(jobs);
    finished_ = 0;
    error_ = nullptr;
    ++generation_;
    work_.notify_all();
    done_.wait(lock, [this] { return finished_ == threads_.size(); });
    running_ = false;
    jobs_.clear();
    error = std::exchange(error_, nullptr);
  }
  done_.notify_all();  // a destructor waiting for the run
  if (error) std::rethrow_exception(error);
}

void StageThreads::loop(size_t index) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    std::function<void()> job = std::move(jobs_[index]);
    lock.unlock();
    std::exception_ptr failure;
    try {
      if (job) job();
    } catch (...) {
      failure = std::current_exception();
    }
    job = nullptr;
    lock.lock();
    if (failure && !error_) error_ = failure;
    ++finished_;
    done_.notify_all();
  }
}

}  // namespace tessel::train
