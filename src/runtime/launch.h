// Internal: runs one step of a multi-device operation (a cross-device op, a relayout, one
// replica's part of a cross-replica collective) on the streams of its devices and waits for it.
//
//   run_on_streams("relayout", "all_gather", tasks, timeout, abort);   // enqueue, then wait
//   const CallDeadline d = CallDeadline::after(timeout);                // several steps, one
//   run_on_streams("relayout", "all_gather", tasks1, d, abort);         // budget
//   run_on_streams("relayout", "all_to_all", tasks2, d, abort);
//
//   // replicate(): each replica prepares its part; the last to arrive enqueues them all at once
//   auto part = std::make_shared<StreamLaunch>("ReplicaContext", "all_reduce", tasks, deadline,
//                                              "within 2000 ms", abort);
//   StreamLaunch::enqueue_together({part0.get(), part1.get()});   // on one thread
//   part->wait();                                                  // on each replica's thread
//
// Each task runs on its device's stream, in order with the work already queued there. Launches
// are enqueued one at a time, process-wide (TF's launch lock), so every stream sees concurrent
// launches from different threads in the same order and they cannot deadlock each other;
// enqueue_together puts several launches under one hold of the lock, so that they reach every
// stream next to each other (the parts of one collective whose members are launched by
// different controller threads). Streams are FIFO: concurrent launches over shared devices run
// in the order they were enqueued.
//
// The controller waits until every task finished, with exits that keep the wait bounded by the
// launch's deadline:
// - a task failed and no task is running any more (the others are still queued behind other
//   work, or done): the group is aborted so that the queued ones fail at once when they run;
// - the deadline passed with a task not started yet, or still running: the group is aborted
//   and kDeadlineExceeded names each such device and what its stream is running. The tasks
//   still on the streams own their captures, so nothing is freed under them.
// A task that fails aborts the group at once, so that its peers do not wait out their deadline;
// a task the stream skips (an earlier op on it failed) does the same.
// Errors are rethrown as Error(code of the root cause, `component`,
// "<step> on <device> failed: <what>"), the root cause being the first failure that is not
// kAborted (the others' failures are consequences of it).
//
// Thread safety: enqueue_together may run on any thread; wait() on one thread at a time.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessel/runtime/device.h"

namespace tessel::detail {

struct StreamTask {
  Device* device = nullptr;
  std::function<void()> fn;
};

class StreamLaunch {
 public:
  using Clock = std::chrono::steady_clock;
  // `step` names the tasks in the streams and in errors ("all_reduce", "copy", ...);
  // `within` says in errors what the deadline was ("within 100 ms"). `abort` (may be empty)
  // aborts the communicator group the tasks share.
  StreamLaunch(std::string component, std::string step, std::vector<StreamTask> tasks,
               Clock::time_point deadline, std::string within,
               std::function<void(const std::string&)> abort = nullptr);
  StreamLaunch(const StreamLaunch&) = delete;
  StreamLaunch& operator=(const StreamLaunch&) = delete;

  // Enqueues the tasks of every launch, in order, under one hold of the launch lock. Each
  // launch is enqueued once (later calls skip it). A stream that refuses a task (shut down)
  // fails that task and every task not enqueued yet: their launches' wait() reports it.
  static void enqueue_together(const std::vector<StreamLaunch*>& launches);
  // Waits for the tasks (enqueued, or failed to enqueue), as described above.
  void wait();

  struct State;  // the tasks' progress, shared with the tasks on the streams (launch.cpp)

 private:
  std::string component_;
  std::string step_;
  std::vector<StreamTask> tasks_;  // their functions move to the streams on enqueue
  Clock::time_point deadline_;
  std::string within_;
  std::shared_ptr<State> state_;
};

// The deadline of one call that runs several steps (a multi-step relayout, a reduce followed by
// a broadcast): fixed when the call starts, shared by every step, so that the call as a whole
// ends within its timeout instead of each step getting a fresh one.
struct CallDeadline {
  using Clock = std::chrono::steady_clock;
  Clock::time_point at;               // when the call's collectives give up
  std::chrono::milliseconds timeout;  // the call's whole budget, for messages

  static CallDeadline after(std::chrono::milliseconds timeout) {
    return {Clock::now() + timeout, timeout};
  }
  // Time left, at least 1 ms (0 means "the default" to the APIs that take a timeout).
  std::chrono::milliseconds left() const;
  // What errors say: "within 2000 ms".
  std::string within() const;
};

// One launch on its own: enqueue, then wait until `deadline.at` (+10% of its timeout, + 50 ms,
// so that a collective's own deadline, which names the late peer, normally fires first).
void run_on_streams(const std::string& component, const std::string& step,
                    std::vector<StreamTask> tasks, const CallDeadline& deadline,
                    const std::function<void(const std::string&)>& abort = nullptr);
// The same for a call of one step: the deadline is `timeout` from now.
void run_on_streams(const std::string& component, const std::string& step,
                    std::vector<StreamTask> tasks, std::chrono::milliseconds timeout,
                    const std::function<void(const std::string&)>& abort = nullptr);

}  // namespace tessel::detail
