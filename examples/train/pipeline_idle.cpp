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
  const bool same_transfers =
      log.size() == other.log.size() &&
      std::equal(log.begin(), log.end(), other.log.begin(),
                 [](const TransferRecord& x, const TransferRecord& y) {
                   return x.from == y.from && x.to == y.to && (x.seconds < 0) == (y.seconds < 0);
                 });
  if (same_transfers) {
    for (size_t i = 0; i < log.size(); ++i) {
      if (log[i].seconds >= 0) log[i].seconds += other.log[i].seconds;
    }
  } else {
    log.clear();
  }
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

std::vector<double> transfer_seconds_across(const std::vector<std::vector<TransferRecord>>& logs) {
  const size_t n = logs.empty() ? 0 : logs.front().size();
  for (const std::vector<TransferRecord>& log : logs) {
    bool same = log.size() == n;
    for (size_t i = 0; same && i < n; ++i) {
      same = log[i].from == logs.front()[i].from && log[i].to == logs.front()[i].to;
    }
    if (!same) {
      throw Error(ErrorCode::kInvalidArgument, kComponent,
                  fmt::format("the stages' transfer logs differ ({} and {} transfers, or other "
                              "stages): they are not of the same schedule",
                              n, log.size()));
    }
  }
  std::vector<double> out(logs.size(), 0.0);
  for (size_t i = 0; i < n; ++i) {
    const int from = logs.front()[i].from, to = logs.front()[i].to;
    if (from < 0 || to < 0 || static_cast<size_t>(from) >= logs.size() ||
        static_cast<size_t>(to) >= logs.size()) {
      throw Error(
          ErrorCode::kInvalidArgument, kComponent,
          fmt::format("transfer {} is between stages {} and {}, of {}", i, from, to, logs.size()));
    }
    double least = std::numeric_limits<double>::infinity();
    for (int s : {from, to}) {
      const double t = logs[static_cast<size_t>(s)][i].seconds;
      if (t >= 0) least = std::min(least, t);
    }
    if (least == std::numeric_limits<double>::infinity()) continue;
    out[static_cast<size_t>(from)] += least;
    if (to != from) out[static_cast<size_t>(to)] += least;
  }
  return out;
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
  const bool here = !stages_.at(static_cast<size_t>(from)).empty() ||
                    !stages_.at(static_cast<size_t>(to)).empty();
  std::lock_guard<std::mutex> lock(mu_);
  transfer_seconds_.at(static_cast<size_t>(from)) += seconds;
  if (to != from) transfer_seconds_.at(static_cast<size_t>(to)) += seconds;
  log_.push_back({from, to, here ? seconds : -1.0});
  ++transfers_;
}

PipelineIdle PipelineIdleMeter::finish(Clock::time_point deadline) {
  drain(deadline);
  PipelineIdle out;
  out.wall_seconds = std::chrono::duration<double>(Clock::now() - started_).count();
  out.transfers = transfers_;
  out.windows = 1;
  out.log = log_;
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
