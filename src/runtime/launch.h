// Internal: runs one step of a multi-device operation (a cross-device op, a relayout) on the
// streams of its devices and waits for it.
//
// Each task runs on its device's stream, in order with the work already queued there. Launches
// are enqueued one at a time, process-wide (TF's launch lock), so every stream sees concurrent
// launches from different threads in the same order and they cannot deadlock each other. The
// controller waits until every task finished, with two exits that keep the wait bounded:
// - a task failed and no task is running any more (the others are still queued behind other
//   work, or done): the group is aborted so that the queued ones fail at once when they run;
// - a task has not started `timeout` (+10%, + 50 ms) after the launch: the group is aborted and
//   kDeadlineExceeded names the device and what its stream is running.
// A task that fails aborts the group at once, so that its peers do not wait out their deadline;
// a task the stream skips (an earlier op on it failed) does the same.
// Errors are rethrown as Error(code of the root cause, `component`,
// "<step> on <device> failed: <what>"), the root cause being the first failure that is not
// kAborted (the others' failures are consequences of it).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "tessel/runtime/device.h"

namespace tessel::detail {

struct StreamTask {
  Device* device = nullptr;
  std::function<void()> fn;
};

// `step` names the tasks in the streams and in errors ("all_reduce", "copy", ...). `abort` (may
// be empty) aborts the communicator group the tasks share.
void run_on_streams(const std::string& component, const std::string& step,
                    std::vector<StreamTask> tasks,
                    std::chrono::milliseconds timeout,
                    const std::function<void(const std::string&)>& abort = nullptr);

}  // namespace tessel::detail
