// Stream: the worker loop, sticky errors and bounded waits.
#include "tessel/runtime/stream.h"

#include <new>
#include <system_error>
#include <utility>

#include "core/errors.h"
#include "tessel/core/error.h"

namespace tessel {

Stream::Stream(std::string label) : label_(std::move(label)) {
  try {
    worker_ = std::thread([this] { run(); });
  } catch (const std::system_error& e) {
    detail::throw_error(ErrorCode::kUnavailable, "Stream",
                        "cannot start the worker thread of {}: {}", label_, e.what());
  }
  worker_id_ = worker_.get_id();  // read by tasks only after enqueue's lock: ordered
}

// Destroying a stream from one of its own tasks cannot join: shutdown() throws, which
// terminates (destructors are noexcept). That is a bug in the owner.
Stream::~Stream() { shutdown(); }

void Stream::enqueue(std::string op_name, std::function<void()> fn) {
  if (!fn) {
    detail::throw_invalid("Stream", "enqueue of op '{}' on {} with an empty function", op_name,
                          label_);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      detail::throw_error(ErrorCode::kFailedPrecondition, "Stream",
                          "enqueue of op '{}' on {} after shutdown", op_name, label_);
    }
    queue_.push_back(Task{std::move(op_name), std::move(fn)});
    ++enqueued_;
  }
  work_.notify_one();
}

bool Stream::run_inline_if_idle(const std::string& op_name, const std::function<void()>& fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || error_ || inline_running_ || !queue_.empty() || !current_.empty() ||
        completed_ != enqueued_) {
      return false;
    }
    ++enqueued_;
    current_ = op_name;
    inline_running_ = true;
  }
  std::exception_ptr failure;
  try {
    fn();
  } catch (...) {
    failure = std::current_exception();
  }
  bool queued = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    current_.clear();
    inline_running_ = false;
    if (failure && !error_) {
      error_ = std::move(failure);
      error_op_ = op_name;
      skipped_ = 0;
    }
    ++completed_;
    queued = !queue_.empty() || stopping_;
  }
  done_.notify_all();
  if (queued) work_.notify_one();  // only then: waking an idle worker for nothing costs a switch
  return true;
}

void Stream::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_.wait(lock, [this] { return !inline_running_ && (!queue_.empty() || stopping_); });
    if (queue_.empty()) return;  // stopping, and drained
    Task task = std::move(queue_.front());
    queue_.pop_front();
    std::exception_ptr failure;
    if (error_) {
      ++skipped_;  // sticky error: skip until reported
      lock.unlock();
    } else {
      current_ = task.op;
      lock.unlock();
      try {
        task.fn();
      } catch (...) {
        failure = std::current_exception();
      }
    }
    task.fn = nullptr;  // release the captures before the task counts as done
    lock.lock();
    current_.clear();
    if (failure && !error_) {
      error_ = std::move(failure);
      error_op_ = std::move(task.op);
      skipped_ = 0;
    }
    ++completed_;
    done_.notify_all();
  }
}

void Stream::check_not_worker(const char* what) const {
  if (on_worker_thread()) {
    std::string op;
    {
      std::lock_guard<std::mutex> lock(mu_);
      op = current_;
    }
    detail::throw_error(ErrorCode::kFailedPrecondition, "Stream",
                        "{} called from op '{}' running on {} itself would wait forever", what, op,
                        label_);
  }
}

void Stream::report_error(std::unique_lock<std::mutex>& lock) {
  std::exception_ptr error = std::exchange(error_, nullptr);
  const std::string op = std::move(error_op_);
  const int64_t skipped = std::exchange(skipped_, 0);
  lock.unlock();
  const std::string suffix = skipped > 0 ? fmt::format("; {} later ops skipped", skipped) : "";
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    detail::throw_error(e.code(), "Stream", "op '{}' on {} failed: {}{}", op, label_, e.what(),
                        suffix);
  } catch (const std::bad_alloc& e) {  // a kernel's own containers: the system is out of memory
    detail::throw_error(ErrorCode::kResourceExhausted, "Stream", "op '{}' on {} failed: {}{}", op,
                        label_, e.what(), suffix);
  } catch (const std::exception& e) {
    detail::throw_error(ErrorCode::kInternal, "Stream", "op '{}' on {} failed: {}{}", op, label_,
                        e.what(), suffix);
  } catch (...) {
    detail::throw_error(ErrorCode::kInternal, "Stream",
                        "op '{}' on {} failed: an exception that is not a std::exception{}", op,
                        label_, suffix);
  }
}

void Stream::synchronize() {
  check_not_worker("synchronize()");
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = enqueued_;
  done_.wait(lock, [&] { return completed_ >= target; });
  if (error_) report_error(lock);
}

bool Stream::synchronize(std::chrono::steady_clock::time_point deadline) {
  check_not_worker("synchronize(deadline)");
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = enqueued_;
  if (!done_.wait_until(lock, deadline, [&] { return completed_ >= target; })) return false;
  if (error_) report_error(lock);
  return true;
}

bool Stream::synchronize(std::chrono::milliseconds timeout) {
  if (timeout.count() < 0) {
    detail::throw_invalid("Stream", "synchronize on {} with a negative timeout of {} ms", label_,
                          timeout.count());
  }
  return synchronize(std::chrono::steady_clock::now() + timeout);
}

size_t Stream::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<size_t>(enqueued_ - completed_);
}

bool Stream::wait_until_pending_below(size_t limit,
                                      std::chrono::steady_clock::time_point deadline) {
  if (on_worker_thread()) return true;
  std::unique_lock<std::mutex> lock(mu_);
  return done_.wait_until(lock, deadline, [&] { return enqueued_ - completed_ < limit; });
}

std::string Stream::current_op() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

std::string Stream::next_op() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.empty() ? std::string() : queue_.front().op;
}

void Stream::shutdown() {
  check_not_worker("shutdown()");
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_.notify_all();
  std::lock_guard<std::mutex> join_lock(join_mu_);
  if (worker_.joinable()) worker_.join();
}

}  // namespace tessel
