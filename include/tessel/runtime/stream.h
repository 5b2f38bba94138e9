// Stream: an in-order work queue with one worker thread (one per runtime Device).
//
// enqueue() hands a named task to the worker and returns at once; tasks run one at a time in
// the order they were enqueued. synchronize() waits until everything enqueued so far has run.
//
//   Stream& s = runtime.device(1).stream();
//   s.enqueue("scale", [t]() mutable { t.fill(2.0); });   // returns before the work runs
//   s.synchronize();                                       // t is filled; errors surface here
//
// Errors are sticky, as on a CUDA stream: when a task throws, the error is captured and every
// task still queued, or enqueued before the error is reported, is skipped (destroyed without
// running). The next synchronize() reports it, once, as a tessel::Error with the task's code
// (kResourceExhausted for std::bad_alloc, kInternal for another exception that is not a
// tessel::Error) and the message
//   "Stream: op 'all_reduce' on /job:localhost/replica:0/task:0/device:CPU:1 failed: <what()>"
// (plus "; N later ops skipped" when some were). After that the stream runs new work again.
//
// Destruction (or shutdown()) drains: queued tasks still run (or are skipped, when an error is
// pending), then the worker is joined. An error never reported is dropped.
//
// Thread safety: every method may be called from any thread, including enqueue() from a task of
// this or another stream. synchronize() from a task of this same stream would wait for itself:
// it fails with kFailedPrecondition instead. When several threads synchronize at once, the
// error goes to one of them. The worker sleeps on a condition variable while the queue is empty.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace tessel {

class Stream {
 public:
  // Starts the worker thread (the system refuses: kUnavailable). `label` names the stream in
  // messages (a device name).
  explicit Stream(std::string label);
  // shutdown(): drains the queue and joins the worker.
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  const std::string& label() const { return label_; }

  // Queues fn to run after everything enqueued before it; never waits for the work. `op_name`
  // names the task in errors and diagnostics. An empty fn: kInvalidArgument; after shutdown():
  // kFailedPrecondition. Both name the op.
  void enqueue(std::string op_name, std::function<void()> fn);

  // Runs fn on the calling thread now, as the stream's next task, when the stream is idle
  // (nothing queued or running, no pending error, not shut down): false without running it
  // otherwise. Tasks enqueued meanwhile wait for it. A throw becomes the stream's sticky error,
  // as from the worker. For tiny work, where waking the worker costs more than the work (an
  // eager op on a few elements), in the same order as enqueue would have run it.
  bool run_inline_if_idle(const std::string& op_name, const std::function<void()>& fn);
  // Waits until every task enqueued before the call has finished (its captures destroyed too),
  // then reports a captured error, if any, by throwing it (see above).
  void synchronize();
  // As synchronize(), giving up at `deadline`: true when the work finished (the error, if
  // any, is thrown), false when tasks are still pending at the deadline (the error, if any,
  // stays captured).
  bool synchronize(std::chrono::steady_clock::time_point deadline);
  // As above with deadline = now + timeout. A negative timeout: kInvalidArgument.
  bool synchronize(std::chrono::milliseconds timeout);

  // Tasks enqueued and not yet finished (queued plus running).
  size_t pending() const;
  // Waits until fewer than `limit` tasks are pending, or until `deadline`: true when they are.
  // Reports no error (synchronize() does). From a task of this stream: true at once (it would
  // wait for itself). For callers that bound how far they run ahead of the stream.
  bool wait_until_pending_below(size_t limit, std::chrono::steady_clock::time_point deadline);
  // The name of the task running now; "" when none is.
  std::string current_op() const;
  // The name of the next queued task; "" when the queue is empty.
  std::string next_op() const;
  // True when called from one of this stream's tasks (its worker thread).
  bool on_worker_thread() const { return std::this_thread::get_id() == worker_id_; }

  // Stops accepting work, runs (or skips) what is queued, and joins the worker. Idempotent.
  // From a task of this stream: kFailedPrecondition.
  void shutdown();

 private:
  struct Task {
    std::string op;            // name for errors and diagnostics
    std::function<void()> fn;  // the work
  };

  void run();  // the worker's loop
  // Throws the captured error and clears it. Needs `lock` held.
  [[noreturn]] void report_error(std::unique_lock<std::mutex>& lock);
  void check_not_worker(const char* what) const;

  const std::string label_;       // device name
  mutable std::mutex mu_;         // guards everything below except worker_
  std::condition_variable work_;  // the worker waits here for tasks or shutdown
  std::condition_variable done_;  // synchronize() waits here for completed_ to advance
  std::deque<Task> queue_;        // tasks not started yet
  uint64_t enqueued_ = 0;         // tasks ever enqueued (a task's ticket is its position)
  uint64_t completed_ = 0;        // tasks ever finished or skipped; in order, so <= enqueued_
  std::string current_;           // op running now, "" when none
  bool inline_running_ = false;   // run_inline_if_idle is running a task on its caller
  bool stopping_ = false;         // shutdown() was called: accept no more work
  std::exception_ptr error_;      // the first failure not yet reported
  std::string error_op_;          // its op
  int64_t skipped_ = 0;           // tasks skipped since the failure
  std::thread::id worker_id_;     // to detect a wait from inside a task
  std::mutex join_mu_;            // serialises joining worker_
  std::thread worker_;            // runs run(); joined by shutdown()
};

}  // namespace tessel
