// The measured bubble of a pipeline's step: for each stage, the fraction of the step's wall time
// its devices' streams were not computing, beside the formula's bubble and the time the stage's
// transfers to and from its neighbours took (docs/pipeline.md, "The measured bubble").
//
//   PipelineIdleMeter meter(devices_per_stage, deadline);   // synchronizes, reads the streams
//   DTensor y = meter.transfer(0, 1, [&] { return relayout(x, to_stage_1); });
//   ...                                                       // the schedule's actions
//   PipelineIdle idle = meter.finish();                       // synchronizes, reads again
//   idle.stages[1].idle_fraction;                            // 1 - computing / wall
//
// What is measured, per device, from its busy-time counters (tessel/runtime/busy_time.h): the
// time its op kernels ran is the time it computed; a stage's computing time is the mean over its
// devices (of this process). Idle is 1 - computing / wall, the wall time from the meter's start
// to finish, both taken with every device's stream drained. Communication (the time in
// collectives, waiting for peers included) is reported beside it.
//
// A transfer's time is the shortest time any of its devices (of this process) spent in its
// collectives: the device that arrived last waited for nobody, so its time is the data's
// movement (and the pending sums' reduction) without the wait for a late peer, which is the
// bubble's. It counts for both the sending and the receiving stage. Under several processes only
// this process's devices are seen: a transfer whose other side is elsewhere counts its waiting,
// until the processes' logs of their transfers are put together (transfer_seconds_across, which
// GptPipeline::idle_everywhere runs), where each transfer counts its shorter side.
//
// On CPU devices the time a kernel's thread is descheduled (more devices than cores) counts as
// computing: the devices' view, not the cores'.
//
// Thread safety: transfer() may be called from several threads at once (stage threads); then a
// device in two transfers at once counts both in each, and the shortest side still bounds the
// transfer. The constructor and finish() run on one thread, before and after the transfers.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "tessel/runtime/busy_time.h"
#include "tessel/runtime/device.h"

namespace tessel::train {

struct StageIdle {
  int devices = 0;                   // of this process (0: the stage is elsewhere, not measured)
  double computing_seconds = 0;      // in op kernels, mean over the stage's devices
  double communication_seconds = 0;  // in collectives, mean over the stage's devices
  double transfer_seconds = 0;       // its transfers between stages (see above), summed
  double idle_fraction = 0;          // 1 - computing / wall
  double transfer_fraction = 0;      // transfer / wall
};

// One transfer of a window as this process saw it: its stages, and the shortest time any of this
// process's devices in it spent in its collectives (-1: none of them took part).
struct TransferRecord {
  int from = 0, to = 0;
  double seconds = -1;
};

struct PipelineIdle {
  double wall_seconds = 0;
  std::vector<StageIdle> stages;
  int transfers = 0;  // transfers between stages counted
  int windows = 0;    // windows added (a step's schedule each)
  // Every transfer of the window in order, the seconds summed over the windows added (emptied
  // when two windows' transfers differ: stage threads issue them in no fixed order).
  std::vector<TransferRecord> log;
  // Another window's figures added (sums of seconds; fractions recomputed over the total wall).
  void add(const PipelineIdle& other);
};

// Each stage's transfer seconds from the logs of the processes that hold the stages (logs[s]:
// the log of stage s's process; all of the same transfers in the same order): a transfer counts
// the shorter of its two sides' times, for both its stages. Under several processes a side's
// time includes its wait for the other process; the side that arrived last waited for nobody.
// Logs of other lengths or transfers, or not one per stage: kInvalidArgument.
std::vector<double> transfer_seconds_across(const std::vector<std::vector<TransferRecord>>& logs);

// The figures of one stage from its devices' stream readings at both ends of a window of
// `wall_seconds` (one reading per device, the same order in both) and its transfers' seconds.
// Readings of different sizes, none, or wall_seconds <= 0: kInvalidArgument.
StageIdle stage_idle(const std::vector<BusyTime>& before, const std::vector<BusyTime>& after,
                     double wall_seconds, double transfer_seconds);

// The time of one transfer from its devices' readings around it: the least communication time
// among the devices that communicated (0 when none did).
double transfer_seconds(const std::vector<BusyTime>& before, const std::vector<BusyTime>& after);

class PipelineIdleMeter {
 public:
  using Clock = std::chrono::steady_clock;
  // `stages`: each stage's devices of this process (a stage with none is not measured: its
  // figures stay 0, devices 0). Drains every device's stream by `deadline` (kDeadlineExceeded
  // naming the device whose work did not end; a stream's pending error is thrown as
  // Stream::synchronize throws it), then reads them and the clock.
  PipelineIdleMeter(std::vector<std::vector<Device*>> stages, Clock::time_point deadline);

  // Runs `fn`, a transfer from stage `from` to stage `to` (which waits for its collectives: a
  // relayout), and counts its time for both stages.
  template <typename F>
  auto transfer(int from, int to, F&& fn) {
    const std::vector<BusyTime> before = read(from, to);
    auto out = std::forward<F>(fn)();
    count_transfer(from, to, before);
    return out;
  }
  // Drains every stream by `deadline` (as the constructor), reads them and the clock: the
  // window's figures.
  PipelineIdle finish(Clock::time_point deadline);

 private:
  // The readings of the devices of stages `from` and `to`, in that order.
  std::vector<BusyTime> read(int from, int to) const;
  void count_transfer(int from, int to, const std::vector<BusyTime>& before);
  void drain(Clock::time_point deadline) const;

  std::vector<std::vector<Device*>> stages_;
  std::vector<std::vector<BusyTime>> start_;  // per stage, per device
  std::mutex mu_;                             // guards the two below
  std::vector<double> transfer_seconds_;      // per stage
  std::vector<TransferRecord> log_;
  int transfers_ = 0;
  Clock::time_point started_;
};

}  // namespace tessel::train
