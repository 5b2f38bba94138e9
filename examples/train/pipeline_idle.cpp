// PipelineIdleMeter and its arithmetic (pipeline_idle.h).
#include "pipeline_idle.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "tessel/core/error.h"

namespace tessel::train {
namespace {

constexpr const char* kComponent = "pipeline idle";

}  // namespace

void PipelineIdle::add(const PipelineIdle& other) {
  if (stages.empty()) {
    *this = other;
    return;
  }
  if (other.stages.size() != stages.size()) {
    throw Error(ErrorCode::kInvalidArgument, kComponent,
                fmt::format("adding a window of {} stages to one of {}", other.stages.size(),
                            stages.size()));
  }
  wall_seconds += other.wall_seconds;
  transfers += other.transfers;
  windows += other.windows;
  for (size_t s = 0; s < stages.size(); ++s) {
    StageIdle& a = stages[s];
    const StageIdle& b = other.stages[s];
    a.computing_seconds += b.computing_seconds;
    a.communication_seconds += b.communication_seconds;
    a.transfer_seconds += b.transfer_seconds;
    if (a.devices > 0) {
      a.idle_fraction = 1 - a.computing_seconds / wall_seconds;
      a.transfer_fraction = a.transfer_seconds / wall_seconds;
    }
  }
}

StageIdle stage_idle(const std::vector<BusyTime>& before, const std::vector<BusyTime>& after,
                     double wall_seconds, double transfer_seconds) {
  if (before.size() != after.size() || before.empty() || !(wall_seconds > 0)) {
    throw Error(ErrorCode::kInvalidArgument, kComponent,
                fmt::format("a stage's figures need as many readings after the window as before "
                            "(got {} and {}), at least one, and a wall time > 0 (got {} s)",
                            before.size(), after.size(), wall_seconds));
  }
  StageIdle out;
  out.devices = static_cast<int>(before.size());
  for (size_t d = 0; d < before.size(); ++d) {
    out.computing_seconds += after[d].kernel_seconds - before[d].kernel_seconds;
    out.communication_seconds += after[d].communication_seconds - before[d].communication_seconds;
  }
  out.computing_seconds /= out.devices;
  out.communication_seconds /= out.devices;
  out.transfer_seconds = transfer_seconds;
  out.idle_fraction = 1 - out.computing_seconds / wall_seconds;
  out.transfer_fraction = transfer_seconds / wall_seconds;
  return out;
}

double transfer_seconds(const std::vector<BusyTime>& before, const std::vector<BusyTime>& after) {
  double least = std::numeric_limits<double>::infinity();
  for (size_t d = 0; d < std::min(before.size(), after.size()); ++d) {
    const double t = after[d].communication_seconds - before[d].communication_seconds;
    if (t > 0) least = std::min(least, t);
  }
  return least == std::numeric_limits<double>::infinity() ? 0.0 : least;
}

PipelineIdleMeter::PipelineIdleMeter(std::vector<std::vector<Device*>> stages,
                                     Clock::time_point deadline)
    : stages_(std::move(stages)), transfer_seconds_(stages_.size(), 0.0) {
  drain(deadline);
  for (const std::vector<Device*>& devices : stages_) {
    std::vector<BusyTime> readings;
    for (Device* d : devices) readings.push_back(busy_time(*d));
    start_.push_back(std::move(readings));
  }
  started_ = Clock::now();
}

void PipelineIdleMeter::drain(Clock::time_point deadline) const {
  for (const std::vector<Device*>& devices : stages_) {
    for (Device* d : devices) {
      if (!d->stream().synchronize(deadline)) {
        throw Error(ErrorCode::kDeadlineExceeded, kComponent,
                    fmt::format("the stream of {} did not finish its work by the deadline "
                                "(running '{}')",
                                d->name(), d->stream().current_op()));
      }
    }
  }
}

std::vector<BusyTime> PipelineIdleMeter::read(int from, int to) const {
  std::vector<BusyTime> out;
  for (int s : {from, to}) {
    for (Device* d : stages_.at(static_cast<size_t>(s))) out.push_back(busy_time(*d));
  }
  return out;
}

void PipelineIdleMeter::count_transfer(int from, int to, const std::vector<BusyTime>& before) {
  const double seconds = transfer_seconds(before, read(from, to));
  std::lock_guard<std::mutex> lock(mu_);
  transfer_seconds_.at(static_cast<size_t>(from)) += seconds;
  if (to != from) transfer_seconds_.at(static_cast<size_t>(to)) += seconds;
  ++transfers_;
}

PipelineIdle PipelineIdleMeter::finish(Clock::time_point deadline) {
  drain(deadline);
  PipelineIdle out;
  out.wall_seconds = std::chrono::duration<double>(Clock::now() - started_).count();
  out.transfers = transfers_;
  out.windows = 1;
  for (size_t s = 0; s < stages_.size(); ++s) {
    if (stages_[s].empty()) {
      out.stages.emplace_back();
      continue;
    }
    std::vector<BusyTime> after;
    for (Device* d : stages_[s]) after.push_back(busy_time(*d));
    out.stages.push_back(stage_idle(start_[s], after, out.wall_seconds, transfer_seconds_[s]));
  }
  return out;
}

}  // namespace tessel::train
