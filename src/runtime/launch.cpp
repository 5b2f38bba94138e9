// Internal: stream launches with bounded waits and root-cause errors (see launch.h).
#include "runtime/launch.h"

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>

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

struct Launch {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<TaskState> state;
  std::vector<Failure> failures;
  size_t done = 0;
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
  throw_error(f.code, component, "{} on {} failed: {}", step, tasks[pick].device->name(),
              f.what);
}

// Serialises the enqueueing of launches (TF's collective launch lock): the tasks of one launch
// reach every stream before those of another, so two launches over shared devices can never
// wait for each other in opposite orders.
std::mutex& launch_mutex() {
  static std::mutex* mu = new std::mutex();  // never destroyed: launches may run during exit
  return *mu;
}

}  // namespace

void run_on_streams(const std::string& component, const std::string& step,
                    std::vector<StreamTask> tasks,
                    std::chrono::milliseconds timeout,
                    const std::function<void(const std::string&)>& abort) {
  if (tasks.empty()) return;
  auto launch = std::make_shared<Launch>();
  launch->state.assign(tasks.size(), TaskState::kQueued);
  launch->failures.resize(tasks.size());
  launch->abort = abort;
  const auto start_deadline =
      std::chrono::steady_clock::now() + timeout + timeout / 10 + std::chrono::milliseconds(50);

  std::unique_lock<std::mutex> enqueue_lock(launch_mutex());
  for (size_t i = 0; i < tasks.size(); ++i) {
    auto ticket = std::make_shared<Ticket>(launch, i, step, tasks[i].device->name());
    auto fn = tasks[i].fn;
    try {
      tasks[i].device->stream().enqueue(step, [ticket, fn]() mutable {
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
      });
    } catch (...) {
      // The tasks already queued fail fast: the ticket of this one aborted the group.
      enqueue_lock.unlock();
      ticket.reset();
      throw;
    }
  }
  enqueue_lock.unlock();

  std::unique_lock<std::mutex> lock(launch->mu);
  while (launch->done < tasks.size()) {
    bool any_error = false;
    bool any_running = false;
    bool any_queued = false;
    for (size_t i = 0; i < tasks.size(); ++i) {
      any_error = any_error || launch->failures[i].failed;
      any_running = any_running || launch->state[i] == TaskState::kRunning;
      any_queued = any_queued || launch->state[i] == TaskState::kQueued;
    }
    if (any_error && !any_running) {
      lock.unlock();
      if (abort) abort(step + " failed: giving up on the devices that did not start it");
      lock.lock();
      break;
    }
    if (any_queued && std::chrono::steady_clock::now() >= start_deadline) {
      std::vector<std::string> late;
      for (size_t i = 0; i < tasks.size(); ++i) {
        if (launch->state[i] != TaskState::kQueued) continue;
        Stream& s = tasks[i].device->stream();
        late.push_back(fmt::format("{} (its stream is running '{}', {} ops pending)",
                                   tasks[i].device->name(), s.current_op(), s.pending()));
      }
      const std::string reason = fmt::format("{} did not start within {} ms on {}", step,
                                             timeout.count(), fmt::join(late, ", "));
      lock.unlock();
      if (abort) abort(reason);
      lock.lock();
      if (!any_error) throw Error(ErrorCode::kDeadlineExceeded, component, reason);
      break;
    }
    if (any_queued) {
      launch->cv.wait_until(lock, start_deadline);
    } else {
      launch->cv.wait(lock);
    }
  }
  const std::vector<Failure> failures = launch->failures;
  lock.unlock();
  for (const Failure& f : failures) {
    if (f.failed) throw_root_cause(component, step, tasks, failures);
  }
}

}  // namespace tessel::detail
