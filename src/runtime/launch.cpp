// Internal: stream launches with bounded waits and root-cause errors (see launch.h).
#include "runtime/launch.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "core/errors.h"
#include "tessel/core/error.h"

namespace tessel::detail {
namespace {

enum class TaskState { kQueued, kRunning, kDone };

// A task's failure as plain data, taken on the thread that caught it: the exception object
// itself stays on that thread (exception_ptr's reference count is invisible to TSan, and the
// controller never needs the object, only its code and text).
struct Failure {
  bool failed = false;
  ErrorCode code = ErrorCode::kInternal;
  std::string what;
  bool names_step = false;  // `what` already names the step and the device
};

Failure failure_of(const std::exception_ptr& e) {
  Failure f{true, ErrorCode::kInternal, "unknown exception", false};
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    f.code = err.code();
    f.what = err.what();
  } catch (const std::exception& err) {
    f.what = err.what();
  } catch (...) {
  }
  return f;
}

}  // namespace

// The tasks' progress, shared by the controller and the tasks on the streams.
struct StreamLaunch::State {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<TaskState> state;
  std::vector<Failure> failures;
  size_t done = 0;
  bool enqueued = false;
  std::function<void(const std::string&)> abort;

  void finish(size_t i, Failure failure) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (state[i] == TaskState::kDone) return;
      state[i] = TaskState::kDone;
      failures[i] = std::move(failure);
      ++done;
    }
    cv.notify_all();
  }
};

namespace {

using Launch = StreamLaunch::State;

// Owned by one task's function: when the stream destroys a task it skipped, marks it failed.
struct Ticket {
  std::shared_ptr<Launch> launch;
  size_t index;
  std::string step;
  std::string device;
  Ticket(std::shared_ptr<Launch> l, size_t i, std::string s, std::string d)
      : launch(std::move(l)), index(i), step(std::move(s)), device(std::move(d)) {}
  Ticket(const Ticket&) = delete;
  Ticket& operator=(const Ticket&) = delete;
  ~Ticket() {
    bool ran = false;
    {
      std::lock_guard<std::mutex> lock(launch->mu);
      ran = launch->state[index] == TaskState::kDone;
    }
    if (ran) return;
    const std::string reason = fmt::format(
        "{} was skipped on {}: an earlier op on its stream failed (its synchronize() reports it)",
        step, device);
    if (launch->abort) launch->abort(reason);
    launch->finish(index, Failure{true, ErrorCode::kFailedPrecondition, reason, true});
  }
};

// The root cause among the failures (the first that is not kAborted), thrown as a new Error
// naming its step and device.
[[noreturn]] void throw_root_cause(const std::string& component, const std::string& step,
                                   const std::vector<StreamTask>& tasks,
                                   const std::vector<Failure>& failures) {
  size_t pick = failures.size();
  for (size_t i = 0; i < failures.size(); ++i) {
    if (!failures[i].failed) continue;
    if (pick == failures.size()) pick = i;
    if (failures[i].code != ErrorCode::kAborted) {
      pick = i;
      break;
    }
  }
  const Failure& f = failures[pick];
  if (f.names_step) throw Error(f.code, component, f.what);
  throw_error(f.code, component, "{} on {} failed: {}", step, tasks[pick].device->name(), f.what);
}

// Serialises the enqueueing of launches (TF's collective launch lock): the tasks of one launch
// reach every stream before those of another, so two launches over shared devices can never
// wait for each other in opposite orders.
std::mutex& launch_mutex() {
  static std::mutex* mu = new std::mutex();  // never destroyed: launches may run during exit
  return *mu;
}

// The stream task of task `index`: marks it running, runs fn, records its failure (aborting the
// group, unless it was itself aborted) and marks it done.
std::function<void()> stream_task(std::shared_ptr<Ticket> ticket, std::function<void()> fn) {
  return [ticket = std::move(ticket), fn = std::move(fn)]() mutable {
    Launch& l = *ticket->launch;
    {
      std::lock_guard<std::mutex> lock(l.mu);
      l.state[ticket->index] = TaskState::kRunning;
    }
    l.cv.notify_all();
    Failure failure;
    try {
      fn();
    } catch (...) {
      failure = failure_of(std::current_exception());
    }
    fn = nullptr;  // release the task's captures (its tensors) before it counts as done
    if (failure.failed && l.abort && failure.code != ErrorCode::kAborted) {
      l.abort(fmt::format("{} failed on {}: {}", ticket->step, ticket->device, failure.what));
    }
    l.finish(ticket->index, std::move(failure));
  };
}

}  // namespace

StreamLaunch::StreamLaunch(std::string component, std::string step, std::vector<StreamTask> tasks,
                           Clock::time_point deadline, std::string within,
                           std::function<void(const std::string&)> abort)
    : component_(std::move(component)),
      step_(std::move(step)),
      tasks_(std::move(tasks)),
      deadline_(deadline),
      within_(std::move(within)),
      state_(std::make_shared<State>()) {
  state_->state.assign(tasks_.size(), TaskState::kQueued);
  state_->failures.resize(tasks_.size());
  state_->abort = std::move(abort);
}

void StreamLaunch::enqueue_together(const std::vector<StreamLaunch*>& launches) {
  std::lock_guard<std::mutex> enqueue_lock(launch_mutex());
  std::optional<Failure> refused;  // a stream refused a task: every task after it fails too
  for (StreamLaunch* launch : launches) {
    {
      std::lock_guard<std::mutex> lock(launch->state_->mu);
      if (std::exchange(launch->state_->enqueued, true)) continue;
    }
    for (size_t i = 0; i < launch->tasks_.size(); ++i) {
      StreamTask& task = launch->tasks_[i];
      // Held here too, so that a refused task is failed below with the stream's error before
      // its ticket (which would call it skipped) dies.
      std::shared_ptr<Ticket> ticket;
      if (!refused) {
        ticket = std::make_shared<Ticket>(launch->state_, i, launch->step_, task.device->name());
        try {
          task.device->stream().enqueue(launch->step_, stream_task(ticket, std::move(task.fn)));
          continue;
        } catch (...) {
          refused = failure_of(std::current_exception());
        }
      }
      // Aborting the group makes the tasks already queued fail fast.
      if (launch->state_->abort) launch->state_->abort(refused->what);
      launch->state_->finish(i, *refused);
    }
  }
}

void StreamLaunch::wait() {
  Launch& l = *state_;
  const size_t n = tasks_.size();
  std::unique_lock<std::mutex> lock(l.mu);
  while (l.done < n) {
    bool any_error = false;
    bool any_running = false;
    for (size_t i = 0; i < n; ++i) {
      any_error = any_error || l.failures[i].failed;
      any_running = any_running || l.state[i] == TaskState::kRunning;
    }
    if (any_error && !any_running) {
      lock.unlock();
      if (l.abort) l.abort(step_ + " failed: giving up on the devices that did not start it");
      lock.lock();
      break;
    }
    if (Clock::now() >= deadline_) {
      std::vector<std::string> late;
      bool any_queued = false;
      for (size_t i = 0; i < n; ++i) {
        if (l.state[i] == TaskState::kDone) continue;
        Stream& s = tasks_[i].device->stream();
        if (l.state[i] == TaskState::kQueued) {
          any_queued = true;
          late.push_back(fmt::format("{} (its stream is running '{}', {} ops pending)",
                                     tasks_[i].device->name(), s.current_op(), s.pending()));
        } else {
          late.push_back(fmt::format("{} (still running it)", tasks_[i].device->name()));
        }
      }
      const std::string reason =
          fmt::format("{} did not {} {} on {}", step_, any_queued ? "start" : "finish", within_,
                      fmt::join(late, ", "));
      lock.unlock();
      if (l.abort) l.abort(reason);
      lock.lock();
      if (!any_error) throw Error(ErrorCode::kDeadlineExceeded, component_, reason);
      break;
    }
    l.cv.wait_until(lock, deadline_);
  }
  const std::vector<Failure> failures = l.failures;
  lock.unlock();
  for (const Failure& f : failures) {
    if (f.failed) throw_root_cause(component_, step_, tasks_, failures);
  }
}

std::chrono::milliseconds CallDeadline::left() const {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(at - Clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

std::string CallDeadline::within() const { return fmt::format("within {} ms", timeout.count()); }

void run_on_streams(const std::string& component, const std::string& step,
                    std::vector<StreamTask> tasks, const CallDeadline& deadline,
                    const std::function<void(const std::string&)>& abort) {
  if (tasks.empty()) return;
  const auto launch_deadline =
      deadline.at + deadline.timeout / 10 + std::chrono::milliseconds(50);
  StreamLaunch launch(component, step, std::move(tasks), launch_deadline, deadline.within(),
                      abort);
  StreamLaunch::enqueue_together({&launch});
  launch.wait();
}

void run_on_streams(const std::string& component, const std::string& step,
                    std::vector<StreamTask> tasks, std::chrono::milliseconds timeout,
                    const std::function<void(const std::string&)>& abort) {
  run_on_streams(component, step, std::move(tasks), CallDeadline::after(timeout), abort);
}

}  // namespace tessel::detail
